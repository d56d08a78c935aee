"""Compatibility decisions: data in (base, python, version, table), a verdict with a reason out.

A framework is the unit of extension: one module per framework (named as in builder.frameworks)
defines `FRAMEWORK`, its implementation of `Framework`: its compat.yaml section (keys, loader) and
decision, the index projects its releases come from and what their metadata says of their build,
where a new release falls in its table and where its metadata contradicts the table, and what its
probe report says of a built image. Nothing outside a framework's own module branches on its
name (tests/test_registry.py checks); the shared rules are python (interpreters), cuda (drivers)
and numpy (the pin).

They live here, in the pure compat stage, because everything a framework knows is a fact of its
compat section or read against it; every later stage (spec, updates, smoke, publish, host) may
import compat, so each reads a framework only through `framework(name)`.

The registry in force is the shipped frameworks (builder.frameworks.REGISTRY) plus any a caller
adds for a while with `registered` (the toy framework of tests/test_registry.py).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from builder import frameworks
from builder.compat.facts import DEFAULT_PATH, Compat, load_compat
from builder.compat.requires import Meta
from builder.compat.tables import PyRange, Table
from builder.model.plan import Base, Install, Verdict
from builder.util.yamlsrc import LDict

COMPAT_FILE = "builder/compat/data/compat.yaml"  # as messages name it: where a row is added


@dataclass(frozen=True)
class Row:
    """The row of a framework's compat section that decides a release."""

    section: str  # "torch.releases", "jax.bands"
    key: str  # "2.14", "from 0.11.0"
    python: PyRange

    @property
    def label(self) -> str:
        return f"{self.section} {self.key}"


@dataclass(frozen=True)
class Built:
    """What a framework's probe report says its build carries, beyond the libraries the probe loads itself."""

    cudnn: str | None = None
    rocm: str | None = None


Placed = tuple[Base, str, Install]  # a base and Python the rules accept a release on, with its install
Cc = tuple[int, int]  # a compute capability, (major, minor)


