"""Small version helpers shared by the rules."""

from __future__ import annotations

from packaging.version import Version

MajorMinor = tuple[int, int]


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
