"""Which wheel file of each pin a lock installs on its target (pure).

A lock pins a version with every hash the index lists for it (all platforms and Pythons); the
image installs one of those files, the one whose tags rank first for the lock's target, as pip
and uv choose. Knowing that file (its name and sha256) is what lets the image's device code be
read from the lock alone (usecases/measure.py), before anything is built.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from builder.model.plan import Lock
from builder.model.versions import Release

_PLATFORM = re.compile(r"^(?P<arch>x86_64|aarch64)-manylinux_(?P<major>\d+)_(?P<minor>\d+)$")
_LEGACY = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}  # PEP 600's aliases of the old names


@dataclass(frozen=True)
class IndexFile:
    """One file an index lists for a project."""

    filename: str
    url: str
    sha256: str | None
    size: int | None = None


@dataclass(frozen=True)
class Pin:
    """A locked package: its version and every sha256 the lock allows for it."""

    name: str
    version: str
    hashes: tuple[str, ...]


def pins(lock: Lock) -> tuple[Pin, ...]:
    versions = dict(lock.pins)
    return tuple(Pin(name, versions[name], hashes) for name, hashes in lock.hashes)


def target_tags(python: str, platform: str) -> list[Tag]:
    """The tags a CPython `python` on uv's `--python-platform` accepts, best first (as uv ranks
    them: the newest manylinux first, then the legacy aliases, then abi3 and pure wheels)."""
    match = _PLATFORM.fullmatch(platform)
    if match is None:
        raise ValueError(f"{platform!r} is not a manylinux target like x86_64-manylinux_2_36")
    arch, major, newest = match["arch"], int(match["major"]), int(match["minor"])
    platforms: list[str] = []
    for minor in range(newest, 4, -1):
        platforms.append(f"manylinux_{major}_{minor}_{arch}")
        if major == 2 and minor in _LEGACY and (arch == "x86_64" or minor == 17):
            platforms.append(f"{_LEGACY[minor]}_{arch}")
    version = Release.parse(python).major_minor
    abi = f"cp{version[0]}{version[1]}"
    return [*cpython_tags(version, abis=[abi], platforms=platforms), *compatible_tags(version, abi, platforms)]


def pick(files: Iterable[IndexFile], pin: Pin, tags: Sequence[Tag]) -> IndexFile | None:
    """The wheel of `pin` the target installs: among the files whose sha256 the lock allows, the one
    whose best tag ranks first; None when none of them is a wheel for the target."""
    rank = {tag: i for i, tag in enumerate(tags)}
    allowed = set(pin.hashes)
    best: tuple[int, str, IndexFile] | None = None
    for file in files:
        if file.sha256 not in allowed or not file.filename.endswith(".whl"):
            continue
        try:
            name, _, _, found = parse_wheel_filename(file.filename)
        except InvalidWheelFilename:
            continue
        if canonicalize_name(name) != canonicalize_name(pin.name):
            continue
        ranked = [rank[t] for t in found if t in rank]
        if ranked and (best is None or (min(ranked), file.filename) < best[:2]):
            best = (min(ranked), file.filename, file)
    return None if best is None else best[2]


def twin_of(files: Iterable[IndexFile], filename: str, machine: str) -> IndexFile | None:
    """The wheel of the same project and version as `filename` built for another CPU architecture
    (`machine`: x86_64), manylinux, the lowest tag first (one deterministic answer)."""
    name, version, _, _ = parse_wheel_filename(filename)
    found = []
    for file in files:
        try:
            other, other_version, _, tags = parse_wheel_filename(file.filename)
        except InvalidWheelFilename:
            continue
        same = canonicalize_name(other) == canonicalize_name(name) and other_version == version and file.sha256
        if same and any(t.platform.endswith("_" + machine) and "manylinux" in t.platform for t in tags):
            found.append(file)
    return min(found, key=lambda f: f.filename) if found else None