@dataclass(frozen=True)
class Nvrtc:
    """The NVRTC a framework compiles its kernels with at run time: nvrtcVersion and
    nvrtcGetSupportedArchs (75 for sm_75), as measured from the library."""

    version: str  # 13.0
    archs: tuple[int, ...]

    @property
    def ccs(self) -> tuple[Cc, ...]:
        return tuple(sorted((a // 10, a % 10) for a in self.archs))

    @property
    def span(self) -> str:
        ccs = self.ccs
        return f"{ccs[0][0]}.{ccs[0][1]}-{ccs[-1][0]}.{ccs[-1][1]}" if ccs else "nothing"


def below_lowest(device: Cc, nvrtc: Nvrtc) -> str | None:
    """The rule every framework that compiles at run time obeys: NVRTC cannot target a GPU older
    than its lowest architecture (a newer one gets the newest target, as PTX the driver compiles).
    Why it cannot, as a clause after the framework's name (`compiles its kernels with NVRTC 13.0,
    which targets 7.5 and newer`); None when it can."""
    ccs = nvrtc.ccs
    if not ccs or device < ccs[0]:
        lowest = f"{ccs[0][0]}.{ccs[0][1]} and newer" if ccs else "nothing"
        return f"compiles its kernels with NVRTC {nvrtc.version}, which targets {lowest}"
    return None


@dataclass(frozen=True)
class Framework(ABC):
    """One framework, everything the stages need to know of it. An abstract frozen dataclass rather
    than a Protocol: the members without a neutral answer are abstract, so an implementation that
    forgets one fails when it is made (the registry test makes each), and the others share their
    default, "nothing to add" (no CUDA stated, no contradiction, no build report to read)."""

    name: str  # matrix.yaml's key, compat.yaml's section, templates/frameworks/<name>.j2
    section_keys: tuple[str, ...]  # the keys its compat section may have
    gpu_arch: bool = False  # gpu_arch.yaml lists the compute capabilities its CUDA wheels ship kernels for
    companion: str | None = None  # an index project a release needs published before it is placed (jax: jaxlib)
    local_variant: bool = False  # its wheel variant is a PEP 440 local version: torch 2.5.1+cu124
    facts_file: Path | None = None  # its section's file when not compat.yaml (a framework defined outside builder/)
    jit: bool = False  # it compiles its kernels at run time (NVRTC/NVVM): its measured fit needs the compiler to know the GPU

    @property
    def facts_at(self) -> str:
        """Its facts' file, as messages name it: where a row is added."""
        return COMPAT_FILE if self.facts_file is None else str(self.facts_file)

    # --- the compat table -----------------------------------------------------------------------

    @abstractmethod
    def load(self, t: Table, section: LDict) -> object:
        """Its facts, read from its section of the table (each complaint names the line)."""

    @abstractmethod
    def decide(self, base: Base, python: str, version: str, compat: Compat) -> Verdict:
        """Whether this release works on this base and Python, and how to install it."""

    # --- new releases (builder updates) ---------------------------------------------------------

    def projects(self, compat: Compat, newest_listed: str, cuda_majors: frozenset[str]) -> tuple[str, ...]:
        """The index projects its releases are published under, for a matrix with these CUDA majors."""
        return (self.name,)

    @abstractmethod
    def row(self, version: str, compat: Compat) -> Row | None:
        """The row of its table that decides this release, if any."""

    @abstractmethod
    def row_starts(self, compat: Compat) -> Sequence[str]:
        """The release each row of its table starts at (a row decides that release and, by the row's rule, those after it)."""

    def newest_row(self, compat: Compat) -> str:
        """The newest release its table has a row for; a newer series must get its own row."""
        return max(self.row_starts(compat), key=Version)

    @abstractmethod
    def row_hint(self, version: str) -> str:
        """The row to add for this release, its keys named: 'a torch.releases row for "2.15" (python, ...)'."""

    def built_for(self, metas: Sequence[Meta]) -> str | None:
        """The CUDA a release's metadata says it was built for: cu130, 12.5, "12, 13"; None when it states none."""
        return None

    def stated(self, metas: Sequence[Meta]) -> str | None:
        """What its metadata states of its build, for a row hint ("its PyPI wheel is cu130")."""
        return None

    def companion_version(self, version: str, meta: Meta) -> str:
        """The companion's version this release needs (with `companion` set)."""
        return version

    def install_project(self, install: Install, metas: Sequence[Meta]) -> str:
        """The index project an accepted install comes from."""
        return metas[0].project

    def contradictions(self, version: str, meta: Meta, ok: Sequence[Placed], row: Row, compat: Compat) -> list[str]:
        """Where its metadata says otherwise about its build than the row that accepts it (the
        Python and NumPy a release states are checked for every framework alike)."""
        return []

    # --- built images (smoke checks, publisher) -----------------------------------------------

    def build_mismatches(self, variant: str, build: Mapping[str, object]) -> list[str]:
        """Where its probe report's `build` contradicts the planned wheel variant."""
        return []

    def built(self, build: Mapping[str, object]) -> Built:
        """The cuDNN and ROCm its probe report's `build` names."""
        return Built()

    # --- run-time compilation (its measured fit) ------------------------------------------------

    def jit_refusal(self, device: Cc, nvrtc: Nvrtc, release: str, compat: Compat) -> str | None:
        """Why the kernels this release compiles at run time with this NVRTC cannot run on `device`,
        as a clause after its name (`below_lowest`); None when they can. The shared rule (`below_lowest`) unless its own code
        asks NVRTC for something else (numba-cuda's arch-specific targets, CuPy's capped cubins)."""
        return below_lowest(device, nvrtc)

    def jit_unknown(self, pins: Mapping[str, str]) -> str | None:
        """What its locked wheels (`pins`: project -> version) cannot tell about how it compiles at
        run time, so its fit is not measured from them; None when they tell."""
        return None


_registered: tuple[Framework, ...] = ()


@functools.cache
def shipped() -> tuple[Framework, ...]:
    """The registry's frameworks, each its module's FRAMEWORK."""
    out = []
    for entry in frameworks.REGISTRY:
        found = getattr(importlib.import_module(entry.module), "FRAMEWORK", None)
        if not isinstance(found, Framework) or found.name != entry.name:
            raise TypeError(f"{entry.module}: define FRAMEWORK, the Framework named {entry.name!r}")
        out.append(found)
    return tuple(out)


def registry() -> tuple[Framework, ...]:
    """The frameworks in force, in registry order."""
    return (*shipped(), *_registered)


def names() -> tuple[str, ...]:
    return tuple(f.name for f in registry())


def framework(name: str) -> Framework:
    """A framework of the registry in force; KeyError for a name it lacks (names come validated from matrix.yaml)."""
    found = next((f for f in registry() if f.name == name), None)
    if found is None:
        raise KeyError(f"{name!r} is not a registered framework (known: {', '.join(names())})")
    return found


@contextlib.contextmanager
def registered(*extra: Framework) -> Iterator[None]:
    """The registry with these frameworks added, for the `with` block: how a framework defined outside
    builder/ (a test's toy one) goes through plan, render and updates. Not for concurrent use."""
    global _registered
    taken = set(names())
    for fw in extra:
        if fw.name in taken:
            raise ValueError(f"a framework named {fw.name!r} is registered already")
        taken.add(fw.name)
    before = _registered
    _registered = (*before, *extra)
    try:
        yield
    finally:
        _registered = before


def load_table(path: Path = DEFAULT_PATH) -> Compat:
    """The compatibility table at `path`, with a section for each framework in force."""
    return load_compat(path, registry())


def table() -> Compat:
    """The shipped table for the registry in force, loaded once per process and registry."""
    return _table(registry())


@functools.cache
def _table(frameworks: tuple[Framework, ...]) -> Compat:
    return load_compat(DEFAULT_PATH, frameworks)


def decide(name: str, base: Base, python: str, version: str, compat: Compat) -> Verdict:
    return framework(name).decide(base, python, version, compat)
