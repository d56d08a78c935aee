"""Which GPU compute capabilities a framework wheel variant ships kernels for.

The facts live in `data/gpu_arch.yaml`; this module loads them through `tables.Table` (line
numbers, known sources), refuses a table that looks broken (a typo there would silently turn a
`fail` into an `ok` in `builder doctor`), and answers lookups. A framework/variant the table does
not list is "unknown": callers say "not checked".
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from builder.compat.tables import DATA_DIR, Table
from builder.model.versions import cc_tuple, release_tuple
from builder.util.yamlsrc import LDict, LList

TABLE_PATH = DATA_DIR / "gpu_arch.yaml"

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


def _sort_key(row: ArchRange) -> tuple[str, str, tuple[int, ...]]:
    return row.framework, row.variants[0], release_tuple(row.since or "0")


def _text(t: Table, row: LDict, key: str, pattern: re.Pattern[str], where: str) -> str:
    return _checked(t, row[key], key, pattern, where, row.line_of(key))


def _checked(t: Table, value: object, key: str, pattern: re.Pattern[str], where: str, line: int) -> str:
    # Numbers are refused, not converted: YAML reads `since: 2.10` as the float 2.1.
    if not isinstance(value, str):
        raise t.fail(f"{where}: `{key}` must be a quoted string, got {value!r}", line)
    if not pattern.match(value):
        raise t.fail(f"{where}: malformed `{key}` {value!r}", line)
    return value


def _string_list(t: Table, row: LDict, key: str, pattern: re.Pattern[str], where: str) -> tuple[str, ...]:
    value = row[key]
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise t.fail(f"{where}: `{key}` must be a non-empty list", row.line_of(key))
    return tuple(_checked(t, item, key, pattern, where, row.line_of(key)) for item in items)


def _optional(t: Table, row: LDict, key: str, pattern: re.Pattern[str], where: str) -> str | None:
    return None if row.get(key) is None else _text(t, row, key, pattern, where)


def _parse_row(t: Table, raw: object, where: str, line: int) -> ArchRange:
    if not isinstance(raw, LDict):
        raise t.fail(f"{where}: a row must be a mapping", line)
    unknown = sorted(set(map(str, raw)) - _ROW_KEYS)
    if unknown:
        raise t.fail(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {sorted(_ROW_KEYS)}", raw.line_of(unknown[0]))
    missing = [key for key in _REQUIRED if key not in raw]
    if missing:
        raise t.fail(f"{where}: missing key(s) {', '.join(missing)}", raw.line)
    note = raw.get("note", "")
    if not isinstance(note, str):
        raise t.fail(f"{where}: `note` must be a string", raw.line_of("note"))
    source = _string_list(t, raw, "source", _SOURCE, where)
    t.source(raw)
    row = ArchRange(
        framework=_text(t, raw, "framework", _NAME, where),
        variants=_string_list(t, raw, "variants", _NAME, where),
        cc_min=_text(t, raw, "cc_min", _CC, where),
        cc_max=_optional(t, raw, "cc_max", _CC, where),
        since=_optional(t, raw, "since", _VERSION, where),
        before=_optional(t, raw, "before", _VERSION, where),
        ptx=t.flag(raw.get("ptx", False), f"{where}: `ptx`", raw.line_of("ptx")),
        source=source,
        note=note,
    )
    if row.cc_max is not None and cc_tuple(row.cc_min) > cc_tuple(row.cc_max):
        raise t.fail(f"{where}: cc_min {row.cc_min} > cc_max {row.cc_max}", raw.line_of("cc_min"))
    if row.since and row.before and release_tuple(row.since) >= release_tuple(row.before):
        raise t.fail(f"{where}: since {row.since} is not before {row.before}", raw.line_of("since"))
    return row


def _overlap(a: ArchRange, b: ArchRange) -> bool:
    if a.framework != b.framework or not set(a.variants) & set(b.variants):
        return False
    a_lo, b_lo = release_tuple(a.since or "0"), release_tuple(b.since or "0")
    a_hi = release_tuple(a.before) if a.before else None
    b_hi = release_tuple(b.before) if b.before else None
    return (a_hi is None or b_lo < a_hi) and (b_hi is None or a_lo < b_hi)


def parse_table(t: Table) -> tuple[ArchRange, ...]:
    """Validate the loaded document and return its rows; any doubt is a UserError with file:line."""
    doc = t.doc
    if set(map(str, doc)) != {"schema", "rows"}:
        raise t.fail("expected a mapping with exactly one key `rows` (besides `schema`)", doc.line)
    raw_rows = doc["rows"]
    if not isinstance(raw_rows, LList) or not raw_rows:
        raise t.fail("`rows` must be a non-empty list", doc.line_of("rows"))
    rows = tuple(_parse_row(t, raw, f"row {i + 1}", raw_rows.line_of(i)) for i, raw in enumerate(raw_rows))
    for i, (prev, row) in enumerate(itertools.pairwise(rows), start=2):
        if _sort_key(row) < _sort_key(prev):
            raise t.fail(f"row {i} is out of order; sort by framework, variant, since", raw_rows.line_of(i - 1))
    for i, row in enumerate(rows):
        for j in range(i + 1, len(rows)):
            if _overlap(row, rows[j]):
                raise t.fail(
                    f"rows {i + 1} and {j + 1} both cover {row.framework} {sorted(set(row.variants) & set(rows[j].variants))} for some version",
                    raw_rows.line_of(j),
                )
    return rows


def load_table(path: Path = TABLE_PATH) -> tuple[ArchRange, ...]:
    return parse_table(Table(path, what="GPU architecture table"))


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
