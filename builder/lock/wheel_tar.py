"""The canonical tars of a locked image's venv, made on the build host from the lock's wheels
(lock/layer.py says what goes in which layer and what each is called).

PyPA's `installer` installs the wheels (what pip does, without running the image's Python) into the
image's venv layout, but into a tree kept in memory (`_Tree`), not the file system: a wheel's member
is recorded by reference (its size from the zip, its sha256 from the wheel's RECORD), and what
installer makes (scripts, RECORD, INSTALLER) as bytes. The tar is then written from that tree,
each member inflated once, straight from its wheel into the tar, its bytes checked against the
sha256 its RECORD lists on the way. Its entries are sorted, its mtimes the lock's SOURCE_DATE_EPOCH
(EPOCH_FLOOR for the NVIDIA layer), owned by 0:0 with no user or group names, modes normalized.

Nothing of the host is written into the layer, nor onto the host's disk but the tar: no tree is
installed anywhere, the scheme's paths are the image's (`/opt/venv`), scripts name the image's
interpreter, pyvenv.cfg names the base's Python. (Before, the venv was installed under a scratch
folder, read back into the tar and searched for that folder's path: a CUDA layer's bytes were
written twice and read twice more; benchmarks/bench_layer_make.py compares the two, same bytes.)
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import zipfile
import zlib
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from installer import install
from installer.destinations import SchemeDictionaryDestination
from installer.records import Hash, RecordEntry, parse_record_file
from installer.scripts import Script
from installer.sources import WheelFile
from installer.utils import Scheme
from packaging.utils import parse_wheel_filename

from builder.lock.layer import EPOCH_FLOOR, LAYER_NAME, NVIDIA_LAYER_NAME, LayerError, Layout, is_nvidia
from builder.lock.members import open_member

if TYPE_CHECKING:
    from installer.scripts import ScriptSection

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


class _File:
    """A file of a layer: a member of a wheel, read when the tar is written, or bytes installer made
    (a script, RECORD, INSTALLER); `digest` is its sha256 as RECORD writes it."""

    __slots__ = ("data", "digest", "executable", "handle", "member", "size", "wheel")

    def __init__(
        self,
        size: int,
        digest: str,
        *,
        wheel: zipfile.ZipFile | None = None,
        handle: BinaryIO | None = None,
        member: str = "",
        data: bytes = b"",
    ) -> None:
        self.size, self.digest, self.wheel, self.handle, self.member, self.data = size, digest, wheel, handle, member, data
        self.executable = False

    @classmethod
    def made(cls, data: bytes) -> _File:
        return cls(len(data), base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode("ascii").rstrip("="), data=data)

    def open(self) -> BinaryIO:
        if self.wheel is None or self.handle is None:
            return io.BytesIO(self.data)
        return open_member(self.wheel, self.handle, self.member)

    def read(self) -> bytes:
        with self.open() as body:
            return body.read()


class _Tree:
    """A layer's entries by their names in the tar (`opt/venv/...`), kept in memory: nothing is
    written to disk but the tar itself, whose files are read from the wheels as it is written."""

    def __init__(self) -> None:
        self.files: dict[str, _File] = {}
        self.links: dict[str, str] = {}
        self.dirs: set[str] = set()

    def folder(self, name: str) -> None:
        while name and name not in self.dirs:
            if name in self.files or name in self.links:
                raise LayerError(f"{name} is a file of the layer and a folder another file needs")
            self.dirs.add(name)
            name = name.rpartition("/")[0]

    def add(self, name: str, file: _File | None = None, link: str = "") -> None:
        if name in self.dirs or name in self.links:
            raise LayerError(f"{name} is installed by another wheel as a folder or a link")
        self.folder(name.rpartition("/")[0])
        if file is not None:
            self.files[name] = file
        else:
            self.links[name] = link

    def leaves(self) -> set[str]:
        """The files and links (what another layer above would hide)."""
        return {*self.files, *self.links}


def _skeleton(tree: _Tree, layout: Layout) -> None:
    """The venv's skeleton, as `python -m venv` makes it on a 64-bit POSIX host, with no host path:
    pyvenv.cfg names the base's Python, bin/pythonX.Y links to it."""
    venv = str(layout.venv).lstrip("/")
    tree.folder(f"{venv}/bin")
    tree.folder(f"{venv}/include")
    tree.folder(str(layout.site_packages).lstrip("/"))
    tree.add(f"{venv}/lib64", link="lib")
    cfg = f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {layout.python}\nexecutable = /usr/bin/{layout.python_bin}\n"
    tree.add(f"{venv}/pyvenv.cfg", _File.made(cfg.encode()))
    tree.add(f"{venv}/bin/{layout.python_bin}", link=f"/usr/bin/{layout.python_bin}")
    for alias in ("python", "python3"):
        if alias != layout.python_bin:
            tree.add(f"{venv}/bin/{alias}", link=layout.python_bin)


