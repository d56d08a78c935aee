"""A release's metadata read from one of its wheels over HTTP byte ranges, for indexes that list
releases but serve no per-release JSON document (some mirrors and proxies do): the zip's central
directory and the `*.dist-info/METADATA` member are fetched, never the whole wheel (torch's is
500 MB; this reads a few hundred KB).

Which wheel: a Linux x86_64 one (the platform the images are built for), so Linux-only
requirements (torch's nvidia-* wheels) are in it; its `Requires-Python` and `Requires-Dist`
become the `info` of a PyPI-style release document.
"""

from __future__ import annotations

import bz2
import email.parser
import io
import lzma
import struct
import zipfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urljoin

from builder.updates.metadata import is_linux_wheel
from builder.util.text import escape_controls

BLOCK = 256 * 1024  # zipfile reads in small pieces; fetch aligned blocks and keep them
MAX_BLOCKS = 64  # at most 16 MiB read per wheel (a central directory of ~100k files)
MAX_FETCHED = MAX_BLOCKS * BLOCK
MAX_METADATA = 4 * 2**20  # uncompressed; torch's METADATA is ~40 KB, one with a long README a few hundred
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # a zip member's local file header (APPNOTE 4.3.7)

FetchRange = Callable[[str, int, int], bytes]  # (url, first byte, last byte inclusive) -> exactly those bytes


class NoWheel(Exception):
    """The release lists no wheel this can read metadata from."""


def linux_wheel(files: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The first non-yanked Linux x86_64 wheel of a release's files (CPython 3.11 first, if there is one)."""
    wheels = [f for f in files if isinstance(f, Mapping) and is_linux_wheel(f) and isinstance(f.get("size"), int) and f.get("url")]
    wheels.sort(key=lambda f: ("cp311" not in str(f["filename"]), str(f["filename"])))
    return wheels[0] if wheels else None


class _Ranges(io.RawIOBase):
    """A read-only, seekable view of a remote file, fetched block by block."""

    def __init__(self, url: str, size: int, fetch: FetchRange) -> None:
        self.url, self.size, self.fetch = url, size, fetch
        self.pos = 0
        self.blocks: dict[int, bytes] = {}

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer: Any) -> int:
        wanted = min(len(buffer), self.size - self.pos)
        if wanted <= 0:
            return 0
        out = bytearray()
        while len(out) < wanted:
            index, skip = divmod(self.pos + len(out), BLOCK)
            block = self._block(index)
            out += block[skip : skip + wanted - len(out)]
        buffer[:wanted] = out
        self.pos += wanted
        return wanted

    def _block(self, index: int) -> bytes:
        if index not in self.blocks:
            if len(self.blocks) >= MAX_BLOCKS:
                raise ValueError(f"reading the metadata of {self.url} needs more than {MAX_BLOCKS * BLOCK // 2**20} MiB")
            first = index * BLOCK
            last = min(self.size, first + BLOCK) - 1
            data = self.fetch(self.url, first, last)
            if len(data) != last - first + 1:
                raise ValueError(f"{self.url} answered {len(data)} bytes for a range of {last - first + 1}")
            self.blocks[index] = data
        return self.blocks[index]


