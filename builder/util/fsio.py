"""Every file the tool reads or writes goes through here: bounded reads that never hang, JSON that
is refused in one line when malformed, and writes that replace only what the tool itself wrote.

Why one module: the findings this answers (a matrix that is /dev/zero, a catalog symlinked to a FIFO,
JSON nested 200k deep, `report --html /dev/null` replacing a device node, `--markdown matrix.yaml`
overwriting the matrix) were each a reader or writer written again without the guard."""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder.util.errors import UserError

if TYPE_CHECKING:
    import filelock

MiB = 2**20


def lock_dir() -> Path:
    """Where runs keep their lock files (a base's bootstrap, a build's run, the live runs `builder
    clean` respects): $BUILDER_LOCK_DIR, read at each use, so a test or a second engine's test lane
    that sets its own is obeyed, else the temp dir."""
    return Path(os.environ.get("BUILDER_LOCK_DIR") or tempfile.gettempdir())


def file_lock(path: Path, timeout: float = -1) -> filelock.FileLock:
    """A lock file beside what a read-modify-write guards (the results index, the catalog, reproduce's
    verdicts). filelock is imported here, at the first lock: the commands that only read start without
    it (it brings logging, secrets and decimal along)."""
    import filelock  # noqa: PLC0415 - see the docstring

    return filelock.FileLock(str(path), timeout=timeout)


def read_bytes(path: Path, limit: int, what: str = "file") -> bytes:
    """A regular file's bytes, at most `limit` of them, or a one-line UserError.

    Opened non-blocking, so a FIFO never hangs the open; the type is checked on the open descriptor
    (fstat), so a symlink swapped between check and use changes nothing; a device reports size 0 to
    stat, so the bound is enforced by reading at most limit + 1 bytes, never by trusting st_size."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UserError(f"no such {what}", str(path)) from None
    except IsADirectoryError:
        raise UserError(f"the {what} is a folder; give a file", str(path)) from None
    except OSError as exc:
        raise UserError(f"cannot read the {what}: {exc.strerror}", str(path)) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UserError(f"the {what} is a folder; give a file", str(path))
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"the {what} is not a regular file (a device, FIFO or socket); give a file", str(path))
        if st.st_size > limit:
            raise UserError(f"the {what} is larger than {_size(limit)}; this is not a file the tool wrote", str(path))
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, MiB))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        raise UserError(f"cannot read the {what}: {exc.strerror}", str(path)) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UserError(f"the {what} is larger than {_size(limit)}; this is not a file the tool wrote", str(path))
    return data


def read_text(path: Path, limit: int, what: str = "file") -> str:
    """`read_bytes` decoded as UTF-8, refusing other encodings in one line."""
    data = read_bytes(path, limit, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"the {what} is not UTF-8 text (byte {exc.start}); save it as UTF-8", str(path)) from None


def parse_json(text: str | bytes, where: str) -> Any:
    """JSON as the tool writes it: no NaN/Infinity, no runaway nesting; any fault is one line."""
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise UserError("JSON nested too deeply to be one of ours; regenerate the file", where) from None
    except _Constant as exc:
        raise UserError(f"JSON holds {exc.args[0]}, which is not a number the tool writes; regenerate the file", where) from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
        line = getattr(exc, "lineno", None)
        raise UserError(f"not valid JSON ({exc}); regenerate the file or restore it from git", where, line) from None


def read_json(path: Path, limit: int, what: str = "file") -> Any:
    return parse_json(read_bytes(path, limit, what), str(path))


def dump_json(doc: Any) -> str:
    """The tool's JSON bytes: sorted keys, two-space indent, no NaN/Infinity, one trailing newline."""
    return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"


class _Constant(ValueError):
    pass


def _refuse_constant(name: str) -> float:
    raise _Constant(name)


def finite(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))


def write_atomic(path: Path, text: str) -> None:
    """Write a file the tool owns by rename: readers see the old bytes or the new, never half.

    Refuses to put a file where something other than a regular file (or nothing) stands: a device
    node, a FIFO, a folder or a symlink is never replaced by a rename."""
    check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_generated(path: Path, text: str, marker: str, *, protected: Iterable[Path] = ()) -> None:
    """Write an output file that only this tool may replace: `marker` must be in `text`, and an
    existing file at `path` must carry it too (so `--markdown matrix.yaml` stops, and a file the user
    wrote is never replaced). `protected` are the run's inputs, which are never outputs."""
    if marker not in text:
        raise AssertionError(f"generated text for {path} lacks its marker")  # a programming error
    for other in protected:
        if _same_file(path, other):
            raise UserError(f"{path} is an input of this run; write the output somewhere else", str(path))
    st = check_replaceable(path)
    if st is not None:
        try:
            head = read_bytes(path, 64 * MiB, "output file")
        except UserError:
            head = b""
        if marker.encode("utf-8") not in head:
            raise UserError(
                "exists and was not written by builder; refusing to replace it (delete it or choose another path)",
                str(path),
            )
    write_atomic(path, text)


def check_distinct_outputs(paths: Iterable[Path]) -> None:
    """Two outputs of one command at one path would lose one of them."""
    seen: list[Path] = []
    for path in paths:
        for other in seen:
            if _same_file(path, other):
                raise UserError(f"{path} is given for two outputs; give each its own path", str(path))
        seen.append(path)


def check_replaceable(path: Path) -> os.stat_result | None:
    """The lstat of what stands at `path` (None when nothing), or a one-line refusal."""
    parent = path.parent
    try:
        pst = parent.stat()
    except FileNotFoundError:
        pst = None
    except NotADirectoryError:
        raise UserError(f"{parent} is a file, not a folder; give a path in a folder", str(path)) from None
    except OSError as exc:
        raise UserError(f"cannot reach its folder: {exc.strerror}", str(path)) from None
    if pst is not None and not stat.S_ISDIR(pst.st_mode):
        raise UserError(f"{parent} is not a folder; give a path in a folder", str(path))
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise UserError(f"{parent} is a file, not a folder; give a path in a folder", str(path)) from None
    except OSError as exc:
        raise UserError(f"cannot check it: {exc.strerror}", str(path)) from None
    if stat.S_ISDIR(st.st_mode):
        raise UserError("is a folder; give a file path", str(path))
    if stat.S_ISLNK(st.st_mode):
        raise UserError("is a symbolic link; refusing to replace it (give the real path)", str(path))
    if not stat.S_ISREG(st.st_mode):
        raise UserError("is not a regular file (a device, FIFO or socket); refusing to replace it", str(path))
    return st


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else f"{n} bytes"
