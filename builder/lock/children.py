"""What `builder lock` starts outside itself, uv processes and their temp folders, ends with it:
on return, on Ctrl-C/SIGTERM, and after a SIGKILL too.

- uv runs in its own process group (so a signal to the tool does not reach it half-way through
  writing, and the whole group can be killed), with PR_SET_PDEATHSIG on Linux (the kernel kills it
  when the thread that started it dies, SIGKILL included); `stopped_on_exit` kills every running
  group when the block that started them unwinds, so the pool's threads are not left waiting.
- temp folders are `builder-lock-<pid>-<start time>-<random>` in the temp folder: a later run
  deletes those of this user whose process is gone (a pid alone could have been reused).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

PREFIX = "builder-lock-"
_NAME = re.compile(rf"{PREFIX}(?:(\d+)-(\d+)-)?[a-z0-9_]{{8}}")
_PR_SET_PDEATHSIG = 1
LEGACY_AGE_S = 3600  # a folder of the old naming (no pid) older than this has no live uv (they time out at 900 s)

_running: set[subprocess.Popen[str]] = set()
_guard = threading.Lock()
_stopping = threading.Event()
_swept = threading.Event()


class Stopped(Exception):
    """The run is being interrupted: no new uv starts."""


def process_start(pid: int) -> str | None:
    """A process's start time (clock ticks since boot, /proc), None when it is gone or cannot be told."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@contextlib.contextmanager
def work_folder() -> Iterator[Path]:
    """A private temp folder named for this process, deleted on the way out; the first call of a
    process also deletes the folders runs that were killed left."""
    if not _swept.is_set():
        _swept.set()
        sweep()
    folder = Path(tempfile.mkdtemp(prefix=PREFIX + run_mark()))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_mark() -> str:
    """`<pid>-<start time>-`: what a temp folder's name says of the run that made it (left_by_dead_runs)."""
    return f"{os.getpid()}-{process_start(os.getpid()) or 0}-"


def sweep(root: Path | None = None) -> list[Path]:
    """Delete this user's lock temp folders whose process is gone; returns them."""
    removed = []
    for path in left_by_dead_runs(root or Path(tempfile.gettempdir()), _NAME):
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def left_by_dead_runs(root: Path, name: re.Pattern[str]) -> Iterator[Path]:
    """The folders under `root` named by `name` (groups 1 and 2: a run_mark's pid and start time,
    or neither for an old naming, judged by age) whose run is gone: never a link, never another user's."""
    can_tell = os.path.isdir("/proc/self")
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return
    for entry in names:
        found = name.fullmatch(entry)
        path = root / entry
        if found is None:
            continue
        try:
            st = path.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue  # never a link, never another user's
        if _gone(found.group(1), found.group(2), st.st_mtime, can_tell):
            yield path


def _gone(pid: str | None, start: str | None, mtime: float, can_tell: bool) -> bool:
    if pid is not None and can_tell:
        return process_start(int(pid)) != start
    return time.time() - mtime > LEGACY_AGE_S  # the old naming, or no /proc: by age


def run(argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run argv to the end and return what it printed; its whole process group is killed if this
    returns early (timeout, interrupt) and the kernel kills it if this process dies."""
    if _stopping.is_set():
        raise Stopped
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=die_with_parent(),
    )  # fmt: skip
    with _guard:
        _running.add(proc)
    try:
        if _stopping.is_set():  # stopped_on_exit looked before this one was listed: stop it here
            _kill(proc)
            raise Stopped
        out, err = proc.communicate(timeout=timeout)
    finally:
        with _guard:
            _running.discard(proc)
        if proc.returncode is None:
            _kill(proc)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _kill(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)  # the group is uv's own (start_new_session): nothing else is in it
    with contextlib.suppress(OSError):
        proc.kill()
    proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


@contextlib.contextmanager
def stopped_on_exit() -> Iterator[None]:
    """Around the code that waits for the threads running uv: when it unwinds (Ctrl-C, SIGTERM, an
    error), every running uv group is killed and no new one starts, so the threads end at once."""
    _stopping.clear()
    try:
        yield
    except BaseException:
        _stopping.set()
        with _guard:
            running = list(_running)
        for proc in running:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
        raise


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A preexec_fn arming PR_SET_PDEATHSIG with `sig` (Linux): the kernel signals the child when the
    thread that started it dies, SIGKILL included. None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def arm() -> None:  # runs in the child between fork and exec: no locks, no imports
        prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the line above: die now
            os._exit(1)

    return arm
