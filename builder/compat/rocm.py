"""AMD ROCm facts and the shared ROCm rules (pure): compat.yaml `rocm`.

- `releases`: the GPUs (LLVM gfx targets) AMD supports on each ROCm release, the oldest Linux
  kernel of the OSes it lists and the kernel-mode driver releases (`kmd`) AMD tests it with; what a
  JIT compiler (CuPy's hiprtc) of that release targets, the "supported by ROCm X" note of a fit and
  the kernel-driver check (fit/amd_driver.py).
- `amdgpu_modules` (optional): which KMD release a /sys/module/amdgpu/version text is.
- `sonames` / `os_sonames`: the user space a ROCm base brings, per kind of base (`image`: AMD's
  rocm/dev-* images, made from its apt packages; `debian`: Debian's own ROCm packages), and what
  every Linux base has.
- `generic`: which processors a generic code object (gfx11-generic) runs on.
- `wheels`: per framework ROCm wheel, the ROCm it is built for and the sonames it loads from
  outside the wheel (its ELF NEEDED entries, read from the wheel). `missing` is the check a
  framework's rule makes before planning a wheel on a base: every soname it loads must be the
  base's, or the combination is skipped naming what is missing and where it comes from.

A framework's rule names its own projects (cupy-rocm-7-0, jax-rocm7-pjrt); this module knows none.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.version import Version

from builder.compat.tables import Table
from builder.model.plan import Base
from builder.model.versions import mm
from builder.util.yamlsrc import LDict

SECTION = "rocm"
KEYS = ("releases", "sonames", "os_sonames", "generic", "wheels", "amdgpu_modules")
KINDS = ("image", "debian")
GFX = re.compile(r"^gfx[0-9]{1,2}[0-9a-f]{2}$")  # gfx90a, gfx1100, gfx942
GENERIC = re.compile(r"^gfx[0-9]{1,2}(-[0-9])?-generic$")  # gfx11-generic, gfx9-4-generic
SONAME = re.compile(r"^lib[A-Za-z0-9_+.-]+\.so(\.[0-9]+)*$|^ld-linux[a-z0-9_-]*\.so\.[0-9]+$")


@dataclass(frozen=True)
class RocmRelease:
    rocm: str  # 7.0
    gfx: tuple[str, ...]  # the GPUs AMD supports on it
    kernel: str  # the oldest Linux kernel of the OSes it is supported on
    kmd: tuple[str, ...] = ()  # the kernel-mode driver releases AMD tests it with ("6.2", "30.30"); (): not in the table


@dataclass(frozen=True)
class Sonames:
    rocm: str  # "7" (a major) or "5.7" (a minor)
    kind: str  # image | debian
    provides: tuple[str, ...]


@dataclass(frozen=True)
class RocmWheel:
    project: str
    start: str  # from this release until the next row of the same project
    rocm: str  # "7.0" a minor, "7" a major
    needs: tuple[str, ...]  # sonames loaded from outside the wheel (ELF NEEDED, less the OS's)


@dataclass(frozen=True)
class RocmFacts:
    releases: tuple[RocmRelease, ...] = ()
    sonames: tuple[Sonames, ...] = ()
    os_sonames: tuple[str, ...] = ()
    generic: tuple[tuple[str, tuple[str, ...]], ...] = ()  # generic target -> the processors it runs on
    wheels: tuple[RocmWheel, ...] = ()
    amdgpu_modules: tuple[tuple[str, str], ...] = ()  # /sys/module/amdgpu/version text -> the KMD release it is

    def kmd_of(self, module: str) -> str | None:
        """The KMD release an amdgpu module version names; None when no row says."""
        return dict(self.amdgpu_modules).get(module.strip())

    def release(self, version: str) -> RocmRelease | None:
        """The row of a ROCm version's minor (7.0.2 -> 7.0)."""
        return next((r for r in self.releases if mm(r.rocm) == mm(version)), None)

    def runs_on(self, generic: str) -> tuple[str, ...]:
        return dict(self.generic).get(generic, ())

    def wheel(self, project: str, version: str) -> RocmWheel | None:
        """The row covering this release of a ROCm wheel project; None when none does."""
        rows = [w for w in self.wheels if w.project == project and Version(w.start) <= Version(version)]
        return max(rows, key=lambda w: Version(w.start)) if rows else None


def _matches(rocm: str, base_version: str) -> bool:
    """`7` matches any 7.x base, `7.0` only 7.0.x."""
    have = mm(base_version)
    return have[0] == int(rocm) if "." not in rocm else have == mm(rocm)


