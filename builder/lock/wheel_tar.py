"""The canonical tars of a locked image's venv, made on the build host from the lock's wheels
(lock/layer.py says what goes in which layer and what each is called).

PyPA's `installer` installs the wheels (what pip does, without running the image's Python) into the
image's venv layout, but into a tree kept in memory (`_Tree`), not the file system: a wheel's member
is recorded by reference (its size from the zip, its sha256 from the wheel's RECORD), and what
installer makes (scripts, RECORD, INSTALLER) as bytes. A `Layer` is that tree as a tar whose
entries are sorted, whose mtimes are the lock's SOURCE_DATE_EPOCH (EPOCH_FLOOR for the NVIDIA layer),
owned by 0:0 with no user or group names, modes normalized: its size and members are known at once,
its bytes are made when asked, each member inflated once, straight from its wheel into where the tar
goes (the engine's load, through the build's archive; a file only for bake's contexts), its bytes
checked against the sha256 its RECORD lists on the way.

Nothing of the host is written into the layer, nor onto the host's disk: no tree is installed
anywhere, the scheme's paths are the image's (`/opt/venv`), scripts name the image's interpreter,
pyvenv.cfg names the base's Python. (Before, the venv was installed under a scratch folder, read
back into a tar file and searched for that folder's path; benchmarks/bench_layer_make.py compares.)
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, cast

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


class _Opened:
    """The wheels a tar is being written from, each opened once (its zip directory read once)."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._wheels: dict[Path, tuple[zipfile.ZipFile, BinaryIO]] = {}

    def __enter__(self) -> _Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def member(self, wheel: Path, member: str) -> BinaryIO:
        if wheel not in self._wheels:
            opened: BinaryIO = self._stack.enter_context(wheel.open("rb"))
            self._wheels[wheel] = (self._stack.enter_context(zipfile.ZipFile(opened)), opened)
        whl, handle = self._wheels[wheel]
        return open_member(whl, handle, member)


class _File:
    """A file of a layer: a member of a wheel, read when the tar is written, or bytes installer made
    (a script, RECORD, INSTALLER); `digest` is its sha256 as RECORD writes it."""

    __slots__ = ("data", "digest", "executable", "member", "size", "wheel")

    def __init__(self, size: int, digest: str, *, wheel: Path | None = None, member: str = "", data: bytes = b"") -> None:
        self.size, self.digest, self.wheel, self.member, self.data = size, digest, wheel, member, data
        self.executable = False

    @classmethod
    def made(cls, data: bytes) -> _File:
        return cls(len(data), _record_digest(hashlib.sha256(data).digest()), data=data)

    def open(self, opened: _Opened) -> BinaryIO:
        return io.BytesIO(self.data) if self.wheel is None else opened.member(self.wheel, self.member)

    def read(self) -> bytes:
        with _Opened() as opened, self.open(opened) as body:
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
        self.wheel: tuple[Path, zipfile.ZipFile] | None = None  # the wheel being installed, and its directory
        self.digests: dict[str, str] = {}  # its RECORD's sha256 of each member

    def start(self, wheel: Path, whl: zipfile.ZipFile, record: str) -> None:
        self.wheel, self.digests = (wheel, whl), {}
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
        if self.wheel is None or member is None or member not in self.wheel[1].NameToInfo:  # bytes installer made
            return _File.made(stream.read())
        digest = self.digests.get(member)
        if digest is None:  # RECORD gives it no sha256: hashed here, inflated again into the tar
            sha256 = hashlib.sha256()
            while chunk := stream.read(COPY_BUFFER):
                sha256.update(chunk)
            digest = _record_digest(sha256.digest())
        return _File(self.wheel[1].getinfo(member).file_size, digest, wheel=self.wheel[0], member=member)

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


def _install(tree: _Tree, layout: Layout, wheels: Sequence[Path]) -> None:
    destination = _Destination(tree, layout)
    for wheel in sorted(wheels, key=lambda p: p.name):
        try:
            with WheelFile.open(wheel) as source, zipfile.ZipFile(wheel) as whl:
                destination.start(wheel, whl, source.read_dist_info("RECORD"))
                install(source, destination, {"INSTALLER": INSTALLER})
        except LayerError:
            raise
        except Exception as exc:  # noqa: BLE001 - installer raises several kinds; each is this wheel's fault
            raise LayerError(f"{wheel.name} cannot be installed into {layout.venv}: {exc}") from None


