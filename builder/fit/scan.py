"""The device code of an image's CUDA libraries, read inside the image by the image's own Python.

Stdlib only (Python 3.9+) and importing nothing of builder: fit/measure.py sends its text to `python -I -c`
in the smoke test's locked-down container (read-only, no network, non-root), so the image's files
are read where they are and nothing is copied out. builder/fit/fatbin.py reads libraries on this
machine through the same functions, and tests/test_fit.py holds that reading equal to NVIDIA's
cuobjdump. Only headers are read, never the compressed payloads.

The fatbin layout (little-endian), as NVIDIA's `fatbinary` writes it:
- a blob: u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size of the entries after it;
  a section holds blobs one after another (8-byte aligned);
- an entry: u16 kind (1 PTX, 2 ELF), u16 version, u32 header size, u64 payload size, ..., u32 at
  24 the code version (major << 16 | minor: the PTX ISA for PTX), u32 at 28 the SM (90 for sm_90),
  u32 at 40 flags (0x100000: arch-specific `a`; 0x200000: family-specific `f`, which cuobjdump lists
  for PTX, compute_120f, and for cubins as the plain target).

Bounded, since a file is input (a crafted one, or a FIFO named like a library): only regular files
are read (opened without blocking, checked after opening); the section table, the section names and
the `.nv_fatbin` section are capped in size and must lie inside the file; the walk finds the next
blob with a C-speed search instead of 8 bytes at a time, and stops at MAX_STEPS headers and at an
optional deadline. What exceeds a bound is `Bounded`, never hours of reading.

Run as a script, it prints one JSON object: every shared library under the venv's site-packages
that holds device code (its entries counted by kind, SM, flags and code version), each framework's
package folders (found without importing it), the CUDA runtime version of each libcudart and the
architectures each libnvrtc compiles for (both through ctypes: neither needs a GPU).
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import stat
import struct
import sys
import sysconfig
import time
from collections import Counter
from typing import BinaryIO

MAGIC = 0xBA55ED50
KIND_PTX = 1
KIND_ELF = 2
ARCH_SPECIFIC = 0x100000
FAMILY_SPECIFIC = 0x200000
SECTION = b".nv_fatbin"
_ENTRY = struct.Struct("<HHIQIIII8xI")  # kind, version, header size, payload size, -, -, code version, sm, flags
MAX_FILES = 20000  # shared libraries walked under site-packages; a venv has a few hundred
# The .nv_fatbin of the largest libraries known (libtorch_cuda.so builds of ~1.5 GB) fits with room.
MAX_SECTION = 4 * 2**30
MAX_TABLE = 16 * 2**20  # the section header table, and the section names (a real library: a few KB)
# Blob and entry headers read in one section: libtorch_cuda.so 2.14.1 has 2,975 entries.
MAX_STEPS = 2_000_000
CHUNK = 1 << 20  # how much padding is searched for the next blob at a time

Entry = tuple[int, int, int, int]  # kind, sm, flags, code version


class NotElf(ValueError):
    """The file is not a 64-bit little-endian ELF file (or not a regular file), or its fatbin is cut short."""


class Bounded(ValueError):
    """Reading the file would pass a bound (a section too large, too many headers, the deadline)."""


def _read(f: BinaryIO, offset: int, size: int) -> bytes:
    f.seek(offset)
    data = f.read(size)
    if len(data) != size:
        raise NotElf(f"the file ends inside a structure at byte {offset} (truncated?)")
    return data


def _in_time(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise Bounded("its device code was not read by the deadline (a crafted or damaged file?)")


def section(f: BinaryIO) -> tuple[int, int] | None:
    """(offset, size) of the .nv_fatbin section; None when the file has none. The section must lie
    inside the file and be at most MAX_SECTION bytes."""
    f.seek(0)
    header = f.read(64)
    if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
        raise NotElf("not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", header, 0x28)[0]
    entsize, count, names = struct.unpack_from("<HHH", header, 0x3A)
    if entsize < 64 or names >= count or entsize * count > MAX_TABLE:
        raise NotElf("ELF section headers are malformed")
    table = _read(f, shoff, entsize * count)
    sections = [struct.unpack_from("<IIQQQQ", table, i * entsize) for i in range(count)]
    _, _, _, _, names_off, names_size = sections[names]
    if names_size > MAX_TABLE:
        raise NotElf("ELF section names are malformed")
    strings = _read(f, names_off, names_size)
    for name, kind, _, _, offset, size in sections:
        if strings[name : strings.find(b"\0", name)] == SECTION and kind != 8:  # 8: SHT_NOBITS
            if offset + size > os.fstat(f.fileno()).st_size:
                raise NotElf("its .nv_fatbin section runs past the end of the file (truncated?)")
            return offset, size
    return None


def _next_blob(f: BinaryIO, position: int, end: int, deadline: float | None) -> int:
    """The first position from `position` on, in steps of 8, where a blob's magic starts; `end` when
    there is none. Padding is searched a CHUNK at a time at C speed, not read 8 bytes at a time: by
    memchr for the magic's last byte (0xBA, rare in padding), or where that byte is common (a crafted
    file) by a search for the whole magic."""
    magic = struct.pack("<I", MAGIC)
    while position + 16 <= end:
        _in_time(deadline)
        chunk = _read(f, position, min(CHUNK, end - position))
        at = _find_aligned(chunk, magic)
        if at is not None:
            return position + at
        position += len(chunk) // 8 * 8  # every aligned place with a whole magic in the chunk was searched
    return end


def _find_aligned(chunk: bytes, magic: bytes) -> int | None:
    """The first offset in `chunk`, a multiple of 8, where `magic` starts."""
    at, hits = chunk.find(magic[3:], 3), 0
    while at != -1 and hits < 64:
        if (at - 3) % 8 == 0 and chunk[at - 3 : at + 1] == magic:
            return at - 3
        at, hits = chunk.find(magic[3:], at + 1), hits + 1
    if at == -1:
        return None
    at = chunk.find(magic)  # 0xBA is common here: the whole magic, searched at C speed
    while at != -1 and at % 8:
        at = chunk.find(magic, at + 1)
    return None if at == -1 else at


def entries(f: BinaryIO, offset: int, size: int, deadline: float | None = None) -> list[Entry]:
    """Every PTX and ELF entry of the blobs in a fatbin region, in file order (`deadline`: a
    time.monotonic() value after which reading stops with Bounded)."""
    if size > MAX_SECTION:
        raise Bounded(f"its fatbin holds {size:,} bytes, more than the {MAX_SECTION:,} any real library has")
    found: list[Entry] = []
    position, end = offset, offset + size
    steps = 0
    while position + 16 <= end:
        magic, _, header_size, entries_size = struct.unpack("<IHHQ", _read(f, position, 16))
        if magic != MAGIC:
            position = _next_blob(f, position + 8, end, deadline)  # padding between blobs
            continue
        entry, stop = position + header_size, min(position + header_size + entries_size, end)
        while entry + _ENTRY.size <= stop:
            steps += 1
            if steps > MAX_STEPS:
                raise Bounded(f"its fatbin has more than {MAX_STEPS:,} entries, far more than any real library")
            if steps % 4096 == 0:
                _in_time(deadline)
            kind, _, entry_header, payload, _, _, code, sm, flags = _ENTRY.unpack(_read(f, entry, _ENTRY.size))
            if kind in (KIND_ELF, KIND_PTX):
                found.append((kind, sm, flags & (ARCH_SPECIFIC | FAMILY_SPECIFIC), code))
            if entry_header == 0:
                break
            entry += entry_header + payload
        position = max(stop, position + 16)
        steps += 1
    return found


def open_regular(path: str) -> BinaryIO:
    """The file opened for reading, refused unless it is a regular file: opened without blocking (a
    FIFO named like a library would wait for a writer) and checked on the opened file, not the name."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotElf("not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read(path: str, deadline: float | None = None) -> list[Entry]:
    """The entries of an ELF file's .nv_fatbin section, or of a bare .fatbin file; [] when it has none."""
    with open_regular(path) as f:
        if f.read(4) == struct.pack("<I", MAGIC):
            return entries(f, 0, os.fstat(f.fileno()).st_size, deadline)
        found = section(f)
        return [] if found is None else entries(f, *found, deadline)


