"""The compatibility table (data/compat.yaml) as typed, guarded records.

The shared sections (interpreters per OS, CUDA drivers, NumPy wheels) are read here; each
framework's section is read by its own rule module (`rules/<name>.py`: `SECTION_KEYS`, `load`),
so a framework's facts and the decisions that use them live side by side.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from packaging.requirements import InvalidRequirement, Requirement

from builder import frameworks
from builder.compat.tables import DATA_DIR, PyRange, Table
from builder.yamlsrc import LDict

DEFAULT_PATH = DATA_DIR / "compat.yaml"
CUDA_KEYS = ("toolkits", "mvc_floor", "require_branches", "brands", "cudnn_cc", "wheel_constraints")
SHARED_SECTIONS = ("schema", "os_python", "os_glibc", "numpy", "cuda")
T = TypeVar("T")


@dataclass(frozen=True)
class OsPython:
    os: str
    python: str
    packages: tuple[str, ...]
    bin: str


@dataclass(frozen=True)
class Compat:
    os_python: tuple[OsPython, ...]
    os_glibc: tuple[tuple[str, str], ...]  # os -> glibc version
    cuda_toolkits: tuple[tuple[str, str], ...]  # (cuda patch, driver)
    mvc_floor: tuple[tuple[str, str], ...]  # (major, driver)
    require_branches: tuple[tuple[str, tuple[int, ...]], ...]
    brands: tuple[tuple[str, tuple[str, ...]], ...]  # (until cuda, brand names)
    numpy: tuple[tuple[str, PyRange], ...]
    cudnn_cc: tuple[tuple[str, str], ...]  # cuDNN release -> lowest compute capability it supports from then on
    wheel_constraints: tuple[tuple[str, tuple[str, ...]], ...]  # CUDA minor -> what keeps a lock's CUDA wheels on it
    frameworks: tuple[tuple[str, object], ...]  # framework -> the facts its rule module loaded

    def facts(self, kind: type[T]) -> T:
        """A framework's facts by their type, e.g. `compat.facts(TorchFacts)`."""
        for _, value in self.frameworks:
            if isinstance(value, kind):
                return value
        raise KeyError(f"no {kind.__name__} in the compatibility table")


def load_compat(path: Path = DEFAULT_PATH) -> Compat:
    from builder.compat.rules import rule_module  # the rule modules import Compat from here

    t = Table(path)
    doc = t.doc
    t.only(doc, (*SHARED_SECTIONS, *frameworks.NAMES), "the top level")
    loaded: list[tuple[str, object]] = []
    for name in frameworks.NAMES:
        module = rule_module(name)
        section = t.mapping(doc, name)
        t.only(section, module.SECTION_KEYS, f"section '{name}'")
        loaded.append((name, module.load(t, section)))
    cuda = t.mapping(doc, "cuda")
    t.only(cuda, CUDA_KEYS, "section 'cuda'")
    return Compat(
        os_python=_os_python(t, doc),
        os_glibc=tuple((str(r["os"]), str(r["glibc"])) for r in t.rows(t.section(doc, "os_glibc"), ("os", "glibc"), None, doc.line)),
        cuda_toolkits=tuple(
            (str(row["cuda"]), str(row["driver"])) for row in t.rows(t.section(cuda, "toolkits"), ("cuda", "driver"), "cuda", cuda.line)
        ),
        mvc_floor=tuple(
            (str(row["major"]), str(row["driver"])) for row in t.rows(t.section(cuda, "mvc_floor"), ("major", "driver"), "major", cuda.line)
        ),
        require_branches=tuple(
            (str(row["cuda"]), tuple(int(b) for b in row["branches"]))
            for row in t.rows(t.section(cuda, "require_branches"), ("cuda", "branches"), "cuda", cuda.line)
        ),
        brands=tuple(
            (str(row["until"]), t.strs(row["names"], row.line))
            for row in t.rows(t.section(cuda, "brands"), ("until", "names"), "until", cuda.line)
        ),
        numpy=tuple(
            (str(row["version"]), t.pyrange(row["python"], row.line))
            for row in t.rows(t.section(doc, "numpy"), ("version", "python"), "version", doc.line)
        ),
        wheel_constraints=tuple(
            (str(row["cuda"]), _constraints(t, row))
            for row in t.rows(t.section(cuda, "wheel_constraints"), ("cuda", "below", "constraints"), "cuda", cuda.line)
        ),
        cudnn_cc=tuple(
            (str(row["from"]), str(row["cc_min"])) for row in t.rows(t.section(cuda, "cudnn_cc"), ("from", "cc_min"), "from", cuda.line)
        ),
        frameworks=tuple(loaded),
    )


def _constraints(t: Table, row: LDict) -> tuple[str, ...]:
    lines = t.strs(row["constraints"], row.line)
    for line in lines:
        try:
            Requirement(line)
        except InvalidRequirement:
            raise t.fail(f"constraint {line!r} is not a requirement (e.g. nvidia-cuda-runtime<13.1.80)", row.line) from None
    return lines


def _os_python(t: Table, doc: LDict) -> tuple[OsPython, ...]:
    rows = t.rows(t.section(doc, "os_python"), ("os", "python", "packages", "bin"), None, doc.line)
    return tuple(OsPython(str(x["os"]), str(x["python"]), t.strs(x["packages"], x.line), str(x["bin"])) for x in rows)


@functools.cache
def table() -> Compat:
    """The shipped table, loaded once per process."""
    return load_compat()
