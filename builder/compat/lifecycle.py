"""End-of-life dates (data/lifecycle.yaml): per Python line, base OS, CUDA line and framework
release line, each from its project's published support policy (data/sources.yaml).

Pure: the table in, the dates an image's lines have and which of them are past a given day out.
The table is refused in one line (file:line) when a row lacks a source, a date is not YYYY-MM-DD,
a line appears twice, or a date derived by a policy disagrees with what it derives from: a CUDA
row's `eol` must be the last day of the sixth month after its driver branch's `branch_eol`
(NVIDIA's image-tag policy), a framework row's `eol` its `released` day plus 24 months (SPEC 0)."""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.compat.tables import DATA_DIR, Table
from builder.frameworks import NAMES
from builder.yamlsrc import LList

LIFECYCLE_PATH = DATA_DIR / "lifecycle.yaml"
SECTIONS = ("python", "os", "cuda", "frameworks")
CUDA_TAGS_KEPT_MONTHS = 6  # NVIDIA deletes a CUDA minor's image tags ~6 months after its driver branch ends (S5)
SPEC0_MONTHS = 24  # SPEC 0: a core package's release is supported for 24 months after it came out


@dataclass(frozen=True)
class EndOfLife:
    kind: str  # python | os | cuda | a framework's name
    line: str  # "3.11", "debian12", "12.4", "2.14"
    date: dt.date
    source: tuple[str, ...]

    def __str__(self) -> str:
        what = {"python": "Python", "os": "", "cuda": "CUDA"}.get(self.kind, self.kind)
        return f"{what} {self.line}".strip() + f" (end of life {self.date.isoformat()})"


@dataclass(frozen=True)
class Lifecycle:
    rows: Mapping[tuple[str, str], EndOfLife]  # (kind, line) -> its end of life

    def find(self, kind: str, line: str | None) -> EndOfLife | None:
        return None if line is None else self.rows.get((kind, line))


def add_months(day: dt.date, months: int) -> dt.date:
    """`day` moved by whole months, clamped to the target month's last day (2024-02-29 + 12 -> 2025-02-28)."""
    month0 = day.month - 1 + months
    year, month = day.year + month0 // 12, month0 % 12 + 1
    return dt.date(year, month, min(day.day, _month_end(year, month).day))


def _month_end(year: int, month: int) -> dt.date:
    return (dt.date(year + month // 12, month % 12 + 1, 1)) - dt.timedelta(days=1)


_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_MONTH = re.compile(r"[0-9]{4}-[0-9]{2}")


def day(value: Any) -> dt.date:
    """A YYYY-MM-DD date (ValueError otherwise): `date.fromisoformat` alone also takes 20271031 and
    ISO week dates (2027-W44-7), which would pass as a day nobody wrote."""
    text = str(value)
    if not _DAY.fullmatch(text):
        raise ValueError(text)
    return dt.date.fromisoformat(text)


def derived_eol(kind: str, row: Mapping[str, Any]) -> dt.date | None:
    """The end of life a row's policy column implies (None when the row states its date directly)."""
    if kind == "cuda" and "branch_eol" in row:
        if not _MONTH.fullmatch(str(row["branch_eol"])):
            raise ValueError(row["branch_eol"])
        year, month = (int(part) for part in str(row["branch_eol"]).split("-"))
        target = add_months(dt.date(year, month, 1), CUDA_TAGS_KEPT_MONTHS)
        return _month_end(target.year, target.month)
    if kind not in ("python", "os", "cuda") and "released" in row:
        return add_months(day(row["released"]), SPEC0_MONTHS)
    return None


def line_of(version: str | None) -> str | None:
    """A release line, X.Y, of a version ("2.14.1+cu130" -> "2.14"); None for None."""
    if not version:
        return None
    parts = version.split("+")[0].split(".")
    return ".".join(parts[:2])


@functools.cache
def load(path: Path = LIFECYCLE_PATH) -> Lifecycle:
    table = Table(path, "end-of-life table")
    table.only(table.doc, ("schema", *SECTIONS), "the end-of-life table")
    rows: dict[tuple[str, str], EndOfLife] = {}

    def add(kind: str, value: Any, line: int) -> None:
        if isinstance(value, LList) and not value:
            return
        optional = {"cuda": ("branch", "branch_eol"), "python": (), "os": ()}.get(kind, ("released",))
        for row in table.rows(value, ("line", "eol"), None, line, optional):
            key = (kind, str(row["line"]))
            if key in rows:
                raise table.fail(f"{kind} line {row['line']} appears twice", row.line)
            try:
                date = day(row["eol"])
            except ValueError:
                raise table.fail(f"eol {row['eol']!r} is not a date like 2027-10-31", row.line_of("eol")) from None
            try:
                implied = derived_eol(kind, row)
            except ValueError:
                column = "branch_eol" if "branch_eol" in row else "released"
                raise table.fail(f"{column} {row[column]!r} is not a date like 2026-02 / 2026-02-17", row.line_of(column)) from None
            if implied is not None and implied != date:
                raise table.fail(
                    f"{kind} line {row['line']}: eol {date} disagrees with its policy, which gives {implied}", row.line_of("eol")
                )
            rows[key] = EndOfLife(kind, key[1], date, table.source(row))

    for section in ("python", "os", "cuda"):
        add(section, table.section(table.doc, section), table.doc.line_of(section))
    frameworks = table.mapping(table.doc, "frameworks")
    for name, value in frameworks.items():
        if name not in NAMES:
            raise table.fail(f"unknown framework {name!r}; the frameworks are {', '.join(NAMES)}", frameworks.line_of(name))
        add(str(name), value, frameworks.line_of(name))
    return Lifecycle(rows)


def for_image(
    python: str, os: str, cuda: str | None, frameworks: Mapping[str, str], table: Lifecycle | None = None
) -> tuple[EndOfLife, ...]:
    """The known end-of-life dates of an image's lines, soonest first."""
    known = table or load()
    found = [
        known.find("python", line_of(python)),
        known.find("os", os),
        known.find("cuda", line_of(cuda)),
        *(known.find(name, line_of(version)) for name, version in sorted(frameworks.items())),
    ]
    return tuple(sorted((e for e in found if e is not None), key=lambda e: (e.date, e.kind)))


def past(dates: tuple[EndOfLife, ...], today: dt.date) -> tuple[EndOfLife, ...]:
    """Those whose end of life is before `today`."""
    return tuple(e for e in dates if e.date < today)


def to_json(dates: tuple[EndOfLife, ...]) -> dict[str, str]:
    """`kind line` -> ISO date, for the plan JSON and the catalog JSON."""
    return {f"{e.kind} {e.line}": e.date.isoformat() for e in dates}
