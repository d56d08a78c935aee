"""Replacing a folder as a whole (images/, build/bake/) so that a signal, a SIGKILL or a crash at any
moment leaves the complete old tree or the complete new one at its path, never none, and the next
run clears what an interrupted one left.

How, step by step (`<name>` is the folder, all siblings live beside it):
1. the new tree is written into `.<name>.tmp-<random>`; killed here, that folder is litter;
2. it is swapped in: on Linux one renameat2(RENAME_EXCHANGE), atomic, so `<name>` is always whole
   (the tmp name then holds the old tree, litter until deleted); elsewhere, or on a filesystem that
   cannot exchange, `<name>` is renamed to `.<name>.old-PID` and the tmp folder to `<name>`. Between
   those two renames `<name>` is missing, so SIGINT/SIGTERM/SIGHUP are held off across them, and
   after a SIGKILL there `recover` renames `.<name>.old-PID` back (it is a complete tree: only a
   complete `<name>` is ever renamed to it);
3. litter is deleted; killed during that, the next run deletes the rest (`sweep`).

One run at a time per parent folder: an flock on the parent folder itself, so no lock file is left
in the repository and none is planted in a shared /tmp.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from builder.util.errors import UserError

_HELD = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _litter(out_dir: Path) -> re.Pattern[str]:
    """The exact names this module gives the siblings of out_dir (mkdtemp's 8 characters, a pid),
    so the litter of another folder (`images.tmp-x`) never matches."""
    name = re.escape(out_dir.name)
    return re.compile(rf"\.{name}\.(?:tmp-[a-z0-9_]{{8}}|old-[0-9]+)")


@contextlib.contextmanager
def folder_lock(out_dir: Path) -> Iterator[None]:
    """Hold an exclusive flock on out_dir's parent folder for the block (blocking).

    The parent is the user's own folder, so nobody else can plant a link where the lock lives, and
    nothing is written for it; renders of two folders in one parent take turns, which is harmless."""
    parent = out_dir.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise UserError(f"cannot use the folder {parent}: {exc.strerror}; check it and its permissions") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


def recover(out_dir: Path) -> None:
    """If a run was killed between its two renames, put the previous tree back at out_dir.

    Called before anything reads out_dir (the locks in images/ are read from it), so a killed
    render never makes the next command see a tree without its lock files."""
    if os.path.lexists(out_dir) or not _backups(out_dir):
        return
    with folder_lock(out_dir):
        recover_locked(out_dir)


def _backups(out_dir: Path) -> list[Path]:
    pattern = _litter(out_dir)
    try:
        names = os.listdir(out_dir.parent)
    except OSError:
        return []
    return [out_dir.parent / n for n in names if pattern.fullmatch(n) and ".old-" in n and _own_folder(out_dir.parent / n)]


def recover_locked(out_dir: Path) -> None:
    if os.path.lexists(out_dir):
        return
    backups = _backups(out_dir)
    if not backups:
        return
    newest = max(backups, key=lambda p: p.lstat().st_ctime)
    try:
        os.rename(newest, out_dir)
    except OSError as exc:
        raise UserError(
            f"{out_dir} is missing after an interrupted render and {newest.name} cannot be renamed back ({exc.strerror}); "
            f"rename {newest} to {out_dir.name} yourself"
        ) from None


def sweep(out_dir: Path) -> None:
    """Delete what interrupted runs left beside out_dir (call with the folder lock held, after
    `recover`: then every such folder belongs to a run that has ended)."""
    pattern = _litter(out_dir)
    try:
        names = os.listdir(out_dir.parent)
    except OSError:
        return
    for name in names:
        path = out_dir.parent / name
        if pattern.fullmatch(name) and _own_folder(path):
            shutil.rmtree(path, ignore_errors=True)


def _own_folder(path: Path) -> bool:
    """A real folder (never a link) of this user: the only kind this module makes."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def replace_folder(out_dir: Path, files: Mapping[str, bytes]) -> None:
    """Make out_dir hold exactly `files` (relative path -> bytes); call with the folder lock held."""
    recover_locked(out_dir)
    sweep(out_dir)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    except OSError as exc:
        raise UserError(f"cannot write beside {out_dir}: {exc.strerror}; check the folder and its permissions") from None
    old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
    try:
        _write(tmp, files)
        with held_signals():
            _swap(tmp, out_dir, old)
    except OSError as exc:
        raise UserError(f"cannot write {out_dir}: {exc.strerror}; check the folder and its permissions") from None
    finally:
        # Before the swap tmp is the partial new tree; after an exchange it is the old tree. `old` is
        # deleted only once out_dir stands again: it may be the only complete tree. Signals wait
        # for this too (a few hundred small files), so an interrupted render leaves no litter.
        with held_signals():
            shutil.rmtree(tmp, ignore_errors=True)
            if os.path.lexists(out_dir) and os.path.lexists(old):
                shutil.rmtree(old, ignore_errors=True)


def _write(tmp: Path, files: Mapping[str, bytes]) -> None:
    mode = 0o777 & ~_umask()
    for rel, data in files.items():
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for folder in [tmp, *(p for p in tmp.rglob("*") if p.is_dir())]:
        folder.chmod(mode)  # mkdtemp makes 0700; images/ is for everyone who may read the repository


def _swap(tmp: Path, out_dir: Path, old: Path) -> None:
    if not os.path.lexists(out_dir):
        os.rename(tmp, out_dir)
        return
    if exchange(tmp, out_dir):
        return
    os.rename(out_dir, old)
    try:
        os.rename(tmp, out_dir)
    except OSError:
        os.rename(old, out_dir)  # never leave no tree at all
        raise


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where the system or the
    filesystem cannot, and the caller falls back to two renames."""
    call = _renameat2()
    if call is None:
        return False
    if call(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    import ctypes  # noqa: PLC0415 - loaded by _renameat2 already; every command that does not render starts without it

    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(code, os.strerror(code), str(b))


_libc: list[Callable[..., int] | None] = []


def _renameat2() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    if not _libc:
        import ctypes  # noqa: PLC0415 - see exchange

        try:
            _libc.append(ctypes.CDLL(None, use_errno=True).renameat2)  # glibc >= 2.28
        except (OSError, AttributeError):
            _libc.append(None)
    return _libc[0]


@contextlib.contextmanager
def held_signals() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP off for the block: one that arrives meanwhile is delivered again,
    to the handler that was there, right after it.

    Python runs signal handlers in the main thread between bytecodes, whichever thread the OS
    delivered to; swapping the handlers (not masking one thread) is what keeps a handler from
    running between two renames and unwinding into a cleanup while neither tree stands at the path."""
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers never run in this thread, so nothing can interrupt it here
        return
    caught: list[int] = []
    previous: dict[signal.Signals, Any] = {}
    for sig in _HELD:
        handler = signal.getsignal(sig)
        if handler is not None:  # None: a handler not installed from Python, left alone
            previous[sig] = handler
            signal.signal(sig, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        for held, handler in previous.items():
            signal.signal(held, handler)
        for signum in dict.fromkeys(caught):
            signal.raise_signal(signum)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
