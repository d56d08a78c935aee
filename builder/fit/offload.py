"""The AMD GPU code objects of a library, read as LLVM's clang-offload-bundler lists them.

Stdlib only (Python 3.9+) and importing nothing of builder: fit/measure.py sends its text to the
image's own Python (`python -I -c`) in the locked-down smoke container, and fit/wheels.py reads
wheel members on this machine through the same functions; tests/test_offload.py holds the reading
equal to `clang-offload-bundler --list` on the real cupy-rocm-7-0 wheel.

Where AMD device code lives:
- a HIP program's `.hip_fatbin` section holds clang offload bundles, one after another: plain
  (`__CLANG_OFFLOAD_BUNDLE__`, u64 entry count, then per entry u64 offset, u64 size, u64 id length and
  the id, e.g. `hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-`) or compressed (`CCOB`: u16 version, u16
  method (0 zlib, 1 zstd), sizes (u32 in versions 1-2, u64 in 3) and a hash, then the compressed
  plain bundle); the host entry (`host-x86_64-...`) is not device code;
- a bare code object (rocBLAS's Tensile `.co`/`.hsaco` files) is an AMDGPU ELF file (e_machine 224)
  whose e_flags name the processor and its xnack/sramecc settings (LLVM AMDGPUUsage, code object V3+).

A target is the bundle's target ID: the processor (gfx90a, or a generic one such as gfx11-generic)
and its features (`:xnack-`, `:sramecc+`; absent = any). Bounded like fit/scan.py (files are input):
regular files only, capped section table and bundle headers, compressed payloads inflated to at most
MAX_INFLATE bytes of header, at most MAX_BUNDLES bundles, an optional deadline. zstd needs Python's
`compression.zstd` (3.14+); where it is missing a compressed bundle is counted as unreadable, never
guessed.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import sys
import time
import zlib
from collections import Counter
from typing import BinaryIO

PLAIN = b"__CLANG_OFFLOAD_BUNDLE__"
COMPRESSED = b"CCOB"
SECTION = b".hip_fatbin"
EM_AMDGPU = 224
MAX_TABLE = 16 * 2**20
MAX_SECTION = 8 * 2**30
MAX_BUNDLES = 100_000
MAX_ENTRIES = 4096  # targets in one bundle; a real one has a dozen
MAX_ID = 256
MAX_INFLATE = 1 << 20  # of a compressed bundle, only its header is needed
CHUNK = 1 << 22
UNREADABLE = "compressed:"  # a target name standing for a bundle this Python cannot inflate: compressed:zstd
# e_flags & 0xff -> processor (LLVM include/llvm/BinaryFormat/ELF.h, EF_AMDGPU_MACH_AMDGCN_*)
MACH = {
    0x20: "gfx600", 0x21: "gfx601", 0x22: "gfx700", 0x23: "gfx701", 0x24: "gfx702", 0x25: "gfx703", 0x26: "gfx704",
    0x28: "gfx801", 0x29: "gfx802", 0x2A: "gfx803", 0x2B: "gfx810", 0x2C: "gfx900", 0x2D: "gfx902", 0x2E: "gfx904",
    0x2F: "gfx906", 0x30: "gfx908", 0x31: "gfx909", 0x32: "gfx90c", 0x33: "gfx1010", 0x34: "gfx1011", 0x35: "gfx1012", 0x36: "gfx1030",
    0x37: "gfx1031", 0x38: "gfx1032", 0x39: "gfx1033", 0x3A: "gfx602", 0x3B: "gfx705", 0x3C: "gfx805", 0x3D: "gfx1035",
    0x3E: "gfx1034", 0x3F: "gfx90a", 0x40: "gfx940", 0x41: "gfx1100", 0x42: "gfx1013", 0x43: "gfx1150", 0x44: "gfx1103",
    0x45: "gfx1036", 0x46: "gfx1101", 0x47: "gfx1102", 0x48: "gfx1200", 0x4A: "gfx1151", 0x4B: "gfx941", 0x4C: "gfx942",
    0x4E: "gfx1201", 0x4F: "gfx950", 0x51: "gfx9-generic", 0x52: "gfx10-1-generic", 0x53: "gfx10-3-generic",
    0x54: "gfx11-generic", 0x55: "gfx1152", 0x59: "gfx12-generic", 0x5F: "gfx9-4-generic",
}  # fmt: skip
_FEATURE_V4 = {0x100: "any", 0x200: "-", 0x300: "+"}  # xnack, bits 8-9 (0: unsupported)
_SRAMECC_V4 = {0x400: "any", 0x800: "-", 0xC00: "+"}  # sramecc, bits 10-11


class NotCode(ValueError):
    """Not a regular ELF file, or its structures run past the file (truncated?)."""


class Bounded(ValueError):
    """Reading it would pass a bound (too many bundles or entries, the deadline)."""


def _read(f: BinaryIO, offset: int, size: int) -> bytes:
    f.seek(offset)
    data = f.read(size)
    if len(data) != size:
        raise NotCode(f"the file ends inside a structure at byte {offset} (truncated?)")
    return data


def open_regular(path: str) -> BinaryIO:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotCode("not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def target_of_id(bundle_id: str) -> str | None:
    """`hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-` -> `gfx90a:xnack-`; None for a host or non-AMDGPU entry."""
    parts = bundle_id.split("-")  # kind, then the triple's arch-vendor-os[-environment], then the target ID
    if len(parts) < 5 or parts[1] != "amdgcn" or parts[0] not in ("hip", "hipv4", "hipv5", "hipv6", "openmp"):
        return None
    rest = parts[5:] if len(parts) > 5 and not parts[4].startswith("gfx") else parts[4:]
    return "-".join(rest) or None


def target_of_flags(abi: int, flags: int) -> str:
    """An AMDGPU ELF header's target ID: its processor and xnack/sramecc settings (code object V4+:
    ABI version 2 on; V3 (1) has on/off bits only)."""
    name = MACH.get(flags & 0xFF, f"gfx-mach-0x{flags & 0xFF:02x}")
    features = []
    if abi >= 2:
        sramecc, xnack = _SRAMECC_V4.get(flags & 0xC00), _FEATURE_V4.get(flags & 0x300)
    else:
        sramecc, xnack = ("+" if flags & 0x200 else None), ("+" if flags & 0x100 else None)
    if sramecc in ("+", "-"):
        features.append(f"sramecc{sramecc}")
    if xnack in ("+", "-"):
        features.append(f"xnack{xnack}")
    return ":".join([name, *features])


def _inflate(method: int, payload: bytes) -> bytes:
    if method == 0:
        return zlib.decompressobj().decompress(payload, MAX_INFLATE)
    if method == 1:
        try:
            from compression import zstd  # type: ignore[import-not-found,unused-ignore]  # Python 3.14+
        except ImportError:
            raise LookupError("zstd") from None
        out: bytes = zstd.ZstdDecompressor().decompress(payload, MAX_INFLATE)
        return out
    raise LookupError(f"method {method}")


def _ccob_header(f: BinaryIO, at: int, end: int) -> tuple[int, int, int]:
    """(method, header size, total size) of a compressed bundle at `at`."""
    version, method = struct.unpack("<HH", _read(f, at + 4, 4))
    if version == 1:
        return method, 20, end - at
    if version == 2:
        (total,) = struct.unpack("<I", _read(f, at + 8, 4))
        return method, 24, total
    if version == 3:
        (total,) = struct.unpack("<Q", _read(f, at + 8, 8))
        return method, 32, total
    raise NotCode(f"compressed bundle version {version} is not one LLVM writes (1-3)")


def _plain_entries(data: bytes) -> list[str]:
    """The device targets a plain bundle's header lists (`data` starts at its magic)."""
    if len(data) < 32:
        raise NotCode("a bundle header is cut short")
    (count,) = struct.unpack_from("<Q", data, 24)
    if count > MAX_ENTRIES:
        raise Bounded(f"a bundle lists {count:,} entries, far more than any real one")
    out, pos = [], 32
    for _ in range(count):
        if pos + 24 > len(data):
            raise NotCode("a bundle's entry table is cut short")
        _, _, length = struct.unpack_from("<QQQ", data, pos)
        if length > MAX_ID or pos + 24 + length > len(data):
            raise NotCode("a bundle entry's id is malformed")
        target = target_of_id(data[pos + 24 : pos + 24 + length].decode("ascii", "replace"))
        pos += 24 + length
        if target:
            out.append(target)
    return out


