"""What a known-good image runs on, in one cell: the compute capabilities its kernels cover, the
oldest driver its CUDA runtime accepts and the CPU architecture, so "which image for our V100s"
is answered by looking at the report or `builder catalog`.

A ROCm image: the gfx targets every framework's libraries have code objects for (measured, from
the record's AMD fit) and the oldest kernel AMD supports its ROCm on.

Pure: from the record and the compat tables (gpu_arch.yaml, compat.yaml's driver floors and
cuDNN's GPU floor), marked `table`; a fit measured from the image's own binaries will be marked
`measured`. The same row lookup serves `builder fit` (usecases/fit.py), so the column and the
verdict never disagree about a wheel's range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from packaging.version import InvalidVersion

from builder.catalog.records import KnownGood
from builder.compat import gpu_arch, runtime_fit
from builder.compat.facts import Compat
from builder.compat.rocm import gfx_key
from builder.compat.rules import framework, names
from builder.compat.rules.cuda import require_cuda
from builder.fit import driver as drivers
from builder.fit import gfx as gfxs
from builder.model.amd_fit import AmdFit
from builder.model.plan import PLATFORM_ARCH
from builder.model.versions import cc_tuple, release_tuple

Source = Literal["table", "measured"]
_CUDA_VARIANT = re.compile(r"^cu(?:da)?(\d{2,3})$")


@dataclass(frozen=True)
class RunsOn:
    gpus: str  # "sm 7.5-12.0 (+PTX)", "sm >= 7.5", "gfx908 gfx90a gfx942", "any (CPU image)", or what is not known and why
    driver: (
        str | None
    )  # the oldest NVIDIA driver `docker run --gpus all` starts it on (its NVIDIA_REQUIRE_CUDA); None: no CUDA, or not known
    arch: str  # the CPU architecture, "amd64" or "arm64"
    source: Source  # "table": from the compat tables; "measured": from the image's binaries
    kernel: str | None = None  # ROCm: the oldest Linux kernel AMD supports its ROCm release on (compat.yaml rocm.releases)

    @property
    def label(self) -> str:
        """One cell: `sm 7.5-12.0 (+PTX), driver >= 580.65.06, amd64 (table)`, `gfx90a gfx942, Linux >= 4.18, amd64 (measured)`."""
        parts = [self.gpus, *([f"driver >= {self.driver}"] if self.driver else []), *([f"Linux >= {self.kernel}"] if self.kernel else [])]
        return f"{', '.join([*parts, self.arch])} ({self.source})"

    def to_json(self) -> dict[str, object]:
        kernel = {"kernel": self.kernel} if self.kernel else {}
        return {"gpus": self.gpus, "driver": self.driver, **kernel, "arch": self.arch, "source": self.source, "label": self.label}


def record_arch(record: KnownGood) -> str:
    """The CPU architecture a record's image is for: its platform, as publish recorded it (its lock's)."""
    return PLATFORM_ARCH.get(record.platform, record.platform.partition("/")[2])


def runs_on(record: KnownGood, compat: Compat) -> RunsOn:
    """The record's compute capabilities (every GPU framework's kernels and its cuDNN's floor, intersected),
    its driver floor and architecture: measured, when the record carries the image's fit, else from the tables. Lenient about odd versions: a cell, never a crash."""
    kind = record.accelerator.kind
    arch = record_arch(record)
    if kind == "cpu":
        return RunsOn("any (CPU image)", None, arch, "table")
    if kind == "rocm":
        return rocm_runs_on(record.amd, record.accelerator.rocm or record.accelerator.version, arch, compat)
    requirement = requirement_of(record, compat)
    started = runtime_fit.first_driver(requirement, compat) if requirement else None  # what `docker run` starts it on
    if record.fit is not None:  # measured from the image's own binaries when it was smoke-tested
        return RunsOn(f"sm {record.fit.cc_label()}", started or record.fit.driver_floor(), arch, "measured")
    cuda = cuda_mm(record.accelerator.cuda or record.accelerator.version or "")
    floor = drivers.floor_for(cuda, compat) if cuda else None
    return RunsOn(_cuda_gpus(record, cuda, compat), started or (floor.floor if floor else None), arch, "table")


def rocm_runs_on(amd: AmdFit | None, rocm: str | None, arch: str, compat: Compat) -> RunsOn:
    """A ROCm image's cell: the gfx targets it runs on, measured from its code objects (`gfx_targets`),
    and the oldest kernel AMD supports its ROCm on; nothing is taken from a table."""
    release = compat.rocm.release(rocm) if rocm else None
    kernel = release.kernel if release else None
    if amd is None:
        return RunsOn("gfx ? (its code objects are not measured)", None, arch, "table", kernel)
    targets = " ".join(gfx_targets(amd, compat))
    unread = sorted({t.partition(":")[2] for lib in amd.libraries for t, _ in lib.targets if t.startswith("compressed:")})
    if unread:  # bundles this Python cannot inflate: the processors they hold are not known
        note = f"compressed code objects ({', '.join(unread)}) not read"
        return RunsOn(f"{targets} (+ {note})" if targets else f"gfx ? ({note})", None, arch, "measured", kernel)
    return RunsOn(targets or "gfx: none (no processor has code in every library)", None, arch, "measured", kernel)


