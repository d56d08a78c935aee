"""Which interpreter a base OS provides for a requested Python."""

from __future__ import annotations

from builder.compat.facts import Compat, OsPython
from builder.model.plan import Base

# Why a Python the OS lacks is a skip, not a build: images take the base OS's interpreter, and no CPython
# build is fetched (none is reachable from the machines this project runs on). docs/matrix.md says how a
# team with its own Python (a base image that brings it) adds one.
OS_ONLY = " (Python comes from the base's OS here; another Python needs a base that brings it: docs/matrix.md, Python beyond the OS)"


def decide_python(base: Base, python: str, compat: Compat) -> OsPython | str:
    """The OS packages that provide `python` on this base, or the reason it cannot (saying where Python comes from)."""
    offered = [row for row in compat.os_python if row.os == base.os]
    for row in offered:
        if row.python == python:
            return row
    if not offered:
        return f"os {base.os} is not in the interpreter table (builder/compat/data/compat.yaml os_python); add it"
    have = ", ".join(row.python for row in offered)
    return f"{base.os} packages Python {have}, not {python}{OS_ONLY}"
