"""The device code in an ELF file's `.nv_fatbin` section, read without NVIDIA's tools.

Checked against cuobjdump on the same files (tests/test_fit.py, tests/fixtures/cuobjdump/), so an
image's libraries can be read where cuobjdump cannot run. The reading itself is fit/scan.py's (the
layout is described there): stdlib only, so the same code runs inside an image with its own Python
(fit/measure.py); this module turns its entries into `Embedded`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from builder.fit import scan
from builder.fit.arch import Arch, Embedded

NotElf = scan.NotElf
Bounded = scan.Bounded
MAGIC = scan.MAGIC
KIND_PTX = scan.KIND_PTX
KIND_ELF = scan.KIND_ELF
ARCH_SPECIFIC = scan.ARCH_SPECIFIC
FAMILY_SPECIFIC = scan.FAMILY_SPECIFIC


def embedded(found: Iterable[tuple[scan.Entry, int]]) -> Embedded:
    """`Embedded` from (entry, how many times it occurs): SASS counted per target (a count is added,
    never expanded: a scan's output is input), PTX with its ISA."""
    sass: Counter[Arch] = Counter()
    ptx: list[Arch] = []
    isa: list[str] = []
    for (kind, sm, flags, code), count in found:
        arch = Arch(sm // 10, sm % 10, "a" if flags & ARCH_SPECIFIC else "")
        if kind == KIND_ELF:
            sass[arch] += count  # a family cubin (sm_100f) as the plain target, as cuobjdump lists it
        elif kind == KIND_PTX:
            # family PTX keeps its `f` (cuobjdump: compute_120f; cuDNN 9's wheels for CUDA 12 carry it)
            ptx.append(Arch(arch.major, arch.minor, "f") if flags & FAMILY_SPECIFIC and not arch.suffix else arch)
            isa.append(f"{code >> 16}.{code & 0xFFFF}")
    return Embedded.counted(sass, ptx, isa)


def read_entries(f: BinaryIO, offset: int, size: int) -> Embedded:
    """Walk the blobs of a fatbin region: every entry's kind, SM, flags and code version."""
    return embedded((entry, 1) for entry in scan.entries(f, offset, size))


def read(path: Path, deadline: float | None = None) -> Embedded:
    """The SASS and PTX targets (and PTX ISA versions) of an ELF file, or of a bare .fatbin file
    (regular files only; NotElf, or Bounded past a cap or the time.monotonic() `deadline`)."""
    return embedded((entry, 1) for entry in scan.read(str(path), deadline))
