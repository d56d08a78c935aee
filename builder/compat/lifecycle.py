"""End of life as vendors publish it, and this project's own support window (data/lifecycle.yaml).

Two kinds of date, never mixed: a vendor's end of life per Python line, base OS and NVIDIA driver
branch (python.org, Debian, Canonical, NVIDIA), and this project's support policy for framework
release lines, which their projects give no end of life: SPEC 0's 24 months from a line's first
release. Only vendor dates are "end of life"; a policy date is shown as the end of this project's
window, and nothing is refused for it (a date nobody published must not stop a rebuild).

Pure: the table in, the dates an image's lines have and which of them are past a given day out. The
table is refused in one line (file:line) when a row lacks a source, a date is not YYYY-MM-DD, a line
appears twice, or a window's `until` is not its `released` day plus 24 months.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.compat.tables import DATA_DIR, Table
from builder.frameworks import NAMES
from builder.model.plan import ImageSpec
from builder.model.versions import release_line, release_parts, release_tuple
from builder.util.yamlsrc import LDict, LList

LIFECYCLE_PATH = DATA_DIR / "lifecycle.yaml"
VENDOR_SECTIONS = ("python", "os", "driver")
POLICY = "policy"
SPEC0_MONTHS = 24  # SPEC 0: a core package's release is supported for 24 months after it came out
_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")  # ASCII digits: `\d` also takes fullwidth and Arabic-Indic ones
_LABELS = {"python": "Python", "os": "", "driver": "NVIDIA driver"}


@dataclass(frozen=True)
class EndOfLife:
    kind: str  # python | os | driver | a framework's name
    line: str  # "3.11", "debian12", "R535", "2.14"
    date: dt.date
    source: tuple[str, ...]
    policy: bool = False  # True: this project's support window, not a vendor's end of life

    @property
    def name(self) -> str:
        return f"{_LABELS.get(self.kind, self.kind)} {self.line}".strip()

    def __str__(self) -> str:
        if self.policy:
            return f"{self.name} (this project's {SPEC0_MONTHS}-month support window ends {self.date.isoformat()}; no vendor end of life)"
        return f"{self.name} (end of life {self.date.isoformat()})"


@dataclass(frozen=True)
class Lifecycle:
    rows: Mapping[tuple[str, str], EndOfLife]  # (kind, line) -> its end of life or window

    def find(self, kind: str, line: str | None) -> EndOfLife | None:
        return None if line is None else self.rows.get((kind, line))

    def release(self, kind: str, version: str | None) -> EndOfLife | None:
        """The row of the longest line that prefixes `version` (jax 0.4.35 before 0.4; 2.14.1 -> 2.14)."""
        if not version:
            return None
        parts = release_parts(version)
        for n in range(len(parts), 1, -1):
            found = self.rows.get((kind, ".".join(parts[:n])))
            if found is not None:
                return found
        return None


def add_months(day: dt.date, months: int) -> dt.date:
    """`day` moved by whole months, clamped to the target month's last day (2024-02-29 + 12 -> 2025-02-28)."""
    month0 = day.month - 1 + months
    year, month = day.year + month0 // 12, month0 % 12 + 1
    end = dt.date(year + month // 12, month % 12 + 1, 1) - dt.timedelta(days=1)
    return dt.date(year, month, min(day.day, end.day))


def line_of(version: str | None) -> str | None:
    """A release line, X.Y, of a version ("2.14.1+cu130" -> "2.14"); None for None."""
    if not version:
        return None
    return release_line(version)


def driver_line(driver: str | None) -> str | None:
    """A driver version's branch as lifecycle.yaml names it: 535.104.05 -> R535."""
    numbers = release_tuple(driver or "")
    return f"R{numbers[0]}" if numbers else None


def _date(table: Table, row: LDict, key: str) -> dt.date:
    value = row[key]
    if not isinstance(value, str) or not _DATE.fullmatch(value):
        raise table.fail(f'{key} {value!r} is not a quoted date like "2027-10-31"', row.line_of(key))
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise table.fail(f"{key} {value!r} is not a day of the calendar", row.line_of(key)) from None


@functools.cache
def load(path: Path = LIFECYCLE_PATH) -> Lifecycle:
    table = Table(path, "end-of-life table")
    table.only(table.doc, ("schema", *VENDOR_SECTIONS, POLICY), "the end-of-life table")
    rows: dict[tuple[str, str], EndOfLife] = {}

    def add(kind: str, value: Any, line: int, policy: bool) -> None:
        if isinstance(value, LList) and not value:
            return
        keys = ("line", "released", "until") if policy else ("line", "eol")
        for row in table.rows(value, keys, None, line):
            key = (kind, str(row["line"]))
            if key in rows:
                raise table.fail(f"{kind} line {row['line']} appears twice", row.line)
            if policy:
                date, released = _date(table, row, "until"), _date(table, row, "released")
                implied = add_months(released, SPEC0_MONTHS)
                if implied != date:
                    raise table.fail(
                        f"{kind} line {row['line']}: until {date} is not released + {SPEC0_MONTHS} months ({implied})", row.line_of("until")
                    )
            else:
                date = _date(table, row, "eol")
            rows[key] = EndOfLife(kind, key[1], date, table.source(row), policy)

    for section in VENDOR_SECTIONS:
        add(section, table.section(table.doc, section), table.doc.line_of(section), False)
    frameworks = table.mapping(table.doc, POLICY)
    for name, value in frameworks.items():
        if name not in NAMES:
            raise table.fail(f"unknown framework {name!r}; the frameworks are {', '.join(NAMES)}", frameworks.line_of(name))
        add(str(name), value, frameworks.line_of(name), True)
    return Lifecycle(rows)


def for_image(python: str, os: str, frameworks: Mapping[str, str], table: Lifecycle | None = None) -> tuple[EndOfLife, ...]:
    """The known dates of an image's lines (vendor end of life and this project's window), soonest first."""
    known = table or load()
    found = [
        known.find("python", line_of(python)),
        known.find("os", os),
        *(known.release(name, version) for name, version in sorted(frameworks.items())),
    ]
    return tuple(sorted((e for e in found if e is not None), key=lambda e: (e.date, e.kind)))


def past(dates: tuple[EndOfLife, ...], today: dt.date, *, vendor_only: bool = False) -> tuple[EndOfLife, ...]:
    """Those whose date is before `today` (with `vendor_only`, only vendors' ends of life)."""
    return tuple(e for e in dates if e.date < today and not (vendor_only and e.policy))


def to_json(dates: tuple[EndOfLife, ...]) -> dict[str, str]:
    """Vendors' ends of life, `kind line` -> ISO date, for the plan JSON and the catalog JSON."""
    return {f"{e.kind} {e.line}": e.date.isoformat() for e in dates if not e.policy}


def window_json(dates: tuple[EndOfLife, ...]) -> dict[str, str]:
    """This project's support windows, `framework line` -> the ISO day each ends (not an end of life)."""
    return {f"{e.kind} {e.line}": e.date.isoformat() for e in dates if e.policy}


def past_vendor_warnings(specs: Sequence[ImageSpec], today: dt.date) -> list[str]:
    """One warning per line past its vendor's end of life, naming the planned images that use it
    (`builder plan` prints them; this project's own windows are no warning)."""
    users: dict[EndOfLife, list[str]] = {}
    for spec in specs:
        for found in past(for_image(spec.python, spec.base.os, spec.versions), today, vendor_only=True):
            users.setdefault(found, []).append(spec.id)
    out = []
    for found, ids in sorted(users.items(), key=lambda item: (item[0].date, item[0].kind, item[0].line)):
        shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
        out.append(
            f"{found} is past: {len(ids)} planned image(s) use it ({shown}); `builder nightly` no longer rebuilds them "
            "(--rebuild-past-eol does); move them to a supported line"
        )
    return out