def venv_tree(layout: Layout, wheels: Sequence[Path]) -> _Tree:
    """The venv of `wheels` (already checked against the lock), with its skeleton."""
    tree = _Tree()
    _skeleton(tree, layout)
    _install(tree, layout, wheels)
    return tree


def site_tree(layout: Layout, wheels: Sequence[Path]) -> _Tree:
    """`wheels` in the venv's site-packages with no skeleton (the NVIDIA layer: its wheels have no
    scripts and no data outside site-packages)."""
    tree = _Tree()
    tree.folder(str(layout.site_packages).lstrip("/"))
    _install(tree, layout, wheels)
    return tree


COPY_BUFFER = 1 << 20  # a file's bytes pass into the tar in MiB reads (tarfile's default is 16 KiB)


class Layer:
    """A canonical layer tar, not written anywhere: its entries in order (sorted by name, parents
    before children, the parents of the top folders included, so extracting it sets their modes and
    mtimes too), its exact size and members, and its bytes made when asked, straight from the wheels
    to where they go (a file, or the load's archive), each file checked on the way against the sha256
    RECORD says. The bytes are tarfile's PAX archive of the same entries (headers by TarInfo.tobuf,
    the data padded to 512 bytes, two zero blocks, the record padded to 10 KiB)."""

    def __init__(self, tree: _Tree, epoch: int) -> None:
        self._infos: list[tarfile.TarInfo] = []
        self._entries: list[tuple[str, bytes, _File | None]] = []
        offset = 0
        for name in sorted({*tree.dirs, *tree.links, *tree.files}, key=str.encode):
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
            file = tree.files.get(name)
            if file is not None:
                info.size, info.mode = file.size, 0o755 if file.executable else 0o644
            elif name in tree.links:
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, tree.links[name], 0o777
            else:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
            self._infos.append(info)
            self._entries.append((name, header, file))
            offset += len(header) + (_padded(file.size) if file is not None else 0)
        offset += 2 * tarfile.BLOCKSIZE
        self.size = offset + (-offset % tarfile.RECORDSIZE)

    def members(self) -> list[tarfile.TarInfo]:
        return list(self._infos)

    def chunks(self) -> Iterator[bytes]:
        """The tar's bytes, in pieces of at most COPY_BUFFER; LayerError where a wheel cannot be read or
        its bytes are not the ones its RECORD lists."""
        written = 0
        with _Opened() as opened:
            for name, header, file in self._entries:
                yield header
                written += len(header)
                if file is not None:
                    yield from _body(name, file, opened)
                    written += _padded(file.size)
        yield bytes(self.size - written)

    def reader(self) -> BinaryIO:
        """The tar as a file to read from (what a load's archive copies); closing it closes the wheels."""
        return cast(BinaryIO, _Reader(self.chunks()))  # it reads as a binary file reads: all tarfile's copy asks of it

    def write(self, out: Path) -> None:
        """The tar at `out`; a failed one is removed."""
        try:
            with out.open("wb") as tar:
                for chunk in self.chunks():
                    tar.write(chunk)
        except BaseException:
            out.unlink(missing_ok=True)
            raise


def _padded(size: int) -> int:
    return size + (-size % tarfile.BLOCKSIZE)


