"""What a team environment stands on: a known-good record and its lock (pure).

The base's lock is what its image installed: every package, version and hash. It is read from
images/<id>/requirements.lock beside the matrix when that file is the one the record was published
with (its sha256 equals the record's `lock_sha256`), else from the record's package manifest (pip
freeze: versions, no hashes). Every pin becomes a constraint of the environment's lock, so uv can
only add packages, never move one the base has.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from builder.catalog.records import KnownGood
from builder.compat.rules import table
from builder.lock import files
from builder.lock.target import platform_for
from builder.model.versions import release_line
from builder.util.errors import UserError

_FREEZE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.!+_-]+)$")
# `numpy>=2.1`, `numpy>=2,<3` in a resolver's message: a base package with a range it was asked for
_ASKED = re.compile(
    r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?P<spec>(?:[<>=!~]=?=?\s*[A-Za-z0-9.*+!_-]+)(?:\s*,\s*[<>=!~]=?=?\s*[A-Za-z0-9.*+!_-]+)*)"
)


@dataclass(frozen=True)
class BaseLock:
    """The packages of a known-good image, as its lock (or manifest) records them."""

    record: str  # the catalog record's id
    python: str  # major.minor
    platform: str  # uv's --python-platform
    pins: tuple[tuple[str, str], ...]  # (normalised name, version), sorted
    hashes: tuple[tuple[str, tuple[str, ...]], ...]  # empty when read from a manifest
    source: str  # the file it was read from

    @property
    def constraints(self) -> tuple[str, ...]:
        return tuple(f"{name}=={version}" for name, version in self.pins)

    def version_of(self, name: str) -> str | None:
        return dict(self.pins).get(str(canonicalize_name(name)))


def lock_sha256(text: str) -> str:
    """As publish records it (builder.publish.publisher.lock_sha256)."""
    return hashlib.sha256(text.encode()).hexdigest()


def from_lock(record: KnownGood, text: str, where: str) -> BaseLock:
    """The record's lock file, refused unless it is the one the record was published with."""
    if record.lock_sha256 is None:
        raise UserError(f"record {record.id} was published without a lock; a team environment needs a locked base", where)
    if lock_sha256(text) != record.lock_sha256:
        raise UserError(
            f"is not the lock record {record.id} was published with (sha256 differs from the catalog's lock_sha256); "
            "check out the commit that published it, or pick a newer record",
            where,
        )
    contents = files.read(text, where)
    return BaseLock(
        record=record.id,
        python=contents.python,
        platform=contents.platform,
        pins=tuple(sorted((p.name, p.version) for p in contents.packages)),
        hashes=tuple(sorted((p.name, p.hashes) for p in contents.packages)),
        source=where,
    )


def from_manifest(record: KnownGood, text: str, where: str) -> BaseLock:
    """The `## pip freeze` section of the record's manifest: versions only (no hashes to compare)."""
    section = text.split("## pip freeze\n", 1)[1].split("\n## ", 1)[0] if "## pip freeze\n" in text else ""
    pins: dict[str, str] = {}
    for line in section.splitlines():
        found = _FREEZE.fullmatch(line.strip())
        if found:
            try:
                pins[str(canonicalize_name(found["name"]))] = str(Version(found["version"]))
            except ValueError:  # InvalidVersion, or int()'s refusal of a number over 4,300 digits
                continue
    if not pins:
        raise UserError(f"has no `## pip freeze` section with pins; the manifest of {record.id} cannot be a base lock", where)
    python = release_line(record.python)
    return BaseLock(record.id, python, platform_for(record.os, table(), record.platform), tuple(sorted(pins.items())), (), where)


def untouched(packages: Sequence[files.Package], base: BaseLock, where: str) -> None:
    """Every package of the environment's lock that the base has is the base's: same version, and
    (when the base's hashes are known) a hash of the base's. A UserError names the first that moved."""
    versions, hashes = dict(base.pins), dict(base.hashes)
    for package in packages:
        have = versions.get(package.name)
        if have is None:
            continue
        if have != package.version:
            raise UserError(
                f"{package.name}=={package.version} would replace the base's {package.name}=={have} ({base.record}); re-lock",
                where,
                package.line,
            )
        known = hashes.get(package.name)
        if known and not set(known) & set(package.hashes):
            raise UserError(
                f"{package.name}=={package.version} is locked with hashes the base ({base.record}) does not have; re-lock",
                where,
                package.line,
            )


def conflicts(message: str, base: BaseLock) -> list[tuple[str, str]]:
    """(package, range) pairs a resolver's refusal asks of the base's packages that the base's pin
    does not satisfy: `numpy>=2.1` when the base pins numpy 1.26.4."""
    out: list[tuple[str, str]] = []
    for found in _ASKED.finditer(message):
        name = str(canonicalize_name(found["name"]))
        pinned = base.version_of(name)
        spec = "".join(found["spec"].split())
        if pinned is None:
            continue
        try:
            wanted = SpecifierSet(spec)
        except InvalidSpecifier:
            continue
        if not wanted.contains(pinned, prereleases=True) and (name, spec) not in out:
            out.append((name, spec))
    return out


def fits(base: BaseLock, asked: Sequence[tuple[str, str]]) -> bool:
    """Whether a base's pins satisfy every (package, range) asked."""
    for name, spec in asked:
        pinned = base.version_of(name)
        if pinned is None or not SpecifierSet(spec).contains(pinned, prereleases=True):
            return False
    return bool(asked)