class _Destination(SchemeDictionaryDestination):
    """installer's destination into a _Tree, not the file system: a member of the wheel being
    installed is recorded by reference (its size from the zip, its sha256 from the wheel's RECORD,
    checked as the tar is written) and never inflated here; bytes installer makes are kept.

    A file a wheel installed before may be installed again by another wheel when its bytes are the
    same: NVIDIA's CUDA 12 wheels each ship the namespace's empty `nvidia/__init__.py` (tensorflow
    cu125's eleven of them), which pip and uv overwrite, the last wheel's winning. Bytes that differ
    are refused (the venv would depend on the order of the installs); executable where either says so."""

    def __init__(self, tree: _Tree, layout: Layout) -> None:
        super().__init__(layout.scheme(), interpreter=str(layout.venv / "bin" / "python"), script_kind="posix")
        self.tree = tree
        self.wheel: zipfile.ZipFile | None = None  # the wheel being installed
        self.handle: BinaryIO | None = None  # its file, which its members are read from
        self.digests: dict[str, str] = {}  # its RECORD's sha256 of each member

    def start(self, wheel: zipfile.ZipFile, handle: BinaryIO, record: str) -> None:
        self.wheel, self.handle, self.digests = wheel, handle, {}
        for path, hashed, _ in parse_record_file(record.splitlines()):
            name, _, value = hashed.partition("=")
            if name == "sha256" and value:
                self.digests[path] = value

    def name_of(self, scheme: Scheme, path: str) -> str:
        """The file's name in the tar, refusing a path outside the scheme's folder as installer does
        (in os.path's strings: its pathlib version was a sixth of a CUDA layer's CPU on Python 3.13)."""
        folder = os.path.abspath(self.scheme_dict[scheme])
        file = os.path.abspath(os.path.join(folder, path))
        if file != folder and not file.startswith(folder.rstrip("/") + "/"):
            raise ValueError(f"Attempting to write {path} outside of the target directory")
        return file.lstrip("/")

    def _file(self, stream: BinaryIO) -> _File:
        member = stream.name if isinstance(stream, zipfile.ZipExtFile) else None
        if self.wheel is None or self.handle is None or member is None or member not in self.wheel.NameToInfo:  # bytes installer made
            return _File.made(stream.read())
        digest = self.digests.get(member)
        if digest is None:  # RECORD gives it no sha256: hashed here, inflated again into the tar
            hashing = Hashing(stream)
            while hashing.read(COPY_BUFFER):
                pass
            digest = hashing.digest()
        return _File(self.wheel.getinfo(member).file_size, digest, wheel=self.wheel, handle=self.handle, member=member)

    def write_script(self, name: str, module: str, attr: str, section: ScriptSection) -> RecordEntry:
        """installer's, less its chmod of the file it wrote (there is none: scripts are executable in the tar)."""
        script_name, data = Script(name, module, attr, section).generate(self.interpreter, self.script_kind)
        with io.BytesIO(data) as stream:
            return self.write_to_fs(Scheme("scripts"), script_name, stream, is_executable=True)

    def write_to_fs(self, scheme: Scheme, path: str, stream: BinaryIO, is_executable: bool) -> RecordEntry:
        name, file = self.name_of(scheme, path), self._file(stream)
        seen = self.tree.files.get(name)
        if seen is None:
            self.tree.add(name, file)
            seen = file
        elif seen.read() != file.read():
            raise FileExistsError(f"{path} is installed by another wheel with other content")
        seen.executable = seen.executable or is_executable
        return RecordEntry(path, Hash(self.hash_algorithm, file.digest), file.size)