def bundles(f: BinaryIO, offset: int, size: int, deadline: float | None = None) -> list[str]:
    """Every device target of every bundle in a region (repeats counted: one per bundle that holds it);
    a compressed bundle this Python cannot inflate stands as `compressed:<method>`."""
    if size > MAX_SECTION:
        raise Bounded(f"its .hip_fatbin holds {size:,} bytes, more than any real library")
    found: list[str] = []
    position, end, seen = offset, offset + size, 0
    while position + 8 <= end:
        if deadline is not None and time.monotonic() > deadline:
            raise Bounded("its code objects were not read by the deadline")
        head = _read(f, position, min(CHUNK, end - position))
        hits = [i for i in (head.find(PLAIN), head.find(COMPRESSED)) if i >= 0]
        if not hits:
            position += max(len(head) - len(PLAIN), 1)
            continue
        at = position + min(hits)
        seen += 1
        if seen > MAX_BUNDLES:
            raise Bounded(f"more than {MAX_BUNDLES:,} bundles")
        if _read(f, at, 4) == COMPRESSED:
            method, header, total = _ccob_header(f, at, end)
            if total < header or at + total > end:
                raise NotCode("a compressed bundle runs past its section")
            payload = _read(f, at + header, min(total - header, MAX_INFLATE))
            try:
                found += _plain_entries(_inflate(method, payload))
            except LookupError as exc:
                found.append(UNREADABLE + str(exc))
            except zlib.error:
                raise NotCode("a zlib-compressed bundle does not inflate") from None
            position = at + max(total, 8)
        else:
            table = _read(f, at, min(end - at, 32 + MAX_ENTRIES * (24 + MAX_ID)))
            found += _plain_entries(table)
            position = at + len(PLAIN)
    return found


