"""numba: Python range, the NumPy ceiling it enforces at import, numba-cuda on CUDA bases."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from builder.compat.facts import Compat
from builder.compat.tables import PyRange, Table
from builder.compat.versions import in_range, mm, span
from builder.records import Base, Install, Verdict
from builder.yamlsrc import LDict

SECTION_KEYS = ("releases", "numba_cuda")


@dataclass(frozen=True)
class NumbaRelease:
    version: str
    python: PyRange
    numpy: tuple[str, str]


@dataclass(frozen=True)
class NumbaCuda:
    version: str
    numba_min: str
    extras: tuple[tuple[str, str], ...]
    numpy_max: str


@dataclass(frozen=True)
class NumbaFacts:
    releases: tuple[NumbaRelease, ...]
    numba_cuda: NumbaCuda


def load(t: Table, section: LDict) -> NumbaFacts:
    releases = tuple(
        NumbaRelease(str(row["version"]), t.pyrange(row["python"], row.line), t.pyrange(row["numpy"], row.line))
        for row in t.rows(t.section(section, "releases"), ("version", "python", "numpy"), "version", section.line)
    )
    row = section.get("numba_cuda")
    if not isinstance(row, LDict):
        raise t.fail("numba.numba_cuda is missing", section.line)
    t.source(row)
    nc = NumbaCuda(
        str(row["version"]), str(row["numba_min"]), tuple(sorted((str(k), str(v)) for k, v in row["extras"].items())), str(row["numpy_max"])
    )
    return NumbaFacts(releases=releases, numba_cuda=nc)


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
    requirements: tuple[str, ...] = (f"numba=={version}",)
    numpy_max = rel.numpy[1]
    variant = "cpu"
    notes: tuple[str, ...] = ()
    if base.vendor == "cuda":
        assert base.version is not None
        nc = facts.numba_cuda
        major = str(mm(base.version)[0])
        extra = dict(nc.extras).get(major)
        if extra is None:
            return Verdict.no(
                f"numba-cuda {nc.version} supports CUDA {', '.join(k for k, _ in nc.extras)} only; base {base.name} is CUDA {major}"
            )
        if Version(version) < Version(nc.numba_min):
            return Verdict.no(f"numba-cuda {nc.version} needs numba >= {nc.numba_min}; this image pins numba {version}")
        requirements += (f"numba-cuda[{extra}]=={nc.version}",)
        if mm(nc.numpy_max) < mm(numpy_max):
            numpy_max = nc.numpy_max
            notes = (f"numpy <= {nc.numpy_max}: numba-cuda {nc.version} fails to import on NumPy 2.5 (np.row_stack)",)
        variant = extra
    install = Install("numba", version, requirements, variant=variant, numpy_min=rel.numpy[0], numpy_max=numpy_max, notes=notes)
    return Verdict(ok=True, install=install)


decide = decide_numba
