"""End-of-life dates (data/lifecycle.yaml): per Python line, base OS, CUDA line and framework
release line, each from its project's published support policy (data/sources.yaml).

Pure: the table in, the dates an image's lines have and which of them are past a given day out.
The table is refused in one line (file:line) when a row lacks a source, a date is not YYYY-MM-DD,
or a line appears twice."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.compat.tables import DATA_DIR, Table
from builder.yamlsrc import LList

LIFECYCLE_PATH = DATA_DIR / "lifecycle.yaml"
SECTIONS = ("python", "os", "cuda", "frameworks")


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
        for row in table.rows(value, ("line", "eol"), None, line):
            key = (kind, str(row["line"]))
            if key in rows:
                raise table.fail(f"{kind} line {row['line']} appears twice", row.line)
            try:
                date = dt.date.fromisoformat(str(row["eol"]))
            except ValueError:
                raise table.fail(f"eol {row['eol']!r} is not a date like 2027-10-31", row.line_of("eol")) from None
            rows[key] = EndOfLife(kind, key[1], date, table.source(row))

    for section in ("python", "os", "cuda"):
        add(section, table.section(table.doc, section), table.doc.line_of(section))
    frameworks = table.mapping(table.doc, "frameworks")
    for name, value in frameworks.items():
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