def _is_library(name: str) -> bool:
    return name.endswith(".so") or ".so." in name


def _roots() -> list[str]:
    paths = sysconfig.get_paths()
    return sorted({os.path.realpath(paths[key]) for key in ("purelib", "platlib") if os.path.isdir(paths[key])})


def _libraries(root: str) -> list[str]:
    out: list[str] = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            if _is_library(name) and not os.path.islink(path) and os.path.isfile(path):
                out.append(path)
                if len(out) > MAX_FILES:
                    raise SystemExit(f"more than {MAX_FILES} shared libraries under {root}")
    return out


def _int_call(lib: ctypes.CDLL, name: str, count: int) -> list[int] | None:
    values = [ctypes.c_int(0) for _ in range(count)]
    if getattr(lib, name)(*[ctypes.byref(v) for v in values]) != 0:
        return None
    return [v.value for v in values]


def _cudart(path: str) -> str | None:
    lib = ctypes.CDLL(path)
    got = _int_call(lib, "cudaRuntimeGetVersion", 1)
    return None if got is None else f"{got[0] // 1000}.{got[0] % 1000 // 10}"


def _nvrtc(path: str) -> dict[str, object] | None:
    lib = ctypes.CDLL(path)
    version = _int_call(lib, "nvrtcVersion", 2)
    count = _int_call(lib, "nvrtcGetNumSupportedArchs", 1)
    if version is None or count is None:
        return None
    archs = (ctypes.c_int * count[0])()
    if lib.nvrtcGetSupportedArchs(archs) != 0:
        return None
    return {"version": f"{version[0]}.{version[1]}", "archs": sorted(archs)}


def main(frameworks: list[str]) -> dict[str, object]:
    libraries: list[dict[str, object]] = []
    runtimes: dict[str, str] = {}
    compilers: dict[str, object] = {}
    roots = _roots()
    for root in roots:
        for path in _libraries(root):
            rel = os.path.relpath(path, root)
            name = os.path.basename(path)
            try:
                found = read(path)
            except (NotElf, OSError):
                found = []
            except Bounded as exc:
                raise SystemExit(f"{rel}: {exc}") from None
            if found:
                counted = Counter(found)
                libraries.append({"path": rel, "entries": [[*key, n] for key, n in sorted(counted.items())]})
            try:
                if name.startswith("libcudart.so"):
                    version = _cudart(path)
                    if version:
                        runtimes[rel] = version
                elif name.startswith("libnvrtc.so"):
                    compiler = _nvrtc(path)
                    if compiler:
                        compilers[rel] = compiler
            except (OSError, AttributeError):
                pass  # a library that does not load here (a missing dependency): its version is not read
    folders: dict[str, list[str]] = {}
    for name in frameworks:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        folders[name] = sorted(
            os.path.relpath(os.path.realpath(p), root) for p in locations for root in roots if os.path.realpath(p).startswith(root + os.sep)
        )
    return {"libraries": libraries, "frameworks": folders, "cudart": runtimes, "nvrtc": compilers}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), sort_keys=True))