def _install(tree: _Tree, layout: Layout, wheels: Sequence[Path], opened: ExitStack) -> None:
    destination = _Destination(tree, layout)
    for wheel in sorted(wheels, key=lambda p: p.name):
        try:
            with WheelFile.open(wheel) as source:
                handle = opened.enter_context(wheel.open("rb"))
                destination.start(opened.enter_context(zipfile.ZipFile(handle)), handle, source.read_dist_info("RECORD"))
                install(source, destination, {"INSTALLER": INSTALLER})
        except LayerError:
            raise
        except Exception as exc:  # noqa: BLE001 - installer raises several kinds; each is this wheel's fault
            raise LayerError(f"{wheel.name} cannot be installed into {layout.venv}: {exc}") from None


def venv_tree(layout: Layout, wheels: Sequence[Path], opened: ExitStack) -> _Tree:
    """The venv of `wheels` (already checked against the lock), with its skeleton; the wheels stay
    open on `opened` until the tar is written."""
    tree = _Tree()
    _skeleton(tree, layout)
    _install(tree, layout, wheels, opened)
    return tree


def site_tree(layout: Layout, wheels: Sequence[Path], opened: ExitStack) -> _Tree:
    """`wheels` in the venv's site-packages with no skeleton (the NVIDIA layer: its wheels have no
    scripts and no data outside site-packages)."""
    tree = _Tree()
    tree.folder(str(layout.site_packages).lstrip("/"))
    _install(tree, layout, wheels, opened)
    return tree


COPY_BUFFER = 1 << 20  # a file's bytes pass into the tar in MiB reads (tarfile's default is 16 KiB)


def write_tar(tree: _Tree, out: Path, epoch: int) -> None:
    """The tree as a canonical tar at `out`: entries sorted by name (parents before children, the
    parents of the top folders included, so extracting it sets their modes and mtimes too), each
    file's bytes checked against the sha256 RECORD says as they pass. A failed tar is removed."""
    try:
        with tarfile.TarFile(out, "w", format=tarfile.PAX_FORMAT, copybufsize=COPY_BUFFER) as tar:
            for name in sorted({*tree.dirs, *tree.links, *tree.files}, key=str.encode):
                info = tarfile.TarInfo(name)
                info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
                file = tree.files.get(name)
                if file is not None:
                    info.size, info.mode = file.size, 0o755 if file.executable else 0o644
                    where = file.wheel.filename if file.wheel is not None else "the layer"
                    try:
                        with file.open() as body:
                            hashing = Hashing(body)
                            tar.addfile(info, hashing)
                    except (OSError, zipfile.BadZipFile, zlib.error, EOFError) as exc:
                        if isinstance(exc, OSError) and exc.errno is not None:  # the tar's own disk (full, gone)
                            raise
                        raise LayerError(f"{name}: {where} cannot be read ({' '.join(str(exc).split())}); fetch the wheel again") from None
                    if hashing.digest() != file.digest:
                        raise LayerError(f"{name}: its bytes in {where} are not the ones its RECORD lists")
                elif name in tree.links:
                    info.type, info.linkname, info.mode = tarfile.SYMTYPE, tree.links[name], 0o777
                    tar.addfile(info)
                else:
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
    except BaseException:
        out.unlink(missing_ok=True)
        raise