def _body(name: str, file: _File, opened: _Opened) -> Iterator[bytes]:
    """A file's bytes in the tar, padded to its blocks."""
    where = file.wheel or "the layer"
    left, sha256 = file.size, hashlib.sha256()
    try:
        with file.open(opened) as body:
            while left:
                piece = body.read(min(left, COPY_BUFFER))
                if not piece:
                    raise EOFError(f"{left} bytes short")
                left -= len(piece)
                sha256.update(piece)
                yield piece
    except (OSError, zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise LayerError(f"{name}: {where} cannot be read ({' '.join(str(exc).split())}); fetch the wheel again") from None
    if _record_digest(sha256.digest()) != file.digest:
        raise LayerError(f"{name}: its bytes in {where} are not the ones its RECORD lists")
    yield bytes(-file.size % tarfile.BLOCKSIZE)


class _Reader(io.RawIOBase):
    """A layer's chunks as a file tarfile can copy from: `read(n)` gives n bytes until the end (each
    byte sliced off its chunk once, whatever the read size)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._chunk = b""
        self._at = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        pieces: list[bytes] = []
        want = size if size >= 0 else None
        while want is None or want > 0:
            if self._at == len(self._chunk):
                self._chunk, self._at = next((c for c in self._chunks if c), b""), 0  # an empty chunk is no end
                if not self._chunk:
                    break
            take = len(self._chunk) - self._at if want is None else min(want, len(self._chunk) - self._at)
            pieces.append(self._chunk[self._at : self._at + take] if take < len(self._chunk) else self._chunk)
            self._at += take
            if want is not None:
                want -= take
        return b"".join(pieces) if len(pieces) != 1 else pieces[0]

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()  # the wheels it had open
        super().close()


def _record_digest(digest: bytes) -> str:
    """A sha256 digest as RECORD spells it: urlsafe base64, no padding."""
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def _overlap(upper: _Tree, below: set[str]) -> None:
    both = sorted(name for name in {*upper.dirs, *upper.leaves()} if name in below)
    if both:
        raise LayerError(f"{both[0]} is installed by an NVIDIA wheel and by another wheel of the lock; the layers would overlap")


def _libraries(wheels: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    libraries, rest = split(wheels)
    for wheel in libraries:
        check_nvidia_wheel(wheel)
    return libraries, rest


def venv_layer(layout: Layout, wheels: Sequence[Path], epoch: int) -> Layer:
    """The venv of `wheels` as one canonical layer."""
    return Layer(venv_tree(layout, wheels), epoch)


def venv_layers(layout: Layout, wheels: Sequence[Path], epoch: int, nvidia: bool) -> dict[str, Layer]:
    """The venv of `wheels` as canonical layers by name: with `nvidia`, its NVIDIA library wheels in
    NVIDIA_LAYER_NAME (mtimes EPOCH_FLOOR: nothing of the lock but those wheels fixes it) and the rest
    in LAYER_NAME (the lock's `epoch`); else all of them in LAYER_NAME. No file may be in both (the
    upper layer would hide the lower's)."""
    if not nvidia:
        return {LAYER_NAME: venv_layer(layout, wheels, epoch)}
    libraries, rest = _libraries(wheels)
    lower, upper = site_tree(layout, libraries), venv_tree(layout, rest)
    _overlap(upper, lower.leaves())
    return {NVIDIA_LAYER_NAME: Layer(lower, EPOCH_FLOOR), LAYER_NAME: Layer(upper, epoch)}


def upper_layer(layout: Layout, wheels: Sequence[Path], epoch: int) -> Layer:
    """Just the venv layer of `wheels` above an NVIDIA layer made elsewhere (a canonical member of a
    CUDA line, whose FROM holds the NVIDIA wheels): the same bytes as `venv_layers`' LAYER_NAME. The
    NVIDIA wheels are checked as there, and the venv against the files they install (read from each
    wheel's list of files: GBs the line image holds already)."""
    libraries, rest = _libraries(wheels)
    site = str(layout.site_packages).lstrip("/")
    below: set[str] = set()
    for wheel in libraries:
        with zipfile.ZipFile(wheel) as whl:
            below.update(f"{site}/{name}" for name in whl.namelist() if not name.endswith("/"))
    upper = venv_tree(layout, rest)
    _overlap(upper, below)
    return Layer(upper, epoch)


def line_nvidia_layer(layout: Layout, wheels: Sequence[Path]) -> Layer:
    """Just the NVIDIA layer of `wheels` (a CUDA line's image): the same bytes as `venv_layers`'
    NVIDIA_LAYER_NAME for the same NVIDIA wheels."""
    libraries, _ = _libraries(wheels)
    return Layer(site_tree(layout, libraries), EPOCH_FLOOR)
