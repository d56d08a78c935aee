"""The canonical tars of a locked image's venv, made on the build host from the lock's wheels
(lock/layer.py says what goes in which layer and what each is called).

The wheels are installed by PyPA's `installer` (what pip does, without running the image's Python)
into the image's venv layout under a scratch root, and each tree is written as a tar whose entries
are sorted, whose mtimes are the lock's SOURCE_DATE_EPOCH (EPOCH_FLOOR for the NVIDIA layer), owned
by 0:0 with no user or group names, and whose modes are normalized.

Nothing of the host is written into the layer: the scheme's paths are the image's (`/opt/venv`),
scripts name the image's interpreter, pyvenv.cfg names the base's Python, and `write_tar` searches
every file and link for the scratch root as it writes it: a hit refuses the layer, and no tar is left.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
import zipfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from installer import install
from installer.destinations import SchemeDictionaryDestination
from installer.records import Hash, RecordEntry
from installer.sources import WheelFile
from installer.utils import Scheme, copyfileobj_with_hashing
from packaging.utils import parse_wheel_filename

from builder.lock.layer import EPOCH_FLOOR, LAYER_NAME, NVIDIA_LAYER_NAME, LayerError, Layout, is_nvidia

INSTALLER = b"builder\n"  # the venv's INSTALLER files: no version, so a new builder release makes the same layer


def split(wheels: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """`wheels` as (NVIDIA library wheels, the rest), by each file's project name."""
    nvidia = [w for w in wheels if is_nvidia(str(parse_wheel_filename(w.name)[0]))]
    return nvidia, [w for w in wheels if w not in nvidia]


def check_nvidia_wheel(wheel: Path) -> None:
    """Refuse an NVIDIA wheel that would install anything outside `nvidia/` and its own .dist-info
    (Python code or scripts of its own belong with the framework's layer, not the shared one)."""
    with zipfile.ZipFile(wheel) as whl:
        outside = [n for n in whl.namelist() if not n.startswith("nvidia/") and not n.split("/")[0].endswith(".dist-info")]
    if outside:
        raise LayerError(f"{wheel.name} installs {outside[0]}, outside nvidia/: it is not a library wheel the NVIDIA layer may hold")


def assemble_site(root: Path, layout: Layout, wheels: Sequence[Path]) -> None:
    """Install `wheels` into the venv's site-packages under `root`, with no venv skeleton (the
    NVIDIA layer: its wheels have no scripts and no data outside site-packages)."""
    (root / layout.site_packages.relative_to("/")).mkdir(parents=True)
    _install(root, layout, wheels)


def assemble(root: Path, layout: Layout, wheels: Sequence[Path]) -> None:
    """Install `wheels` (already checked against the lock) into the venv under `root`, with its skeleton."""
    venv = root / layout.venv.relative_to("/")
    (venv / "bin").mkdir(parents=True)
    (root / layout.site_packages.relative_to("/")).mkdir(parents=True)
    (venv / "include").mkdir()
    (venv / "lib64").symlink_to("lib")  # as `python -m venv` makes it on a 64-bit POSIX host
    (venv / "pyvenv.cfg").write_text(
        f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {layout.python}\nexecutable = /usr/bin/{layout.python_bin}\n"
    )
    (venv / "bin" / layout.python_bin).symlink_to(f"/usr/bin/{layout.python_bin}")
    for alias in ("python", "python3"):
        if alias != layout.python_bin:
            (venv / "bin" / alias).symlink_to(layout.python_bin)
    _install(root, layout, wheels)


