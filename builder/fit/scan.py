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
import struct
import sys
import sysconfig
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

Entry = tuple[int, int, int, int]  # kind, sm, flags, code version


class NotElf(ValueError):
    """The file is not a 64-bit little-endian ELF file, or its fatbin is cut short."""


def _read(f: BinaryIO, offset: int, size: int) -> bytes:
    f.seek(offset)
    data = f.read(size)
    if len(data) != size:
        raise NotElf(f"the file ends inside a structure at byte {offset} (truncated?)")
    return data


def section(f: BinaryIO) -> tuple[int, int] | None:
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


def entries(f: BinaryIO, offset: int, size: int) -> list[Entry]:
    """Every PTX and ELF entry of the blobs in a fatbin region, in file order."""
    found: list[Entry] = []
    position, end = offset, offset + size
    while position + 16 <= end:
        magic, _, header_size, entries_size = struct.unpack("<IHHQ", _read(f, position, 16))
        if magic != MAGIC:
            position += 8  # padding between blobs
            continue
        entry, stop = position + header_size, min(position + header_size + entries_size, end)
        while entry + _ENTRY.size <= stop:
            kind, _, entry_header, payload, _, _, code, sm, flags = _ENTRY.unpack(_read(f, entry, _ENTRY.size))
            if kind in (KIND_ELF, KIND_PTX):
                found.append((kind, sm, flags & (ARCH_SPECIFIC | FAMILY_SPECIFIC), code))
            if entry_header == 0:
                break
            entry += entry_header + payload
        position = max(stop, position + 16)
    return found


def read(path: str) -> list[Entry]:
    """The entries of an ELF file's .nv_fatbin section, or of a bare .fatbin file; [] when it has none."""
    with open(path, "rb") as f:
        if f.read(4) == struct.pack("<I", MAGIC):
            return entries(f, 0, os.fstat(f.fileno()).st_size)
        found = section(f)
        return [] if found is None else entries(f, *found)


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
