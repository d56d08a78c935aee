"""numba: Python range, the NumPy ceiling it enforces at import, numba-cuda on CUDA bases."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from packaging.version import Version

from builder.compat.facts import Compat
from builder.compat.rules import Cc, Framework, Nvrtc, Row, below_lowest
from builder.compat.tables import PyRange, Table
from builder.model.plan import Base, Install, Verdict
from builder.model.versions import in_range, mm, newest_at_or_below, span
from builder.util.yamlsrc import LDict

SECTION_KEYS = ("releases", "builtin_cuda", "builtin_nvvm", "numba_cuda")
NVVM_WHEEL = re.compile(r"nvidia-cuda-nvcc-cu\d+==\d+(\.\d+)+")


@dataclass(frozen=True)
class NumbaRelease:
    version: str
    python: PyRange
    numpy: tuple[str, str]


@dataclass(frozen=True)
class NumbaCuda:
    numba_min: str
    version: str
    extras: tuple[tuple[str, str], ...]  # CUDA major -> extra
    python: PyRange
    numpy_max: str


@dataclass(frozen=True)
class NumbaFacts:
    releases: tuple[NumbaRelease, ...]
    builtin_cuda: tuple[str, ...]  # CUDA majors numba's own (deprecated) CUDA target serves
    builtin_nvvm: tuple[tuple[str, str], ...]  # CUDA major.minor -> the nvidia-cuda-nvcc wheel pin that brings its libNVVM
    numba_cuda: tuple[NumbaCuda, ...]  # by numba_min, ascending


def load(t: Table, section: LDict) -> NumbaFacts:
    releases = tuple(
        NumbaRelease(str(row["version"]), t.pyrange(row["python"], row.line), t.pyrange(row["numpy"], row.line))
        for row in t.rows(t.section(section, "releases"), ("version", "python", "numpy"), "version", section.line)
    )
    keys = ("numba_min", "version", "extras", "python", "numpy_max")
    numba_cuda = tuple(
        NumbaCuda(
            str(row["numba_min"]),
            str(row["version"]),
            tuple(sorted((str(k), str(v)) for k, v in row["extras"].items())),
            t.pyrange(row["python"], row.line),
            str(row["numpy_max"]),
        )
        for row in t.rows(t.section(section, "numba_cuda"), keys, "numba_min", section.line)
    )
    nvvm = []
    for row in t.rows(t.section(section, "builtin_nvvm"), ("cuda", "wheel"), "cuda", section.line):
        if not NVVM_WHEEL.fullmatch(str(row["wheel"])):
            raise t.fail(
                f"numba builtin_nvvm wheel must pin an nvidia-cuda-nvcc-cuNN wheel exactly (nvidia-cuda-nvcc-cu11==11.8.89), got {row['wheel']!r}",
                row.line,
            )
        nvvm.append(("{}.{}".format(*mm(str(row["cuda"]))), str(row["wheel"])))
    return NumbaFacts(
        releases=releases,
        builtin_cuda=t.strs(t.section(section, "builtin_cuda"), section.line),
        builtin_nvvm=tuple(nvvm),
        numba_cuda=numba_cuda,
    )


def _release(version: str, facts: NumbaFacts) -> NumbaRelease | None:
    """The exact row, else the newest row of the same minor (0.68.1 behaves like 0.68.0)."""
    exact = next((r for r in facts.releases if r.version == version), None)
    if exact is not None:
        return exact
    same_minor = [r for r in facts.releases if mm(r.version) == mm(version) and Version(r.version) <= Version(version)]
    return same_minor[-1] if same_minor else None


def decide_numba(base: Base, python: str, version: str, compat: Compat) -> Verdict:
    facts = compat.facts(NumbaFacts)
    rel = _release(version, facts)
    if rel is None:
        return Verdict.no(
            f"numba {version} is not in the compatibility table, so its NumPy ceiling is unknown; "
            "add it (numba/__init__.py _ensure_critical_deps) to builder/compat/data/compat.yaml"
        )
    if not in_range(python, rel.python):
        return Verdict.no(f"numba {version} supports Python {span(rel.python)}; this image has Python {python}")
    if base.vendor == "rocm":
        return Verdict.no("numba has no ROCm GPU target (its ROC target was removed); use a CUDA or cpu base")
    if base.vendor == "cpu":
        return Verdict(
            ok=True,
            install=Install("numba", version, (f"numba=={version}",), variant="cpu", numpy_min=rel.numpy[0], numpy_max=rel.numpy[1]),
        )
    assert base.version is not None
    major = str(mm(base.version)[0])
    if major in facts.builtin_cuda:
        if base.cuda_from_wheels:
            return Verdict.no(
                f"numba's built-in CUDA target (CUDA {major}) needs the CUDA toolkit's NVVM from the system; "
                f"base {base.name} brings CUDA from wheels: use a CUDA 12+ base (numba-cuda) or an nvidia/cuda base"
            )
        minor = "{}.{}".format(*mm(base.version))
        wheel = dict(facts.builtin_nvvm).get(minor)
        if wheel is None:
            known = ", ".join(c for c, _ in facts.builtin_nvvm) or "none"
            return Verdict.no(
                f"numba's built-in CUDA target needs libNVVM, which an nvidia/cuda -runtime base lacks, and the table has no "
                f"nvidia-cuda-nvcc wheel for CUDA {minor} (numba.builtin_nvvm: {known}); base {base.name} is CUDA {base.version}"
            )
        install = Install(
            "numba", version, (f"numba=={version}", wheel), variant=f"cuda{major}", built_cuda=major, numpy_min=rel.numpy[0], numpy_max=rel.numpy[1],
            notes=(f"numba's built-in CUDA target serves CUDA {major} (numba-cuda needs CUDA 12+); its libNVVM comes from {wheel}, linked at /usr/local/cuda/nvvm",),
        )  # fmt: skip
        return Verdict(ok=True, install=install)
    return _numba_cuda(base, python, version, rel, facts, major)


def _numba_cuda(base: Base, python: str, version: str, rel: NumbaRelease, facts: NumbaFacts, major: str) -> Verdict:
    i = newest_at_or_below(version, [row.numba_min for row in facts.numba_cuda])
    if i is None:
        first = facts.numba_cuda[0]
        return Verdict.no(f"numba-cuda (CUDA {major}) needs numba >= {first.numba_min}; this image pins numba {version}")
    nc = facts.numba_cuda[i]
    extra = dict(nc.extras).get(major)
    if extra is None:
        return Verdict.no(
            f"numba-cuda {nc.version} supports CUDA {', '.join(k for k, _ in nc.extras)} only; base {base.name} is CUDA {major}"
        )
    if not in_range(python, nc.python):
        return Verdict.no(f"numba-cuda {nc.version} ships wheels for Python {span(nc.python)}; this image has Python {python}")
    numpy_max = rel.numpy[1]
    notes: tuple[str, ...] = ()
    if mm(nc.numpy_max) < mm(numpy_max):
        numpy_max = nc.numpy_max
        notes = (f"numpy <= {nc.numpy_max}: numba-cuda {nc.version} fails to import on NumPy 2.5 (np.row_stack)",)
    install = Install(
        "numba", version, (f"numba=={version}", f"numba-cuda[{extra}]=={nc.version}"), variant=extra, built_cuda=major,
        numpy_min=rel.numpy[0], numpy_max=numpy_max, notes=notes,
    )  # fmt: skip
    return Verdict(ok=True, install=install)


@dataclass(frozen=True)
class Numba(Framework):
    def load(self, t: Table, section: LDict) -> NumbaFacts:
        return load(t, section)

    def decide(self, base: Base, python: str, version: str, compat: Compat) -> Verdict:
        return decide_numba(base, python, version, compat)

    def row(self, version: str, compat: Compat) -> Row | None:
        found = _release(version, compat.facts(NumbaFacts))  # as the rule reads it: 0.68.1 behaves like 0.68.0
        return Row("numba.releases", found.version, found.python) if found else None

    def row_starts(self, compat: Compat) -> tuple[str, ...]:
        return tuple(r.version for r in compat.facts(NumbaFacts).releases)

    def row_hint(self, version: str) -> str:
        return f'a numba.releases row for "{version}" (python, numpy: its import-time ceiling, numba/__init__.py _ensure_critical_deps)'

    def jit_refusal(self, device: Cc, nvrtc: Nvrtc, release: str, compat: Compat) -> str | None:
        """numba-cuda's own choice of target (0.30.4: numba/cuda/codegen.py `_ensure_cc`,
        cudadrv/nvrtc.py `get_arch_option`): on a GPU of 9.0 or newer it asks NVRTC for the
        arch-specific `compute_XYa` of the GPU itself and raises when NVRTC lacks that architecture
        (no fallback to an older one); below 9.0, NVRTC's closest architecture at or below the GPU."""
        lower = below_lowest(device, nvrtc)
        if lower is not None:
            return lower
        if device >= (9, 0) and device not in nvrtc.ccs:
            major, minor = device
            return (
                f"compiles its kernels with NVRTC {nvrtc.version} for the GPU's arch-specific compute_{major}{minor}a "
                f"(numba-cuda does so on 9.0 and newer), which NVRTC {nvrtc.version} does not know (it targets {nvrtc.span})"
            )
        return None

    def jit_unknown(self, pins: Mapping[str, str]) -> str | None:
        if "numba-cuda" in pins:
            return None
        return (
            "numba's own (deprecated) CUDA target compiles with the NVVM of its CUDA toolkit and numba's own table of "
            "architectures, which its wheels do not state as a library can be asked"
        )


FRAMEWORK = Numba("numba", SECTION_KEYS, gpu_arch=True, jit=True)