class Hashing(io.RawIOBase):
    """A file read through, its sha256 taken on the way (RECORD's spelling: urlsafe base64, no padding)."""

    def __init__(self, source: BinaryIO) -> None:
        self._source = source
        self._sha256 = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        data = self._source.read(size)
        self._sha256.update(data)
        return data

    def digest(self) -> str:
        return base64.urlsafe_b64encode(self._sha256.digest()).decode("ascii").rstrip("=")


def make_layer(layout: Layout, wheels: Sequence[Path], epoch: int, out: Path) -> None:
    """The venv of `wheels` as a canonical tar at `out`."""
    with ExitStack() as opened:
        write_tar(venv_tree(layout, wheels, opened), out, epoch)


def _overlap(upper: _Tree, below: set[str]) -> None:
    both = sorted(name for name in {*upper.dirs, *upper.leaves()} if name in below)
    if both:
        raise LayerError(f"{both[0]} is installed by an NVIDIA wheel and by another wheel of the lock; the layers would overlap")


def _libraries(wheels: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    libraries, rest = split(wheels)
    for wheel in libraries:
        check_nvidia_wheel(wheel)
    return libraries, rest


def make_layers(layout: Layout, wheels: Sequence[Path], epoch: int, folder: Path, nvidia: bool) -> None:
    """The venv of `wheels` as canonical tars in `folder`: with `nvidia`, its NVIDIA library wheels
    in NVIDIA_LAYER_NAME (mtimes EPOCH_FLOOR: nothing of the lock but those wheels fixes it) and the
    rest in LAYER_NAME (the lock's `epoch`); else all of them in LAYER_NAME. No file may be in both
    (the upper layer would hide the lower's)."""
    if not nvidia:
        make_layer(layout, wheels, epoch, folder / LAYER_NAME)
        return
    libraries, rest = _libraries(wheels)
    with ExitStack() as opened:
        lower, upper = site_tree(layout, libraries, opened), venv_tree(layout, rest, opened)
        _overlap(upper, lower.leaves())
        write_tar(lower, folder / NVIDIA_LAYER_NAME, EPOCH_FLOOR)
        try:
            write_tar(upper, folder / LAYER_NAME, epoch)
        except BaseException:  # a refusal (or a failure) leaves neither
            (folder / NVIDIA_LAYER_NAME).unlink(missing_ok=True)
            raise


def make_upper_layer(layout: Layout, wheels: Sequence[Path], epoch: int, out: Path) -> None:
    """Just the venv layer of `wheels` above an NVIDIA layer made elsewhere (a canonical member of a
    CUDA line, whose FROM holds the NVIDIA wheels): the same bytes `make_layers` writes in LAYER_NAME.
    The NVIDIA wheels are checked as there, and the venv against the files they install (read from
    each wheel's list of files: GBs the line image holds already)."""
    libraries, rest = _libraries(wheels)
    site = str(layout.site_packages).lstrip("/")
    below: set[str] = set()
    for wheel in libraries:
        with zipfile.ZipFile(wheel) as whl:
            below.update(f"{site}/{name}" for name in whl.namelist() if not name.endswith("/"))
    with ExitStack() as opened:
        upper = venv_tree(layout, rest, opened)
        _overlap(upper, below)
        write_tar(upper, out, epoch)


def make_nvidia_layer(layout: Layout, wheels: Sequence[Path], out: Path) -> None:
    """Just the NVIDIA layer of `wheels` (a CUDA line's member that installs the rest with RUN): the
    same bytes `make_layers` writes for the same NVIDIA wheels."""
    libraries, _ = _libraries(wheels)
    with ExitStack() as opened:
        write_tar(site_tree(layout, libraries, opened), out, EPOCH_FLOOR)
