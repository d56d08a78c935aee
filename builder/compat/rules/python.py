"""Which interpreter a base OS provides for a requested Python."""

from __future__ import annotations

from builder.compat.facts import Compat, OsPython
from builder.model.plan import Base


def decide_python(base: Base, python: str, compat: Compat) -> OsPython | str:
    """The OS packages that provide `python` on this base, or the reason it cannot."""
    offered = [row for row in compat.os_python if row.os == base.os]
    for row in offered:
        if row.python == python:
            return row
    if not offered:
        return f"os {base.os} is not in the interpreter table (builder/compat/data/compat.yaml os_python); add it"
    have = ", ".join(row.python for row in offered)
    return f"{base.os} packages Python {have}, not {python}"