class _Destination(SchemeDictionaryDestination):
    """installer's destination, but a file a wheel installed before may be installed again by another
    wheel when its bytes are the same: NVIDIA's CUDA 12 wheels each ship the namespace's empty
    `nvidia/__init__.py` (tensorflow cu125's eleven of them), which pip and uv overwrite, the last
    wheel's winning. Bytes that differ are refused (the venv would depend on the order of the
    installs); executable where either says so."""

    def _path_with_destdir(self, scheme: Scheme, path: str) -> Path:
        """installer's, with the same refusal of a path outside the scheme's folder, in os.path's
        strings: its pathlib version (is_relative_to, relative_to) was a sixth of a CUDA layer's CPU
        time on Python 3.13."""
        folder = os.path.abspath(self.scheme_dict[scheme])
        file = os.path.abspath(os.path.join(folder, path))
        if file != folder and not file.startswith(folder.rstrip("/") + "/"):
            raise ValueError(f"Attempting to write {path} outside of the target directory")
        return Path(file) if self.destdir is None else Path(self.destdir, file.lstrip("/"))

    def write_to_fs(self, scheme: Scheme, path: str, stream: BinaryIO, is_executable: bool) -> RecordEntry:
        target = self._path_with_destdir(scheme, path)
        if not target.exists() and not target.is_symlink():
            return super().write_to_fs(scheme, path, stream, is_executable)
        data = stream.read()
        if target.is_symlink() or not target.is_file() or target.read_bytes() != data:
            raise FileExistsError(f"{path} is installed by another wheel with other content")
        if is_executable:
            target.chmod(target.stat().st_mode | 0o111)
        digest, size = copyfileobj_with_hashing(io.BytesIO(data), io.BytesIO(), self.hash_algorithm)
        return RecordEntry(path, Hash(self.hash_algorithm, digest), size)


def _install(root: Path, layout: Layout, wheels: Sequence[Path]) -> None:
    destination = _Destination(layout.scheme(), interpreter=str(layout.venv / "bin" / "python"), script_kind="posix", destdir=str(root))
    for wheel in sorted(wheels, key=lambda p: p.name):
        try:
            with WheelFile.open(wheel) as source:
                install(source, destination, {"INSTALLER": INSTALLER})
        except Exception as exc:  # noqa: BLE001 - installer raises several kinds; each is this wheel's fault
            raise LayerError(f"{wheel.name} cannot be installed into {layout.venv}: {exc}") from None


def _mode(path: Path, found: os.stat_result) -> int:
    if stat.S_ISDIR(found.st_mode) or found.st_mode & 0o111:
        return 0o755
    return 0o644


def named_entries(root: Path) -> list[tuple[str, Path]]:
    """Every path under `root` with its relative POSIX name, sorted by that name (parents before
    children). Names are cut from os.walk's strings: Python 3.13's `Path.relative_to` builds and
    compares every parent of the path, which made a torch venv's layer a third slower to write."""
    top = str(root)
    found: list[tuple[str, Path]] = []
    for dirpath, dirs, files in os.walk(top):
        folder = dirpath[len(top) + 1 :]  # "" for `root` itself
        found += [(f"{folder}/{name}" if folder else name, Path(dirpath, name)) for name in (*dirs, *files)]
    return sorted(found, key=lambda entry: entry[0].encode())


COPY_BUFFER = 1 << 20  # a file's bytes pass into the tar in MiB reads (tarfile's default is 16 KiB)


def write_tar(root: Path, out: Path, epoch: int, scratch: Path) -> None:
    """The tree under `root` as a canonical tar at `out`, including the parents of its top folders
    (so extracting it sets their modes and mtimes too). Every file's bytes and every link's target
    are searched for the spellings of `root` and the `scratch` folder as they are written (the tree
    is read once): one that names them would carry a path of the build host into the image, and
    refuses the layer. A refused or failed tar is removed."""
    marks = sorted({m.encode() for m in (str(root), str(root.resolve()), str(scratch), str(scratch.resolve()))})
    bad: list[str] = []
    try:
        with tarfile.TarFile(out, "w", format=tarfile.PAX_FORMAT, copybufsize=COPY_BUFFER) as tar:
            for name, path in named_entries(root):
                found = path.lstat()
                info = tarfile.TarInfo(name)
                info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
                if stat.S_ISLNK(found.st_mode):
                    info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(path), 0o777
                    if any(mark in info.linkname.encode() for mark in marks):
                        bad.append(name)
                    tar.addfile(info)
                elif stat.S_ISDIR(found.st_mode):
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                elif stat.S_ISREG(found.st_mode):
                    info.size, info.mode = found.st_size, _mode(path, found)
                    with path.open("rb", buffering=0) as data:
                        searched = Searching(data, marks)
                        tar.addfile(info, searched)
                    if searched.found:
                        bad.append(name)
                else:
                    raise LayerError(f"{name} is neither a file, a folder nor a link; a venv has no other kind")
        if bad:
            raise LayerError(f"{bad[0]} names the build host's scratch folder {scratch}; the layer would not be canonical")
    except BaseException:
        out.unlink(missing_ok=True)
        raise


