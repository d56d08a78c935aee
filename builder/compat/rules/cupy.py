"""cupy: cupy-cuda11x/12x/13x by CUDA major and release; no ROCm 6 wheels exist. Its releases are
published under one index project per CUDA major, which the table names."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from builder.compat import rocm
from builder.compat.facts import Compat
from builder.compat.requires import Meta
from builder.compat.rules import Cc, Framework, Nvrtc, Row, below_lowest
from builder.compat.tables import PyRange, Table
from builder.model.plan import Base, Install, Verdict
from builder.model.versions import in_range, mm, newest_at_or_below, span
from builder.util.yamlsrc import LDict

SECTION_KEYS = ("releases", "rocm", "rocm_note")


@dataclass(frozen=True)
class CupyRelease:
    release: str
    cuda: tuple[str, str]
    packages: tuple[tuple[str, str], ...]  # CUDA major -> package
    python: PyRange
    numpy: tuple[str, str]
    ctk: bool = False  # has the [ctk] extra: the CUDA toolkit libraries as wheels
    # The newest architecture it compiles its kernels for at run time, by NVRTC version: (the newest
    # NVRTC major.minor a step covers, its cap), ascending; empty when not read for this release.
    jit_max: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class CupyFacts:
    releases: tuple[CupyRelease, ...]  # each applies from `release` up to the next row
    rocm_note: str
    rocm: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()  # from release -> (ROCm minor, package)


def load(t: Table, section: LDict) -> CupyFacts:
    keys = ("release", "cuda", "packages", "python", "numpy")
    out = []
    for row in t.rows(t.section(section, "releases"), keys, "release", section.line, optional=("ctk", "jit_max")):
        packages = row["packages"]
        if not isinstance(packages, dict) or not all(str(p).startswith("cupy-cuda") for p in packages.values()):
            raise t.fail("cupy packages must map a CUDA major to a cupy-cudaNNx package", row.line)
        out.append(
            CupyRelease(
                str(row["release"]),
                t.pyrange(row["cuda"], row.line),
                tuple(sorted((str(k), str(v)) for k, v in packages.items())),
                t.pyrange(row["python"], row.line),
                t.pyrange(row["numpy"], row.line),
                ctk=t.flag(row.get("ctk", False), "`ctk`", row.line),
                jit_max=_jit_max(t, row.get("jit_max", {}), row.line),
            )
        )
    rocm = []
    for row in t.rows(t.section(section, "rocm"), ("release", "rocm"), "release", section.line):
        packages = row["rocm"]
        if not isinstance(packages, dict) or not all(
            re.fullmatch(r"\d+\.\d+", str(k)) and str(v).startswith("cupy-rocm-") for k, v in packages.items()
        ):
            raise t.fail('cupy rocm must map a ROCm minor to a cupy-rocm-X-Y package, e.g. {"7.0": cupy-rocm-7-0}', row.line)
        rocm.append((str(row["release"]), tuple(sorted((str(k), str(v)) for k, v in packages.items()))))
    return CupyFacts(releases=tuple(out), rocm_note=str(t.section(section, "rocm_note")), rocm=tuple(rocm))


def _jit_max(t: Table, value: object, line: int) -> tuple[tuple[str, str], ...]:
    """`{"12.7": "9.0", "12.8": "12.0", "99.0": "12.1"}`: NVRTC up to 12.7 caps at 9.0, and so on."""
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise t.fail('cupy jit_max must map an NVRTC version (quoted, "12.7") to a compute capability ("9.0")', line)
    steps = sorted(((k, v) for k, v in value.items()), key=lambda kv: mm(kv[0]))
    for nvrtc, cc in steps:
        if not re.fullmatch(r"\d+\.\d+", nvrtc) or not re.fullmatch(r"\d+\.\d", cc):
            raise t.fail(f"cupy jit_max {nvrtc!r}: {cc!r} is not NVRTC major.minor -> compute capability major.minor", line)
    return tuple(steps)


def jit_cap(row: CupyRelease, nvrtc: str) -> tuple[int, int] | None:
    """The newest architecture this release compiles for with NVRTC `nvrtc`; None when the table does not say."""
    for limit, cc in row.jit_max:
        if mm(nvrtc) <= mm(limit):
            return mm(cc)
    return None


def decide_cupy(base: Base, python: str, version: str, compat: Compat) -> Verdict:
    facts = compat.facts(CupyFacts)
    if base.vendor == "cpu":
        return Verdict.no("cupy is a GPU array library with no CPU build; use a CUDA base")
    assert base.version is not None
    i = newest_at_or_below(version, [row.release for row in facts.releases])
    if i is None:
        return Verdict.no(f"cupy {version} predates the table (from {facts.releases[0].release}); use a newer cupy")
    row = facts.releases[i]
    if mm(version)[0] != mm(row.release)[0]:
        return Verdict.no(f"cupy {version} is not in the compatibility table; add its row to builder/compat/data/compat.yaml")
    if not in_range(python, row.python):
        return Verdict.no(f"cupy {version} supports Python {span(row.python)}; this image has Python {python}")
    if base.vendor == "rocm":
        return _rocm(base, version, row, compat)
    major = str(mm(base.version)[0])
    package = dict(row.packages).get(major)
    if package is None:
        have = ", ".join(p for _, p in row.packages)
        return Verdict.no(f"cupy {version} ships {have}, nothing for CUDA {major}; base {base.name} is CUDA {base.version}")
    if not in_range(base.version, row.cuda):
        return Verdict.no(f"cupy {version} supports CUDA {span(row.cuda)}; base {base.name} is CUDA {base.version}")
    requirement = f"{package}=={version}"
    if base.cuda_from_wheels:
        if not row.ctk:
            return Verdict.no(
                f"cupy {version}'s {package} has no [ctk] extra, so it needs the CUDA toolkit libraries from the system "
                f"(an nvidia/cuda base); base {base.name} brings CUDA from wheels: use cupy >= 14.0.0 there"
            )
        requirement = f"{package}[ctk]=={version}"
    install = Install(
        "cupy",
        version,
        (requirement,),
        variant=package.removeprefix("cupy-"),
        built_cuda=major,
        numpy_min=row.numpy[0],
        numpy_max=row.numpy[1],
    )
    return Verdict(ok=True, install=install)


def _rocm(base: Base, version: str, row: CupyRelease, compat: Compat) -> Verdict:
    """cupy-rocm-X-Y for the base's ROCm minor, when this release publishes one and the base provides
    every library its extension modules load (compat/rocm.py `missing`, from the wheel's ELF NEEDED)."""
    assert base.version is not None
    facts = compat.facts(CupyFacts)
    i = newest_at_or_below(version, [start for start, _ in facts.rocm])
    packages = dict(facts.rocm[i][1]) if i is not None else {}
    minor = "{}.{}".format(*mm(base.version))
    package = packages.get(minor)
    if package is None:
        have = ", ".join(f"{p} (ROCm {m})" for m, p in sorted(packages.items())) or "none"
        return Verdict.no(f"{facts.rocm_note}; cupy {version} has {have}, nothing for base {base.name} (ROCm {base.version})")
    why = rocm.missing(((package, version),), base, compat.rocm)
    if why is not None:
        return Verdict.no(why)
    install = Install(
        "cupy", version, (f"{package}=={version}",), variant=package.removeprefix("cupy-"), numpy_min=row.numpy[0], numpy_max=row.numpy[1]
    )
    return Verdict(ok=True, install=install)


def cupy_major(project: str) -> str | None:
    found = re.fullmatch(r"cupy-cuda(\d+)x", project)
    return found.group(1) if found else None


@dataclass(frozen=True)
class Cupy(Framework):
    def load(self, t: Table, section: LDict) -> CupyFacts:
        return load(t, section)

    def decide(self, base: Base, python: str, version: str, compat: Compat) -> Verdict:
        return decide_cupy(base, python, version, compat)

    def projects(self, compat: Compat, newest_listed: str, cuda_majors: frozenset[str]) -> tuple[str, ...]:
        """The cupy-cudaNNx packages the table maps, from the row of the newest listed release on, for the matrix's CUDA majors."""
        rows = compat.facts(CupyFacts).releases
        first = newest_at_or_below(newest_listed, [r.release for r in rows]) or 0
        return tuple(sorted({p for row in rows[first:] for major, p in row.packages if major in cuda_majors}))

    def row(self, version: str, compat: Compat) -> Row | None:
        rows = compat.facts(CupyFacts).releases
        i = newest_at_or_below(version, [r.release for r in rows])
        return None if i is None else Row("cupy.releases", rows[i].release, rows[i].python)

    def row_starts(self, compat: Compat) -> tuple[str, ...]:
        return tuple(r.release for r in compat.facts(CupyFacts).releases)

    def row_hint(self, version: str) -> str:
        return f'a cupy.releases row for "{version}" (cuda, packages, python, numpy)'

    def built_for(self, metas: Sequence[Meta]) -> str | None:
        return ", ".join(sorted({m for meta in metas if (m := cupy_major(meta.project))}, key=int)) or None

    def stated(self, metas: Sequence[Meta]) -> str | None:
        return f"on the index as {', '.join(m.project for m in metas)}"

    def install_project(self, install: Install, metas: Sequence[Meta]) -> str:
        """The package its requirement names (cupy-cuda12x[ctk]==14.0.0 -> cupy-cuda12x), published or not."""
        return re.split(r"[\[=<>!~ ]", install.requirements[0], maxsplit=1)[0]

    def jit_refusal(self, device: Cc, nvrtc: Nvrtc, release: str, compat: Compat) -> str | None:
        """CuPy's own choice of target (cupy/cuda/compiler.py `_get_arch`,
        `_get_arch_for_options_for_nvrtc`; compat.yaml cupy `jit_max`): a cubin for the GPU's own
        architecture, capped at the newest one CuPy trusts its NVRTC version with; NVRTC must know that
        architecture, and a capped cubin runs only within its own major (sm_90 code never runs on 10.0)."""
        lower = below_lowest(device, nvrtc)
        if lower is not None:
            return lower
        rows = compat.facts(CupyFacts).releases
        i = newest_at_or_below(release, [r.release for r in rows]) if release else len(rows) - 1
        cap = jit_cap(rows[i], nvrtc.version) if i is not None else None
        if cap is None:
            return None  # not read for this release: the shared rule only
        target = min(device, cap)
        sm = f"sm_{target[0]}{target[1]}"
        if target not in nvrtc.ccs:
            return f"compiles its kernels for {sm} with NVRTC {nvrtc.version}, which does not know {sm} (it targets {nvrtc.span})"
        if target != device and (target[0] != device[0] or device[1] < target[1]):
            return (
                f"compiles its kernels with NVRTC {nvrtc.version} for {sm} at most (CuPy's cap for that NVRTC), "
                f"and {sm} code does not run on {device[0]}.{device[1]}"
            )
        return None


FRAMEWORK = Cupy("cupy", SECTION_KEYS, jit=True)
