"""A release's own metadata and how to read its requirements (pure).

`Meta` is what the index states of one release (builder.updates reads it off the index); the rule
modules read it to say what CUDA a release was built for and where it contradicts their table, so
the record and the Requires-Dist parsing live here, below both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

_EXTRA = re.compile(r"""\bextra\s*==\s*['"]([^'"]+)['"]""")


@dataclass(frozen=True)
class Meta:
    """A release's metadata as the index's release document gives it."""

    project: str
    version: str
    requires_python: str | None
    requires_dist: tuple[str, ...]


def requirements(lines: Iterable[str]) -> list[Requirement]:
    """The Requires-Dist lines that parse; one odd line must not hide what the others say."""
    out = []
    for line in lines:
        try:
            out.append(Requirement(line))
        except InvalidRequirement:
            continue
    return out


def extras(req: Requirement) -> set[str]:
    """The extras a requirement's marker names (`extra == "cuda12"`), normalized."""
    return {re.sub(r"[-_.]+", "-", e).lower() for e in _EXTRA.findall(str(req.marker))} if req.marker else set()


def pinned(spec: SpecifierSet) -> str | None:
    """The one version a specifier admits when it pins one: ==X, or >=X,<=X."""
    exact = [s.version for s in spec if s.operator in ("==", "===") and "*" not in s.version]
    if exact:
        return exact[0]
    lows = {s.version for s in spec if s.operator == ">="}
    highs = {s.version for s in spec if s.operator == "<="}
    both = [v for v in lows if any(Version(v) == Version(h) for h in highs)]
    return both[0] if both else None
