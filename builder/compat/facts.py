"""The compatibility table (data/compat.yaml) as typed, guarded records.

The shared sections (interpreters per OS, CUDA drivers, NumPy wheels) are read here; each
framework's section is read by its own implementation (`rules/<name>.py`: `section_keys`, `load`),
so a framework's facts and the decisions that use them live side by side. The frameworks are the
registry in force (builder.compat.rules.registry), so a framework registered for a while has its
section read too. Which frameworks those are is the caller's to say (`rules.table()` gives the
registry in force), so this module knows no framework module and none of them imports it back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from packaging.version import Version

from builder.compat.platforms import PlatformWheels, load_platforms
from builder.compat.rocm import RocmFacts, load_rocm
from builder.compat.tables import DATA_DIR, PyRange, Table
from builder.model.versions import release_line
from builder.util.yamlsrc import LDict

DEFAULT_PATH = DATA_DIR / "compat.yaml"
CUDA_KEYS = ("toolkits", "mvc_floor", "require_branches", "brands", "cudnn_cc", "toolkit_components")
SHARED_SECTIONS = ("schema", "os_python", "os_glibc", "numpy", "cuda", "platforms", "rocm")
T = TypeVar("T")


class Section(Protocol):
    """What the loader needs of a framework: its section's name and keys, where it lives, how it is read."""

    @property
    def name(self) -> str: ...
    @property
    def facts_file(self) -> Path | None: ...
    @property
    def section_keys(self) -> tuple[str, ...]: ...
    def load(self, t: Table, section: LDict) -> object: ...


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
    cuda_cudart: tuple[tuple[str, str], ...]  # (cuda patch, the cudart version it ships), where known
    mvc_floor: tuple[tuple[str, str], ...]  # (major, driver)
    require_branches: tuple[tuple[str, tuple[int, ...]], ...]
    brands: tuple[tuple[str, tuple[str, ...]], ...]  # (until cuda, brand names)
    numpy: tuple[tuple[str, PyRange], ...]
    cudnn_cc: tuple[tuple[str, str], ...]  # cuDNN release -> lowest compute capability it supports from then on
    toolkit_components: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]  # CUDA minor -> (component, version at X.Y.0)
    frameworks: tuple[tuple[str, object], ...]  # framework -> the facts its rule module loaded
    platform_wheels: tuple[PlatformWheels, ...] = ()  # which releases publish wheels for a platform besides linux/amd64
    rocm: RocmFacts = RocmFacts()  # ROCm releases' GPUs, the user space of ROCm bases, ROCm wheels' NEEDED (compat/rocm.py)

    def facts(self, kind: type[T]) -> T:
        """A framework's facts by their type, e.g. `compat.facts(TorchFacts)`."""
        for _, value in self.frameworks:
            if isinstance(value, kind):
                return value
        raise KeyError(f"no {kind.__name__} in the compatibility table")


def load_compat(path: Path, frameworks: Sequence[Section]) -> Compat:
    """The table at `path`, with a section for each framework; a framework with its own
    `facts_file` has its section read from there instead."""
    t = Table(path)
    doc = t.doc
    t.only(doc, (*SHARED_SECTIONS, *(f.name for f in frameworks if f.facts_file is None)), "the top level")
    loaded: list[tuple[str, object]] = []
    for fw in frameworks:
        source = t if fw.facts_file is None else Table(fw.facts_file)
        if source is not t:
            source.only(source.doc, ("schema", fw.name), "the top level")
        section = source.mapping(source.doc, fw.name)
        source.only(section, fw.section_keys, f"section '{fw.name}'")
        loaded.append((fw.name, fw.load(source, section)))
    cuda = t.mapping(doc, "cuda")
    t.only(cuda, CUDA_KEYS, "section 'cuda'")
    toolkits = t.rows(t.section(cuda, "toolkits"), ("cuda", "driver"), "cuda", cuda.line, optional=("cudart",))
    return Compat(
        os_python=_os_python(t, doc),
        os_glibc=tuple((str(r["os"]), str(r["glibc"])) for r in t.rows(t.section(doc, "os_glibc"), ("os", "glibc"), None, doc.line)),
        cuda_toolkits=tuple((str(row["cuda"]), str(row["driver"])) for row in toolkits),
        cuda_cudart=_cudart(t, toolkits),
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
        toolkit_components=tuple(
            (str(row["cuda"]), _components(t, row))
            for row in t.rows(t.section(cuda, "toolkit_components"), ("cuda", "components"), "cuda", cuda.line)
        ),
        cudnn_cc=tuple(
            (str(row["from"]), str(row["cc_min"])) for row in t.rows(t.section(cuda, "cudnn_cc"), ("from", "cc_min"), "from", cuda.line)
        ),
        frameworks=tuple(loaded),
        platform_wheels=load_platforms(t, doc),
        rocm=load_rocm(t, doc),
    )


def _cudart(t: Table, rows: list[LDict]) -> tuple[tuple[str, str], ...]:
    """(release, cudart) of the rows that state it: the cudart of release X.Y.Z is an X.Y version, and no
    two rows state the same one (a lock's runtime wheel must name one release)."""
    out: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    for row in rows:
        if "cudart" not in row:
            continue
        release, cudart = str(row["cuda"]), str(row["cudart"])
        if t.version(cudart, row.line).release[:2] != t.version(release, row.line).release[:2]:
            raise t.fail(f"cudart {cudart} of CUDA {release} is not a {release_line(release)} version", row.line_of("cudart"))
        if cudart in seen:
            raise t.fail(
                f"cudart {cudart} is stated for CUDA {seen[cudart]} and {release}: keep it on the first release", row.line_of("cudart")
            )
        seen[cudart] = release
        out.append((release, cudart))
    return tuple(out)


def _components(t: Table, row: LDict) -> tuple[tuple[str, str], ...]:
    """component -> version: a name that makes a wheel name, a version that parses."""
    components = row["components"]
    if not isinstance(components, dict) or not components:
        raise t.fail('components must be a mapping of component -> version (e.g. {cublas: "12.4.2.65"})', row.line)
    out = []
    for name, version in components.items():
        if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9-]*[a-z0-9]", name) or not isinstance(version, str):
            raise t.fail(f"component {name!r}: {version!r} must be a lower-case name and a quoted version", row.line)
        try:
            Version(version)
        except ValueError:  # InvalidVersion, or int()'s refusal of a number over 4,300 digits
            raise t.fail(f"component {name}: version {version!r} does not parse", row.line) from None
        out.append((name, version))
    return tuple(sorted(out))


def _os_python(t: Table, doc: LDict) -> tuple[OsPython, ...]:
    rows = t.rows(t.section(doc, "os_python"), ("os", "python", "packages", "bin"), None, doc.line)
    return tuple(OsPython(str(x["os"]), str(x["python"]), t.strs(x["packages"], x.line), str(x["bin"])) for x in rows)
