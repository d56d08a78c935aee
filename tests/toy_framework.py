"""A toy sixth framework, defined only here, through builder.compat.rules.Framework alone.

It is what a new framework needs and nothing more: its compat section (in its own facts file, since
builder/compat/data/compat.yaml does not know it), its decision, and its rows for new releases.
Every other member of the protocol keeps its default. tests/test_registry.py registers it for a
test (builder.compat.rules.registered) beside a templates/frameworks/toy.j2 of its own, and runs it
through plan, render, `builder updates` and the report: anything it needs from builder/ beyond
this file would be a place the registry does not cover.

Its facts: `toy` (PyPI project `toy`) has a pure-Python CPU build and a `cudaNN` extra per CUDA
major it supports; each row of `toy.releases` applies from its release on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from builder.compat.facts import Compat
from builder.compat.requires import Meta, extras, requirements
from builder.compat.rules import Framework, Row
from builder.compat.tables import PyRange, Table
from builder.model.plan import Base, Install, Verdict
from builder.model.versions import in_range, mm, newest_at_or_below, span
from builder.util.yamlsrc import LDict

NAME = "toy"
FACTS = """\
schema: 1
toy:
  releases:
    - {release: "1.0", python: ["3.10", "3.12"], cuda: ["12"], source: PYPI}
    - {release: "1.5", python: ["3.11", "3.12"], cuda: ["12", "13"], source: PYPI}
"""
PARTIAL = "# toy: its cache goes to the writable /tmp\nENV TOY_CACHE=/tmp/toy\n"


@dataclass(frozen=True)
class ToyRelease:
    release: str
    python: PyRange
    cuda: tuple[str, ...]  # CUDA majors with a cudaNN extra


@dataclass(frozen=True)
class ToyFacts:
    releases: tuple[ToyRelease, ...]


@dataclass(frozen=True)
class Toy(Framework):
    def load(self, t: Table, section: LDict) -> ToyFacts:
        rows = t.rows(t.section(section, "releases"), ("release", "python", "cuda"), "release", section.line)
        return ToyFacts(tuple(ToyRelease(str(r["release"]), t.pyrange(r["python"], r.line), t.strs(r["cuda"], r.line)) for r in rows))

    def _release(self, version: str, compat: Compat) -> ToyRelease | None:
        rows = compat.facts(ToyFacts).releases
        i = newest_at_or_below(version, [r.release for r in rows])
        return None if i is None else rows[i]

    def decide(self, base: Base, python: str, version: str, compat: Compat) -> Verdict:
        row = self._release(version, compat)
        if row is None:
            return Verdict.no(f"toy {version} predates the table; add its row")
        if not in_range(python, row.python):
            return Verdict.no(f"toy {version} supports Python {span(row.python)}; this image has Python {python}")
        if base.vendor == "rocm":
            return Verdict.no("toy has no ROCm build; use a CUDA or cpu base")
        if base.vendor == "cpu":
            return Verdict(ok=True, install=Install(NAME, version, (f"toy=={version}",), variant="cpu"))
        assert base.version is not None
        major = str(mm(base.version)[0])
        if major not in row.cuda:
            return Verdict.no(f"toy {version} has cuda extras for CUDA {', '.join(row.cuda)}; base {base.name} is CUDA {major}")
        install = Install(NAME, version, (f"toy[cuda{major}]=={version}",), variant=f"cuda{major}", built_cuda=major)
        return Verdict(ok=True, install=install)

    def row(self, version: str, compat: Compat) -> Row | None:
        found = self._release(version, compat)
        return None if found is None else Row("toy.releases", found.release, found.python)

    def row_starts(self, compat: Compat) -> tuple[str, ...]:
        return tuple(r.release for r in compat.facts(ToyFacts).releases)

    def row_hint(self, version: str) -> str:
        return f'a toy.releases row for "{version}" (python, cuda)'

    def built_for(self, metas: Sequence[Meta]) -> str | None:
        """Its cudaNN extras, as its metadata lists them."""
        found = {e.removeprefix("cuda") for r in requirements(metas[0].requires_dist) for e in extras(r) if e.startswith("cuda")}
        return ", ".join(sorted(found, key=int)) or None


def toy(facts_file: Path) -> Toy:
    facts_file.write_text(FACTS, encoding="utf-8")
    return Toy(NAME, ("releases",), facts_file=facts_file)