def metadata(url: str, size: int, fetch: FetchRange) -> tuple[str | None, tuple[str, ...]]:
    """(Requires-Python, Requires-Dist lines) from the wheel at `url`; ValueError when it is not a readable wheel."""
    try:
        with zipfile.ZipFile(io.BufferedReader(_Ranges(url, size, fetch), buffer_size=BLOCK)) as wheel:
            names = [n for n in wheel.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(names) != 1:
                raise ValueError(f"{url} has {len(names)} .dist-info/METADATA files")
            text = member(wheel, wheel.getinfo(names[0]), MAX_METADATA, url).decode("utf-8", "replace")
    except zipfile.BadZipFile as exc:
        raise ValueError(f"{url} is not a zip file ({exc})") from None
    message = email.parser.Parser().parsestr(text, headersonly=True)
    requires_python = message.get("Requires-Python")
    python = escape_controls(str(requires_python).strip()) or None if requires_python else None
    return python, tuple(escape_controls(str(v)) for v in message.get_all("Requires-Dist") or ())


def member(wheel: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int, url: str) -> bytes:
    """A member's bytes, decompressed with a bound on the OUTPUT: at most `limit` bytes are ever
    made, whatever the zip declares, so a 1 KB member that inflates to gigabytes (deflate, bzip2
    or lzma alike) is refused in one line instead of allocated. zipfile's own reader bounds only
    deflate's output per read; its bzip2 and lzma readers inflate every compressed chunk whole."""
    where = f"{url}: {escape_controls(info.filename)}"
    if info.file_size > limit:
        raise ValueError(
            f"{where} declares {info.file_size:,} bytes uncompressed, more than the {limit // 2**20} MiB a METADATA file may have"
        )
    if info.flag_bits & 0x1:
        raise ValueError(f"{where} is encrypted")
    raw = _raw(wheel, info, where)
    try:
        if info.compress_type == zipfile.ZIP_STORED:
            data = raw[: limit + 1]
        elif info.compress_type == zipfile.ZIP_DEFLATED:
            data = zlib.decompressobj(-15).decompress(raw, limit + 1)
        elif info.compress_type == zipfile.ZIP_BZIP2:
            data = bz2.BZ2Decompressor().decompress(raw, limit + 1)
        elif info.compress_type == zipfile.ZIP_LZMA:
            data = _lzma(raw, limit + 1)
        else:
            raise ValueError(f"{where} uses compression method {info.compress_type}, which wheels do not")
    except (zlib.error, OSError, EOFError, lzma.LZMAError) as exc:
        raise ValueError(f"{where} does not decompress ({exc})") from None
    if len(data) > limit:
        raise ValueError(f"{where} inflates to more than {limit // 2**20} MiB (a zip bomb, or not a METADATA file)")
    if zlib.crc32(data) != info.CRC:
        raise ValueError(f"{where} is corrupt (its CRC does not match)")
    return data


def _raw(wheel: zipfile.ZipFile, info: zipfile.ZipInfo, where: str) -> bytes:
    """The member's compressed bytes, located through its local header (they are bounded by the
    range reader's limit on what is fetched)."""
    fp = wheel.fp
    if fp is None:
        raise ValueError(f"{where}: the wheel is closed")
    fp.seek(info.header_offset)
    header = fp.read(_LOCAL_HEADER.size)
    if len(header) != _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
        raise ValueError(f"{where} has no valid local header")
    fields = _LOCAL_HEADER.unpack(header)
    fp.seek(info.header_offset + _LOCAL_HEADER.size + fields[-2] + fields[-1])
    raw = fp.read(info.compress_size)
    if len(raw) != info.compress_size:
        raise ValueError(f"{where} is cut short")
    return raw


def _lzma(raw: bytes, max_length: int) -> bytes:
    """A zip LZMA member (APPNOTE 5.8.8: version, properties size, properties, raw LZMA1 stream) read
    as the .lzma "alone" format, whose header is the same 5 property bytes and an unknown size."""
    if len(raw) < 9:
        raise lzma.LZMAError("too short for an LZMA member")
    (props_size,) = struct.unpack("<H", raw[2:4])
    if props_size != 5:
        raise lzma.LZMAError(f"LZMA properties of {props_size} bytes")
    alone = raw[4:9] + b"\xff" * 8 + raw[9:]
    return lzma.LZMADecompressor(format=lzma.FORMAT_ALONE).decompress(alone, max_length)


def release_document(project_doc: Mapping[str, Any], project_url: str, version: str, fetch: FetchRange) -> dict[str, Any]:
    """A PyPI-style release document (`info.requires_python`, `info.requires_dist`) built from a wheel."""
    files = (project_doc.get("releases") or {}).get(version) or []
    chosen = linux_wheel(files)
    if chosen is None:
        raise NoWheel(f"no Linux x86_64 wheel listed for {version}")
    url = urljoin(project_url, str(chosen["url"]))
    requires_python, requires_dist = metadata(url, int(chosen["size"]), fetch)
    info = {
        "version": version,
        "requires_python": requires_python,
        "requires_dist": list(requires_dist),
        "metadata_from": chosen["filename"],
    }
    return {"info": info, "urls": list(files)}