def load_rocm(t: Table, doc: LDict) -> RocmFacts:
    """The `rocm` section; absent means no ROCm facts (a framework table of tests)."""
    if SECTION not in doc:
        return RocmFacts()
    section = t.mapping(doc, SECTION)
    t.only(section, KEYS, f"section '{SECTION}'")
    releases = []
    for row in t.rows(t.section(section, "releases"), ("rocm", "gfx", "kernel"), "rocm", section.line, optional=("kmd",)):
        releases.append(
            RocmRelease(
                str(row["rocm"]),
                _names(t, row["gfx"], GFX, "gfx target", row.line),
                str(t.version(row["kernel"], row.line)),
                _kmd(t, row.get("kmd", []), row.line),
            )
        )
    sonames = []
    for row in t.rows(t.section(section, "sonames"), ("rocm", "kind", "provides"), None, section.line):
        if row["kind"] not in KINDS:
            raise t.fail(f"sonames kind {row['kind']!r} must be one of {', '.join(KINDS)}", row.line)
        sonames.append(Sonames(_rocm(t, row["rocm"], row.line), str(row["kind"]), _names(t, row["provides"], SONAME, "soname", row.line)))
    generic = []
    for row in t.rows(t.section(section, "generic"), ("target", "runs_on"), None, section.line):
        target = str(row["target"])
        if not GENERIC.fullmatch(target):
            raise t.fail(f"generic target {target!r} is not named like gfx11-generic", row.line)
        generic.append((target, _names(t, row["runs_on"], GFX, "gfx target", row.line)))
    wheels = []
    for row in t.rows(t.section(section, "wheels"), ("project", "from", "rocm", "needs"), None, section.line):
        wheels.append(
            RocmWheel(
                str(row["project"]),
                str(t.version(row["from"], row.line)),
                _rocm(t, row["rocm"], row.line),
                _names(t, row["needs"], SONAME, "soname", row.line),
            )
        )
    keys = [(w.project, Version(w.start)) for w in wheels]
    if keys != sorted(keys) or len(set(keys)) != len(keys):
        raise t.fail("rocm.wheels rows must be sorted by project, then `from`, each listed once", section.line_of("wheels"))
    modules = []
    if "amdgpu_modules" in section:
        for row in t.rows(section["amdgpu_modules"], ("module", "kmd"), None, section.line_of("amdgpu_modules")):
            modules.append((str(row["module"]), _kmd(t, [row["kmd"]], row.line)[0]))
        if len({m for m, _ in modules}) != len(modules):
            raise t.fail("rocm.amdgpu_modules lists a module version twice", section.line_of("amdgpu_modules"))
    return RocmFacts(
        amdgpu_modules=tuple(modules),
        releases=tuple(releases),
        sonames=tuple(sonames),
        os_sonames=_names(t, t.section(section, "os_sonames"), SONAME, "soname", section.line_of("os_sonames")),
        generic=tuple(generic),
        wheels=tuple(wheels),
    )


def _kmd(t: Table, value: object, line: int) -> tuple[str, ...]:
    """KMD release names as AMD's matrix gives them: "6.2", "30.30" (quoted), each once, ascending."""
    names = t.strs(value, line)
    if not all(re.fullmatch(r"\d{1,2}\.\d{1,2}", n) for n in names):
        raise t.fail(f'kmd {list(names)!r} must list driver releases as major.minor strings ("6.2", "30.30")', line)
    if list(names) != sorted(set(names), key=mm):
        raise t.fail("the kmd releases of a row must be sorted and listed once", line)
    return names


def _rocm(t: Table, value: object, line: int) -> str:
    text = str(value)
    if not re.fullmatch(r"\d+(\.\d+)?", text):
        raise t.fail(f'ROCm {text!r} must be a major ("7") or a minor ("7.0"), quoted', line)
    return text


def _names(t: Table, value: object, pattern: re.Pattern[str], what: str, line: int) -> tuple[str, ...]:
    names = t.strs(value, line)
    bad = next((n for n in names if not pattern.fullmatch(n)), None)
    if bad is not None or not names:
        raise t.fail(f"{bad!r} is not a {what}" if bad else f"expected a non-empty list of {what}s", line)
    if list(names) != sorted(set(names), key=gfx_key if pattern is GFX else str):
        raise t.fail(f"the {what}s of a row must be sorted and listed once", line)
    return names


def gfx_key(name: str) -> tuple[int, str]:
    """gfx906 < gfx908 < gfx90a < gfx942 < gfx1030 < gfx1100: by generation, then name."""
    return len(name), name


def base_kind(base: Base) -> str:
    """`debian` for a base bootstrapped from Debian's mirror (its ROCm is Debian's packages), else `image`."""
    return "debian" if base.bootstrap is not None else "image"


def provided(base: Base, facts: RocmFacts) -> tuple[str, ...] | None:
    """The sonames a ROCm base brings (its ROCm's row for its kind of base); None when the table has no row."""
    if base.vendor != "rocm" or base.version is None:
        return None
    kind = base_kind(base)
    rows = [s for s in facts.sonames if s.kind == kind and _matches(s.rocm, base.version)]
    return rows[0].provides if rows else None


def missing(projects: Sequence[tuple[str, str]], base: Base, facts: RocmFacts) -> str | None:
    """Why these ROCm wheels (project, release) cannot be planned on `base`: a release no row covers,
    another ROCm than the base's, or a soname one of them loads (its ELF NEEDED) that neither the base
    nor the OS provides. None when every soname is there."""
    assert base.version is not None
    have = provided(base, facts)
    where = f"{base_kind(base)} base {base.name} (ROCm {base.version})"
    for project, version in projects:
        row = facts.wheel(project, version)
        if row is None:
            return (
                f"{project} {version} is not in compat.yaml rocm.wheels (what it loads is unknown); read its NEEDED entries and add a row"
            )
        if not _matches(row.rocm, base.version):
            return f"{project} {version} is built for ROCm {row.rocm}; base {base.name} is ROCm {base.version}"
        if have is None:
            return f"compat.yaml rocm.sonames has no row for the {where}: what it provides is unknown"
        absent = [n for n in row.needs if n not in have and n not in facts.os_sonames]
        if absent:
            sysdeps = [n for n in absent if n.startswith("librocm_sysdeps_")]
            hint = (
                ": the librocm_sysdeps_* libraries come from AMD's ROCm Python wheels (TheRock builds), which AMD's ROCm packages "
                "and rocm/dev-* images do not ship; use a release built against the packages, or a base made from those wheels"
                if sysdeps
                else ""
            )
            return f"{project} {version} loads {', '.join(absent)} (its ELF NEEDED), which the {where} does not provide{hint}"
    return None