def read(path: str, deadline: float | None = None) -> list[str]:
    """The device targets of a file: a bare AMDGPU code object's one target, a bare bundle's, or those
    of the bundles in an ELF file's .hip_fatbin section; [] when it has none."""
    with open_regular(path) as f:
        head = f.read(64)
        if head.startswith((PLAIN, COMPRESSED)):
            return bundles(f, 0, os.fstat(f.fileno()).st_size, deadline)
        if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            raise NotCode("not a 64-bit little-endian ELF file")
        (machine,) = struct.unpack_from("<H", head, 18)
        if machine == EM_AMDGPU:
            (flags,) = struct.unpack_from("<I", head, 48)
            return [target_of_flags(head[8], flags)]
        found = section(f)
        return [] if found is None else bundles(f, *found, deadline)


def section(f: BinaryIO) -> tuple[int, int] | None:
    """(offset, size) of the .hip_fatbin section; None when there is none."""
    header = _read(f, 0, 64)
    shoff = struct.unpack_from("<Q", header, 0x28)[0]
    entsize, count, names = struct.unpack_from("<HHH", header, 0x3A)
    if entsize < 64 or names >= count or entsize * count > MAX_TABLE:
        raise NotCode("ELF section headers are malformed")
    table = _read(f, shoff, entsize * count)
    sections = [struct.unpack_from("<IIQQQQ", table, i * entsize) for i in range(count)]
    names_off, names_size = sections[names][4], sections[names][5]
    if names_size > MAX_TABLE:
        raise NotCode("ELF section names are malformed")
    strings = _read(f, names_off, names_size)
    for name, kind, _, _, offset, size in sections:
        if strings[name : strings.find(b"\0", name)] == SECTION and kind != 8:
            if offset + size > os.fstat(f.fileno()).st_size:
                raise NotCode("its .hip_fatbin section runs past the end of the file (truncated?)")
            return offset, size
    return None


def needed(path: str) -> list[str]:
    """The sonames an ELF shared library names in DT_NEEDED (what the dynamic loader must find)."""
    with open_regular(path) as f:
        header = _read(f, 0, 64)
        if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
            raise NotCode("not a 64-bit little-endian ELF file")
        phoff = struct.unpack_from("<Q", header, 0x20)[0]
        phentsize, phnum = struct.unpack_from("<HH", header, 0x36)
        if phentsize < 56 or phentsize * phnum > MAX_TABLE:
            raise NotCode("ELF program headers are malformed")
        phdrs = _read(f, phoff, phentsize * phnum)
        loads, dynamic = [], None
        for i in range(phnum):
            kind, _, offset, vaddr, _, filesz, _, _ = struct.unpack_from("<IIQQQQQQ", phdrs, i * phentsize)
            if kind == 1:
                loads.append((vaddr, offset, filesz))
            elif kind == 2:
                dynamic = (offset, filesz)
        if dynamic is None or dynamic[1] > MAX_TABLE:
            return []
        entries = _read(f, dynamic[0], dynamic[1])
        tags = [struct.unpack_from("<qQ", entries, i) for i in range(0, len(entries) - 15, 16)]
        strtab = next((v for t, v in tags if t == 5), None)
        strsz = next((v for t, v in tags if t == 10), 0)
        if strtab is None or strsz > MAX_TABLE:
            return []
        where = next((off + strtab - va for va, off, size in loads if va <= strtab < va + size), None)
        if where is None:
            raise NotCode("DT_STRTAB lies in no loaded segment")
        strings = _read(f, where, strsz)
        return [strings[v : strings.find(b"\0", v)].decode("ascii", "replace") for t, v in tags if t == 1]


def _is_code(name: str) -> bool:
    return name.endswith((".so", ".co", ".hsaco")) or ".so." in name


def scan(roots: list[str], max_files: int = 20000) -> dict[str, object]:
    """Every file under `roots` with AMD device code: its targets counted; `unreadable` lists what failed."""
    libraries: list[dict[str, object]] = []
    files = 0
    for root in roots:
        for folder, dirs, names in os.walk(root):
            dirs.sort()
            for name in sorted(names):
                path = os.path.join(folder, name)
                if not _is_code(name) or os.path.islink(path) or not os.path.isfile(path):
                    continue
                files += 1
                if files > max_files:
                    raise SystemExit(f"more than {max_files} libraries under {', '.join(roots)}")
                try:
                    found = read(path)
                except (NotCode, OSError):
                    continue
                except Bounded as exc:
                    raise SystemExit(f"{path}: {exc}") from None
                if found:
                    counted = sorted(Counter(found).items())
                    libraries.append({"path": os.path.relpath(path, root), "root": root, "targets": [[t, n] for t, n in counted]})
    return {"libraries": libraries}


if __name__ == "__main__":
    print(json.dumps(scan(sys.argv[1:]), sort_keys=True))