class Searching(io.RawIOBase):
    """A file read through, searched for any of `marks` on the way (a mark across two reads too)."""

    def __init__(self, source: BinaryIO, marks: Sequence[bytes]) -> None:
        self._source, self._marks = source, marks
        self._overlap = max((len(m) for m in marks), default=1) - 1
        self._tail = b""
        self.found = False

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        data = self._source.read(size)
        if data and not self.found:
            window = self._tail + data if self._tail else data
            self.found = any(mark in window for mark in self._marks)
            self._tail = window[-self._overlap :] if self._overlap else b""
        return data


def make_layer(scratch: Path, layout: Layout, wheels: Sequence[Path], epoch: int, out: Path) -> None:
    """The venv of `wheels` as a canonical tar at `out`, assembled under `scratch` (which must be empty)."""
    root = scratch / "root"
    assemble(root, layout, wheels)
    write_tar(root, out, epoch, scratch)


def make_layers(scratch: Path, layout: Layout, wheels: Sequence[Path], epoch: int, folder: Path, nvidia: bool) -> None:
    """The venv of `wheels` as canonical tars in `folder`: with `nvidia`, its NVIDIA library wheels
    in NVIDIA_LAYER_NAME (mtimes EPOCH_FLOOR: nothing of the lock but those wheels fixes it) and the
    rest in LAYER_NAME (the lock's `epoch`); else all of them in LAYER_NAME. No file may be in both
    (the upper layer would hide the lower's)."""
    if not nvidia:
        make_layer(scratch, layout, wheels, epoch, folder / LAYER_NAME)
        return
    libraries, rest = split(wheels)
    for wheel in libraries:
        check_nvidia_wheel(wheel)
    lower, upper = scratch / "nvidia", scratch / "root"
    assemble_site(lower, layout, libraries)
    assemble(upper, layout, rest)
    below = {name for name, p in named_entries(lower) if not p.is_dir() or p.is_symlink()}
    both = [name for name, _ in named_entries(upper) if name in below]
    if both:
        raise LayerError(f"{both[0]} is installed by an NVIDIA wheel and by another wheel of the lock; the layers would overlap")
    write_tar(lower, folder / NVIDIA_LAYER_NAME, EPOCH_FLOOR, scratch)
    try:
        write_tar(upper, folder / LAYER_NAME, epoch, scratch)
    except BaseException:  # a refusal (or a failure) leaves neither
        (folder / NVIDIA_LAYER_NAME).unlink(missing_ok=True)
        raise


def make_upper_layer(scratch: Path, layout: Layout, wheels: Sequence[Path], epoch: int, out: Path) -> None:
    """Just the venv layer of `wheels` above an NVIDIA layer made elsewhere (a canonical member of a
    CUDA line, whose FROM holds the NVIDIA wheels): the same bytes `make_layers` writes in LAYER_NAME.
    The NVIDIA wheels are checked as there, and the venv against the files they install (read from
    each wheel's list of files, not installed: GBs the line image holds already)."""
    libraries, rest = split(wheels)
    site = layout.site_packages.relative_to("/")
    below: set[PurePosixPath] = set()
    for wheel in libraries:
        check_nvidia_wheel(wheel)
        with zipfile.ZipFile(wheel) as whl:
            below.update(site / name for name in whl.namelist() if not name.endswith("/"))
    upper = scratch / "root"
    assemble(upper, layout, rest)
    both = [name for name, _ in named_entries(upper) if PurePosixPath(name) in below]
    if both:
        raise LayerError(f"{both[0]} is installed by an NVIDIA wheel and by another wheel of the lock; the layers would overlap")
    write_tar(upper, out, epoch, scratch)


def make_nvidia_layer(scratch: Path, layout: Layout, wheels: Sequence[Path], out: Path) -> None:
    """Just the NVIDIA layer of `wheels` (a CUDA line's member that installs the rest with RUN): the
    same bytes `make_layers` writes for the same NVIDIA wheels."""
    libraries, _ = split(wheels)
    for wheel in libraries:
        check_nvidia_wheel(wheel)
    lower = scratch / "nvidia"
    assemble_site(lower, layout, libraries)
    write_tar(lower, out, EPOCH_FLOOR, scratch)