def gfx_targets(amd: AmdFit, compat: Compat) -> tuple[str, ...]:
    """The processors every framework of the image runs on through every library it loads: the rule
    `builder fit --gfx` judges with (fit/gfx.py: the exact processor or a generic target), asked of
    every processor some code object names or a generic one covers, kept where each library `fits`
    (a processor only one xnack/sramecc mode runs is left out: that is `unknown`, not a yes). A
    processor its ROCm release does not support is still listed: its own libraries have code for it."""
    candidates: set[str] = set()
    for library in amd.libraries:
        for target, _ in library.targets:
            processor = target.split(":")[0]
            if processor.startswith("compressed:"):
                continue
            candidates.update(compat.rocm.runs_on(processor) if processor.endswith("-generic") else (processor,))
    if not amd.frameworks:  # a base's libraries (rocBLAS's per-GPU code object files are alternatives): what they have code for
        return amd.targets
    libraries = {lib.path: lib for lib in amd.libraries}
    paths = {path for f in amd.frameworks for path in f.libraries}

    def runs(processor: str) -> bool:
        return all(
            gfxs.judge_library(path, [t for t, _ in libraries[path].targets], processor, compat.rocm).status == "fits" for path in paths
        )

    return tuple(sorted((p for p in candidates if runs(p)), key=gfx_key))


def requirement_of(record: KnownGood, compat: Compat) -> str | None:
    """The NVIDIA_REQUIRE_CUDA the record's image was rendered with: the same function (compat/rules/cuda.py)
    from the CUDA it declares (its accelerator version, the lock's when the lock loads another minor)."""
    version = record.accelerator.version
    if record.accelerator.kind != "cuda" or not version:
        return None
    try:
        return require_cuda(version, compat)
    except (InvalidVersion, IndexError):
        return None


def _cuda_gpus(record: KnownGood, cuda: str | None, compat: Compat) -> str:
    cudnn = cudnn_floor(record.accelerator.cudnn or "", compat)
    floor_note = f"; its cuDNN needs >= {cudnn}" if cudnn else ""
    rows = []
    for name, version in sorted(record.frameworks.items()):
        if name not in names():
            continue  # not a GPU framework of the registry (e.g. numpy)
        row = framework_row(name, version, cuda or "") if framework(name).gpu_arch else None
        if row is None:
            return f"sm ? ({name} {version} not in the tables{floor_note})"
        rows.append(row)
    if not rows:
        return f"sm ? (no framework in the tables{floor_note})"
    floors = [row.cc_min for row in rows]
    lowest = max([*floors, *([cudnn] if cudnn else [])], key=cc_tuple)
    capped = [row for row in rows if row.cc_max is not None]
    if not capped:
        return f"sm >= {lowest}"
    highest = min((row.cc_max for row in capped if row.cc_max is not None), key=cc_tuple)
    ptx = all(row.ptx for row in capped if row.cc_max == highest)
    return f"sm {lowest}-{highest}" + (" (+PTX)" if ptx else "")


def cuda_mm(value: str) -> str | None:
    """A CUDA version as major.minor ("13.0.96" -> "13.0"), leniently; None when it holds no number."""
    release = release_tuple(value)
    if not release:
        return None
    return f"{release[0]}.{release[1] if len(release) > 1 else 0}"


def cudnn_floor(cudnn: str, compat: Compat) -> str | None:
    """The lowest compute capability a cuDNN release supports (9.11 dropped Maxwell, Pascal, Volta:
    compat.yaml cuda.cudnn_cc); None when no floor applies."""
    floors = [cc for since, cc in compat.cudnn_cc if cudnn and release_tuple(cudnn) >= release_tuple(since)]
    return max(floors, key=cc_tuple) if floors else None


def framework_row(name: str, version: str, cuda: str) -> gpu_arch.ArchRange | None:
    """The gpu_arch row of this framework release built for this CUDA: the local version's variant
    (2.14.1+cu130) when it has one, else the variant whose CUDA matches the record's (cuda13, cu13, cu130)."""
    public, _, local = version.partition("+")
    if local:
        return gpu_arch.lookup(name, local, public)
    release = release_tuple(cuda) if cuda else ()
    if not release:
        return None
    major, minor = release[0], release[1] if len(release) > 1 else 0
    for row in gpu_arch.default_table():
        for variant in row.variants:
            match = _CUDA_VARIANT.fullmatch(variant)
            if match is None or not row.covers(name, variant, public):
                continue
            digits = match.group(1)
            if (len(digits) == 2 and int(digits) == major) or (len(digits) == 3 and (int(digits[:-1]), int(digits[-1])) == (major, minor)):
                return row
    return None
