"""Version parsing, in one place: framework releases, CUDA/ROCm versions, wheel variants, compute
capabilities and driver versions. Nothing outside this module splits a version on its dots
(tests/test_boundaries.py guards that).

Strict parsing (PEP 440, via packaging) for what the tables and the matrix state; lenient parsing
(leading digits only) for what hosts and wheels report (`580.159.04`, `2.9.1+cu130`). Digits are
ASCII only: `\\d` and `int()` also take other scripts' digits (Arabic-Indic, fullwidth), which no
version spells.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

from packaging.version import Version

MajorMinor = tuple[int, int]
_LEADING_RELEASE = re.compile(r"^[0-9]+(\.[0-9]+)*")
_VARIANT = re.compile(r"(?P<kind>cu|rocm)(?P<digits>[0-9]+(?:\.[0-9]+)*)|cpu")
_FRAMEWORK_LINE = re.compile(r"(?P<line>[0-9]+\.[0-9]+)(?:\.[0-9a-z.]+)?")
_CC = re.compile(r"(?:sm_|compute_)?(?:(?P<major>[0-9]+)\.(?P<minor>[0-9]+)|(?P<digits>[0-9]+))(?P<suffix>[af]?)")


@dataclass(frozen=True, order=True)
class Release:
    """A release version as its numbers: a framework's `2.14.1+cu130` -> (2, 14, 1), CUDA's `13.0`,
    Python's `3.11.9`, glibc's `2.36`, a driver's `580.65.06`. Compared as numbers, never as text."""

    numbers: tuple[int, ...]

    @staticmethod
    def parse(text: str) -> Release:
        """Its leading release numbers (lenient: `2.9.1+cu130`, `>= 580.65.06`, `2.15rc1`), or a
        ValueError when it starts with none."""
        numbers = release_tuple(text)
        if not numbers:
            raise ValueError(f"not a release version: {text[:80]!r} (expected numbers like 2.14.1)")
        return Release(numbers)

    @property
    def major(self) -> int:
        return self.numbers[0]

    @property
    def major_minor(self) -> MajorMinor:
        """(major, minor); a bare major has minor 0 ('12' -> (12, 0))."""
        return self.numbers[0], self.numbers[1] if len(self.numbers) > 1 else 0

    @property
    def line(self) -> str:
        """The release line, major.minor: '2.14.1' -> '2.14'."""
        return "{}.{}".format(*self.major_minor)

    def __str__(self) -> str:
        return ".".join(map(str, self.numbers))


@dataclass(frozen=True, order=True)
class WheelVariant:
    """What a wheel is built for, as its local version or index names it: cu130, rocm7.0, cpu."""

    kind: Literal["cu", "rocm", "cpu"]
    numbers: tuple[int, ...] = ()  # cu130 -> (13, 0); rocm6.2.4 -> (6, 2, 4); cpu -> ()

    @staticmethod
    def parse(text: str) -> WheelVariant:
        match = _VARIANT.fullmatch(text)
        if match is None:
            raise ValueError(f"not a wheel variant: {text[:80]!r} (expected e.g. cu130, rocm7.0, cpu)")
        if match["kind"] is None:
            return WheelVariant("cpu")
        digits = match["digits"]
        if match["kind"] == "cu":
            if "." in digits or len(digits) < 2:
                raise ValueError(f"not a CUDA wheel variant: {text[:80]!r} (expected cu<major><minor>, e.g. cu130)")
            return WheelVariant("cu", (int(digits[:-1]), int(digits[-1])))
        return WheelVariant("rocm", Release.parse(digits).numbers)

    @staticmethod
    def cuda(version: str) -> WheelVariant:
        """The variant of a CUDA version: '13.0.1' -> cu130."""
        return WheelVariant("cu", Release.parse(version).major_minor)

    @property
    def version(self) -> MajorMinor:
        """The accelerator's major.minor: cu124 -> (12, 4), rocm6.2.4 -> (6, 2)."""
        if not self.numbers:
            raise ValueError("a cpu wheel has no accelerator version")
        return Release(self.numbers).major_minor

    def __str__(self) -> str:
        if self.kind == "cu":
            return "cu{}{}".format(*self.version)
        return f"rocm{Release(self.numbers)}" if self.kind == "rocm" else "cpu"


@dataclass(frozen=True, order=True)
class ComputeCapability:
    """A GPU's compute capability: '9.0' as nvidia-smi and the tables spell it, `sm_90a`, `compute_120`,
    `100f` as compilers do (there the last digit is the minor; bare digits are a major, as the tables write 12)."""

    major: int
    minor: int
    suffix: Literal["", "a", "f"] = ""

    @staticmethod
    def parse(text: str) -> ComputeCapability:
        match = _CC.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"not a compute capability: {text[:80]!r} (expected e.g. 9.0, 12, sm_90a)")
        suffix: Literal["", "a", "f"] = "a" if match["suffix"] == "a" else "f" if match["suffix"] == "f" else ""
        if match["digits"] is None:
            return ComputeCapability(int(match["major"]), int(match["minor"]), suffix)
        digits = match["digits"]
        if text.strip()[:1] in ("s", "c") or suffix:  # sm_90, compute_120, 100f: the last digit is the minor
            return ComputeCapability(int(digits[:-1] or "0"), int(digits[-1]), suffix)
        return ComputeCapability(int(digits), 0, suffix)  # '9' as a table spells a major

    @property
    def pair(self) -> MajorMinor:
        return self.major, self.minor

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


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


def release_parts(version: str) -> tuple[str, ...]:
    """The dot-separated parts of a version's public part, as written: '2.14.1+cu130' -> ('2', '14', '1')."""
    return tuple(version.partition("+")[0].split("."))


def release_line(version: str) -> str:
    """A release line, X.Y, of a version as written ('2.14.1+cu130' -> '2.14', '3.11' -> '3.11', '12' -> '12')."""
    return ".".join(release_parts(version)[:2])


def framework_line(version: str) -> str | None:
    """The release line a floating tag names, of a framework version as the matrix writes it:
    '2.14.1' -> '2.14', '0.12.0.1' -> '0.12'; None for a version of another shape ('2.15rc1', '12',
    '2.14.1+cu130'), which names no line."""
    found = _FRAMEWORK_LINE.fullmatch(version)
    return found["line"] if found else None


def release_major(version: str) -> str:
    """The major of a version as written: '12.8' -> '12'."""
    return release_parts(version)[0]


@functools.lru_cache(maxsize=4096)  # pure: the fits and tables name a few dozen capabilities thousands of times
def cc_tuple(cc: str) -> MajorMinor:
    """A compute capability as the tables write it: '9.0' -> (9, 0), '12' -> (12, 0)."""
    major, dot, minor = cc.strip().partition(".")
    if not major.isascii() or not major.isdigit() or (dot and (not minor.isascii() or not minor.isdigit())):
        raise ValueError(f"not a compute capability: {cc[:80]!r} (expected e.g. 9.0 or 12)")
    return int(major), int(minor or "0")


def variant_version(variant: str) -> MajorMinor:
    """The accelerator version of a wheel variant: cu124 -> (12, 4); cu130 -> (13, 0); rocm6.2.4 -> (6, 2)."""
    return WheelVariant.parse(variant).version
