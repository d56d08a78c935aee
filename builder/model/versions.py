"""Version parsing, in one place: framework releases, CUDA/ROCm versions, wheel variants, compute
capabilities and driver versions.

Strict parsing (PEP 440, via packaging) for what the tables and the matrix state; lenient parsing
(leading digits only) for what hosts and wheels report (`580.159.04`, `2.9.1+cu130`).
"""

from __future__ import annotations

import re

from packaging.version import Version

MajorMinor = tuple[int, int]
_LEADING_RELEASE = re.compile(r"^\d+(\.\d+)*")


def mm(version: str) -> MajorMinor:
    """(major, minor) of a version string; '12' -> (12, 0)."""
    parts = Version(version).release
    return parts[0], parts[1] if len(parts) > 1 else 0


def in_range(version: str, bounds: tuple[str, str]) -> bool:
    """Compare on major.minor: is 3.11 within [3.9, 3.12]?"""
    return mm(bounds[0]) <= mm(version) <= mm(bounds[1])


def span(bounds: tuple[str, str]) -> str:
    return f"{bounds[0]}-{bounds[1]}"


def release_of(version: str) -> str:
    """'2.5.1' -> '2.5'."""
    major, minor = mm(version)
    return f"{major}.{minor}"


def newest_at_or_below(version: str, starts: list[str]) -> int | None:
    """Index of the greatest start <= version (rows that apply 'from here on'), or None."""
    best = None
    for i, start in enumerate(starts):
        if Version(start) <= Version(version):
            best = i
    return best


def release_tuple(version: str) -> tuple[int, ...]:
    """Leading release numbers of a reported version (`2.9.1+cu130` -> (2, 9, 1),
    `>= 580.65.06` -> (580, 65, 6)); lenient, for lookups and comparisons of host facts."""
    match = _LEADING_RELEASE.match(version.strip().lstrip(">= "))
    if not match:
        return ()
    return tuple(int(part) for part in match.group(0).split("."))


def cc_tuple(cc: str) -> MajorMinor:
    """A compute capability: '9.0' -> (9, 0), '12' -> (12, 0)."""
    major, _, minor = cc.strip().partition(".")
    return int(major), int(minor or "0")


def variant_version(variant: str) -> MajorMinor:
    """The accelerator version of a wheel variant: cu124 -> (12, 4); cu130 -> (13, 0); rocm6.2.4 -> (6, 2)."""
    if variant.startswith("cu"):
        digits = variant[2:]
        return int(digits[:-1]), int(digits[-1])
    return mm(variant.removeprefix("rocm"))
