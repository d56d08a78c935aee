"""One loader for the reviewed data tables (data/compat.yaml, data/gpu_arch.yaml).

Both are read with line numbers (spec.yamlsrc) and every row must cite a key of data/sources.yaml.
The guards here refuse a table that looks broken (unknown keys, a row without a known source,
unparsable, unsorted or overlapping versions), so a bad edit fails loudly with file:line instead
of deciding wrongly.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from packaging.version import Version

from builder.util.errors import UserError
from builder.util.yamlsrc import LDict, LList, load, loads

DATA_DIR = Path(__file__).parent / "data"
SOURCES_PATH = DATA_DIR / "sources.yaml"
PyRange = tuple[str, str]


@functools.cache
def source_keys(path: Path = SOURCES_PATH) -> frozenset[str]:
    """The citable sources: data/sources.yaml maps a key (S7, PYPI...) to what it is."""
    doc = load(path, str(path))
    if not isinstance(doc, LDict) or not doc or not all(isinstance(v, str) and v for v in doc.values()):
        raise UserError("broken sources table: expected `KEY: description` lines", str(path), 1)
    return frozenset(doc)


class Table:
    """A loaded table document plus the guards; every complaint names the file and the line."""

    def __init__(self, path: Path, what: str = "compatibility table", sources: frozenset[str] | None = None) -> None:
        self.file = str(path)
        self.what = what
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"cannot read the {what}: {exc.strerror if isinstance(exc, OSError) else exc}", self.file) from None
        try:
            doc = loads(text, self.file)
        except UserError as exc:
            raise UserError(f"cannot read the {what}: {exc.message}", self.file, exc.line) from None
        if not isinstance(doc, LDict) or doc.get("schema") != 1:
            raise self.fail("expected `schema: 1` at the top", 1)
        self.doc = doc
        self.sources = source_keys() if sources is None else sources

    def fail(self, message: str, line: int) -> UserError:
        return UserError(f"broken {self.what}: {message}", self.file, line)

    def only(self, mapping: LDict, allowed: Iterable[str], what: str) -> None:
        unknown = sorted(set(mapping) - set(allowed))
        if unknown:
            raise self.fail(f"unknown key(s) {unknown} in {what}; allowed: {sorted(allowed)}", mapping.line_of(unknown[0]))

    def section(self, doc: LDict, key: str) -> Any:
        if key not in doc:
            raise self.fail(f"missing section '{key}'", doc.line)
        return doc[key]

    def mapping(self, doc: LDict, key: str) -> LDict:
        value = self.section(doc, key)
        if not isinstance(value, LDict):
            raise self.fail(f"section '{key}' must be a mapping", doc.line_of(key))
        return value

    def rows(self, value: Any, keys: Sequence[str], sort_key: str | None, line: int, optional: Sequence[str] = ()) -> list[LDict]:
        """A non-empty list of rows with exactly `keys` (plus `optional` ones and `source`), sorted by `sort_key`."""
        if not isinstance(value, LList) or not value:
            raise self.fail("expected a non-empty list of rows", getattr(value, "line", line))
        out: list[LDict] = []
        for i, row in enumerate(value):
            if not isinstance(row, LDict):
                raise self.fail("each row must be a mapping", value.line_of(i))
            unknown = set(row) - set(keys) - set(optional) - {"source"}
            if unknown:
                raise self.fail(f"unknown key(s) {sorted(unknown)}; allowed: {[*keys, *optional]}", row.line)
            missing = [k for k in keys if k not in row]
            if missing:
                raise self.fail(f"row lacks {missing}", row.line)
            self.source(row)
            out.append(row)
        if sort_key is not None:
            self.ascending([(self.version(r[sort_key], r.line), r.line) for r in out])
        return out

    def source(self, row: LDict) -> tuple[str, ...]:
        refs = row.get("source")
        refs = list(refs) if isinstance(refs, list) else [refs]
        if not refs or refs == [None]:
            raise self.fail("row has no source; cite a key of data/sources.yaml", row.line)
        for ref in refs:
            if ref not in self.sources:
                raise self.fail(f"unknown source {ref!r}; add it to data/sources.yaml", row.line_of("source"))
        return tuple(str(r) for r in refs)

    def version(self, value: Any, line: int) -> Version:
        try:
            return Version(str(value))
        except ValueError:  # InvalidVersion, or int()'s refusal of a number over 4,300 digits
            raise self.fail(f"{value!r} is not a version", line) from None

    def ascending(self, versions: list[tuple[Version, int]]) -> None:
        for (a, _), (b, line) in itertools.pairwise(versions):
            if b <= a:
                raise self.fail(f"rows must be sorted by version ascending ({b} after {a})", line)

    def pyrange(self, value: Any, line: int) -> PyRange:
        if not isinstance(value, list) or len(value) != 2:
            raise self.fail("a range must be [min, max]", line)
        low, high = (str(v) for v in value)
        if self.version(low, line) > self.version(high, line):
            raise self.fail(f"range [{low}, {high}] has min > max", line)
        return low, high

    def strs(self, value: Any, line: int) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail("expected a list of strings", line)
        return tuple(value)

    def flag(self, value: Any, what: str, line: int) -> bool:
        if not isinstance(value, bool):
            raise self.fail(f"{what} must be true or false", line)
        return value
