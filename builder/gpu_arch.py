"""Which GPU compute capabilities a framework wheel variant ships kernels for.

The facts live in `data/gpu_arch.yaml`; this module only loads them, refuses a table that looks
broken (a typo there would silently turn a `fail` into an `ok` in `builder doctor`), and answers
lookups. A framework/variant the table does not list is "unknown": callers say "not checked".
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from builder.errors import UserError

TABLE_PATH = Path(__file__).parent / "data" / "gpu_arch.yaml"

_ROW_KEYS = frozenset(
    {
        "framework",
        "variants",
        "since",
        "before",
        "cc_min",
        "cc_max",
        "ptx",
        "source",
        "note",
    }
)
_REQUIRED = ("framework", "variants", "cc_min", "source")
_CC = re.compile(r"^\d{1,2}\.\d$")
_VERSION = re.compile(r"^\d+(\.\d+)*$")
_SOURCE = re.compile(r"^S\d+[a-z]?$")
_NAME = re.compile(r"^[a-z][a-z0-9_.-]*$")
_RELEASE = re.compile(r"^\d+(\.\d+)*")


@dataclass(frozen=True)
class ArchRange:
    """One row of the table: the CC range of some wheel variants over a range of releases."""

    framework: str
    variants: tuple[str, ...]
    cc_min: str
    cc_max: str | None
    since: str | None = None
    before: str | None = None
    ptx: bool = False
    source: tuple[str, ...] = ()
    note: str = ""

    def covers(self, framework: str, variant: str | None, version: str) -> bool:
        if framework != self.framework or variant not in self.variants:
            return False
        release = release_tuple(version)
        if self.since is not None and release < release_tuple(self.since):
            return False
        return self.before is None or release < release_tuple(self.before)

    def contains(self, cc: str) -> bool:
        """True when a GPU of this CC has SASS kernels (PTX JIT is not counted).

        SASS built for X.y also runs on X.z for z > y (CUDA binary compatibility), so a 12.1 GPU
        runs a wheel whose newest kernels are for 12.0; a GPU of a newer major does not.
        """
        value = cc_tuple(cc)
        if value < cc_tuple(self.cc_min):
            return False
        if self.cc_max is None:
            return True
        top = cc_tuple(self.cc_max)
        return value <= top or value[0] == top[0]

    def jit_only(self, cc: str) -> bool:
        """True when a GPU of this CC has no SASS here but can JIT-compile the shipped PTX."""
        return self.ptx and self.cc_max is not None and cc_tuple(cc) > cc_tuple(self.cc_max) and not self.contains(cc)

    @property
    def label(self) -> str:
        """The range as people write it: `7.5-12.0`, or `>= 5.2` when open-ended."""
        return f"{self.cc_min}-{self.cc_max}" if self.cc_max else f">= {self.cc_min}"


def cc_tuple(cc: str) -> tuple[int, int]:
    major, _, minor = cc.strip().partition(".")
    return int(major), int(minor or "0")


def release_tuple(version: str) -> tuple[int, ...]:
    """Release part of a version (`2.9.1+cu130` -> (2, 9, 1)); lenient, for lookups."""
    match = _RELEASE.match(version.strip())
    if not match:
        return ()
    return tuple(int(part) for part in match.group(0).split("."))


def _sort_key(row: ArchRange) -> tuple[str, str, tuple[int, ...]]:
    return row.framework, row.variants[0], release_tuple(row.since or "0")


def _text(value: object, where: str, key: str, pattern: re.Pattern[str]) -> str:
    # Numbers are refused, not converted: YAML reads `since: 2.10` as the float 2.1.
    if not isinstance(value, str):
        raise UserError(f"{where}: `{key}` must be a quoted string, got {value!r}")
    if not pattern.match(value):
        raise UserError(f"{where}: malformed `{key}` {value!r}")
    return value


def _string_list(value: object, where: str, key: str, pattern: re.Pattern[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise UserError(f"{where}: `{key}` must be a non-empty list")
    return tuple(_text(item, where, key, pattern) for item in value)


def _parse_row(raw: object, where: str) -> ArchRange:
    if not isinstance(raw, dict):
        raise UserError(f"{where}: a row must be a mapping")
    unknown = sorted(set(map(str, raw)) - _ROW_KEYS)
    if unknown:
        raise UserError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {sorted(_ROW_KEYS)}")
    missing = [key for key in _REQUIRED if key not in raw]
    if missing:
        raise UserError(f"{where}: missing key(s) {', '.join(missing)}")
    since = None if raw.get("since") is None else _text(raw["since"], where, "since", _VERSION)
    before = None if raw.get("before") is None else _text(raw["before"], where, "before", _VERSION)
    cc_max = None if raw.get("cc_max") is None else _text(raw["cc_max"], where, "cc_max", _CC)
    ptx = raw.get("ptx", False)
    if not isinstance(ptx, bool):
        raise UserError(f"{where}: `ptx` must be true or false")
    note = raw.get("note", "")
    if not isinstance(note, str):
        raise UserError(f"{where}: `note` must be a string")
    row = ArchRange(
        framework=_text(raw["framework"], where, "framework", _NAME),
        variants=_string_list(raw["variants"], where, "variants", _NAME),
        cc_min=_text(raw["cc_min"], where, "cc_min", _CC),
        cc_max=cc_max,
        since=since,
        before=before,
        ptx=ptx,
        source=_string_list(raw["source"], where, "source", _SOURCE),
        note=note,
    )
    if row.cc_max is not None and cc_tuple(row.cc_min) > cc_tuple(row.cc_max):
        raise UserError(f"{where}: cc_min {row.cc_min} > cc_max {row.cc_max}")
    if since and before and release_tuple(since) >= release_tuple(before):
        raise UserError(f"{where}: since {since} is not before {before}")
    return row


def _overlap(a: ArchRange, b: ArchRange) -> bool:
    if a.framework != b.framework or not set(a.variants) & set(b.variants):
        return False
    a_lo, b_lo = release_tuple(a.since or "0"), release_tuple(b.since or "0")
    a_hi = release_tuple(a.before) if a.before else None
    b_hi = release_tuple(b.before) if b.before else None
    return (a_hi is None or b_lo < a_hi) and (b_hi is None or a_lo < b_hi)


def parse_table(data: object, path: str = "gpu_arch.yaml") -> tuple[ArchRange, ...]:
    """Validate the YAML document and return its rows; any doubt is a UserError."""
    if not isinstance(data, dict) or set(map(str, data)) != {"rows"}:
        raise UserError(f"{path}: expected a mapping with exactly one key `rows`")
    raw_rows = data["rows"]
    if not isinstance(raw_rows, list) or not raw_rows:
        raise UserError(f"{path}: `rows` must be a non-empty list")
    rows = tuple(_parse_row(raw, f"{path}: row {i + 1}") for i, raw in enumerate(raw_rows))
    for i, (prev, row) in enumerate(itertools.pairwise(rows), start=2):
        if _sort_key(row) < _sort_key(prev):
            raise UserError(f"{path}: row {i} is out of order; sort by framework, variant, since")
    for i, row in enumerate(rows):
        for j in range(i + 1, len(rows)):
            if _overlap(row, rows[j]):
                raise UserError(
                    f"{path}: rows {i + 1} and {j + 1} both cover {row.framework} "
                    f"{sorted(set(row.variants) & set(rows[j].variants))} for some version"
                )
    return rows


def load_table(path: Path = TABLE_PATH) -> tuple[ArchRange, ...]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"cannot read the GPU architecture table: {exc}", file=str(path)) from exc
    return parse_table(data, str(path))


@functools.cache
def default_table() -> tuple[ArchRange, ...]:
    return load_table(TABLE_PATH)


def lookup(
    framework: str,
    variant: str | None,
    version: str,
    table: tuple[ArchRange, ...] | None = None,
) -> ArchRange | None:
    """The row for this wheel, or None when the table has no facts about it."""
    for row in default_table() if table is None else table:
        if row.covers(framework, variant, version):
            return row
    return None


def supported_cc(
    framework: str,
    variant: str | None,
    version: str,
    table: tuple[ArchRange, ...] | None = None,
) -> tuple[str, str | None] | None:
    """(lowest CC, highest CC or None when open-ended), or None when unknown."""
    row = lookup(framework, variant, version, table)
    return None if row is None else (row.cc_min, row.cc_max)


def variants_for(
    framework: str,
    version: str,
    cc: str,
    table: tuple[ArchRange, ...] | None = None,
) -> tuple[str, ...]:
    """Variants of this release whose kernels cover `cc`, newest first: what to suggest instead."""
    found = {
        variant
        for row in (default_table() if table is None else table)
        if row.framework == framework and row.contains(cc)
        for variant in row.variants
        if row.covers(framework, variant, version)
    }
    return tuple(sorted(found, key=_variant_key, reverse=True))


def _variant_key(variant: str) -> tuple[int, str]:
    digits = re.search(r"\d+", variant)
    return (int(digits.group(0)) if digits else -1), variant
