"""The device code in an ELF file's `.nv_fatbin` section, read without NVIDIA's tools.

Checked against cuobjdump on the same files (tests/test_fit.py, tests/fixtures/cuobjdump/), so an
image's libraries can be read where cuobjdump cannot run. Only headers are read, never the
(compressed) payloads: a 1 GB libtorch_cuda.so costs a few thousand small reads.

The layout, as the fatbins NVIDIA's `fatbinary` writes it (little-endian):
- a blob: u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size of the entries after it;
  a section holds blobs one after another (8-byte aligned);
- an entry: u16 kind (1 PTX, 2 ELF), u16 version, u32 header size, u64 payload size, ..., u32 at
  24 the code version (major << 16 | minor: the PTX ISA for PTX), u32 at 28 the SM (90 for sm_90),
  u32 at 40 flags (0x100000: arch-specific `a`; 0x200000: family-specific `f`, which cuobjdump
  lists, and the device rules treat, as the plain target).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

from builder.fit.arch import Arch, Embedded

MAGIC = 0xBA55ED50
KIND_PTX = 1
KIND_ELF = 2
ARCH_SPECIFIC = 0x100000
SECTION = b".nv_fatbin"
_ENTRY = struct.Struct("<HHIQIIII8xI")  # kind, version, header size, payload size, -, -, code version, sm, flags


class NotElf(ValueError):
    """The file is not a 64-bit little-endian ELF file, or its fatbin is cut short."""


def _read(f: BinaryIO, offset: int, size: int) -> bytes:
    f.seek(offset)
    data = f.read(size)
    if len(data) != size:
        raise NotElf(f"the file ends inside a structure at byte {offset} (truncated?)")
    return data


def _section(f: BinaryIO) -> tuple[int, int] | None:
    """(offset, size) of the .nv_fatbin section; None when the file has none."""
    f.seek(0)
    header = f.read(64)
    if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
        raise NotElf("not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", header, 0x28)[0]
    entsize, count, names = struct.unpack_from("<HHH", header, 0x3A)
    if entsize < 64 or names >= count:
        raise NotElf("ELF section headers are malformed")
    table = _read(f, shoff, entsize * count)
    sections = [struct.unpack_from("<IIQQQQ", table, i * entsize) for i in range(count)]
    _, _, _, _, names_off, names_size = sections[names]
    strings = _read(f, names_off, names_size)
    for name, kind, _, _, offset, size in sections:
        if strings[name : strings.find(b"\0", name)] == SECTION and kind != 8:  # 8: SHT_NOBITS
            return offset, size
    return None


def read_entries(f: BinaryIO, offset: int, size: int) -> Embedded:
    """Walk the blobs of a fatbin region: every entry's kind, SM, flags and code version."""
    sass: list[Arch] = []
    ptx: list[Arch] = []
    isa: list[str] = []
    position, end = offset, offset + size
    while position + 16 <= end:
        magic, _, header_size, entries_size = struct.unpack("<IHHQ", _read(f, position, 16))
        if magic != MAGIC:
            position += 8  # padding between blobs
            continue
        entry, stop = position + header_size, min(position + header_size + entries_size, end)
        while entry + _ENTRY.size <= stop:
            kind, _, entry_header, payload, _, _, code, sm, flags = _ENTRY.unpack(_read(f, entry, _ENTRY.size))
            arch = Arch(sm // 10, sm % 10, "a" if flags & ARCH_SPECIFIC else "")
            if kind == KIND_ELF:
                sass.append(arch)
            elif kind == KIND_PTX:
                ptx.append(arch)
                isa.append(f"{code >> 16}.{code & 0xFFFF}")
            if entry_header == 0:
                break
            entry += entry_header + payload
        position = max(stop, position + 16)
    return Embedded.of(sass, ptx, isa)


def read(path: Path) -> Embedded:
    """The SASS and PTX targets (and PTX ISA versions) of an ELF file, or of a bare .fatbin file."""
    with path.open("rb") as f:
        start = f.read(4)
        if start == struct.pack("<I", MAGIC):
            return read_entries(f, 0, path.stat().st_size)
        found = _section(f)
        return Embedded((), ()) if found is None else read_entries(f, *found)
