"""Selectors, in one place: `key=glob` terms matched against the fields of an image or a combination.

`--select EXPR` (comma-separated terms over planned images) and matrix.yaml's include/exclude
entries (terms over combinations) both match with `matches`: every term must match, and a
framework term never matches something without that framework.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase

from builder.compat.rules import names as framework_names
from builder.errors import UserError
from builder.records import Combination, ImageSpec

SELECT_FIELDS = ("id", "base", "stack", "python", "vendor", "os", "index")  # and every framework of the registry in force
Selector = tuple[tuple[str, str], ...]
Fields = Mapping[str, str | tuple[str, ...]]  # a tuple matches when any of its values does (`index`)
GLOB_CHARS = "*?["


def select_keys() -> tuple[str, ...]:
    return (*SELECT_FIELDS, *framework_names())


def parse_select(expr: str) -> Selector:
    """Parse `stack=torch,base=cuda12.*`; an empty expression selects everything."""
    out = []
    for part in (p.strip() for p in expr.split(",")):
        if not part:
            continue
        key, sep, pattern = part.partition("=")
        key, pattern = key.strip(), pattern.strip()
        if not sep or not pattern:
            raise UserError(f"select term {part!r} must look like key=value, e.g. stack=torch")
        keys = select_keys()
        if key not in keys:
            close = difflib.get_close_matches(key, keys, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"keys: {', '.join(keys)}"
            raise UserError(f"unknown select key {key!r}; {hint}")
        out.append((key, pattern))
    return tuple(out)


def combination_fields(combo: Combination) -> dict[str, str]:
    fields = {
        "base": combo.base.name,
        "stack": combo.stack,
        "python": combo.python,
        "vendor": combo.base.vendor,
    }
    fields.update(combo.frameworks)
    return fields


def fields_of(spec: ImageSpec) -> dict[str, str | tuple[str, ...]]:
    fields: dict[str, str | tuple[str, ...]] = {
        "index": spec.index_urls,
        "id": spec.id,
        "base": spec.base.name,
        "stack": spec.stack,
        "python": spec.python,
        "vendor": spec.base.vendor,
        "os": spec.base.os,
    }
    fields.update(spec.frameworks)
    return fields


def matches(selector: Selector, fields: Fields) -> bool:
    """All terms must match; a framework term does not match an image without that framework."""
    return all(key in fields and _match(fields[key], pattern) for key, pattern in selector)


def _match(value: str | tuple[str, ...], pattern: str) -> bool:
    if isinstance(value, tuple):
        return any(fnmatchcase(v, pattern) for v in value)
    return fnmatchcase(value, pattern)


def select(images: tuple[ImageSpec, ...], selector: Selector) -> tuple[ImageSpec, ...]:
    return tuple(spec for spec in images if matches(selector, fields_of(spec)))


def no_match(selector: Selector, images: tuple[ImageSpec, ...], what: str) -> str:
    """Why a selection is empty: the values each named key has among the planned images."""
    known: list[str] = []
    for key, _ in selector:
        if key == "id":
            known.append("`builder plan` lists the ids")
            continue
        values = sorted({v for spec in images for v in _values(fields_of(spec).get(key))})
        shown = ", ".join(values[:12]) + (", ..." if len(values) > 12 else "")
        known.append(f"{key} is one of: {shown}" if values else f"no planned image has a {key}")
    terms = ",".join(f"{k}={v}" for k, v in selector)
    return f"{what} {terms!r} matches none of the {len(images)} planned images; {'; '.join(known)}"


def _values(value: str | tuple[str, ...] | None) -> tuple[str, ...]:
    return () if value is None else value if isinstance(value, tuple) else (value,)


def is_glob(pattern: str) -> bool:
    return any(c in pattern for c in GLOB_CHARS)


class SelectorIndex:
    """The first of many selectors that matches, without trying each one (matrix.yaml can hold
    tens of thousands of exclude entries).

    Selectors are grouped by the keys they name with exact values; a lookup per group finds the
    candidates whose exact values all match, and only their glob terms are then tried. Order is
    kept: `first` returns the lowest index that matches, as a linear scan would.
    """

    def __init__(self, selectors: Sequence[Selector]) -> None:
        groups: dict[tuple[str, ...], dict[tuple[str, ...], list[int]]] = defaultdict(lambda: defaultdict(list))
        self.globs: list[Selector] = []
        for i, selector in enumerate(selectors):
            exact = tuple(sorted((k, v) for k, v in selector if not is_glob(v)))
            groups[tuple(k for k, _ in exact)][tuple(v for _, v in exact)].append(i)
            self.globs.append(tuple((k, v) for k, v in selector if is_glob(v)))
        self.groups = {keys: dict(values) for keys, values in groups.items()}

    def first(self, fields: Mapping[str, str]) -> int | None:
        best: int | None = None
        for keys, by_values in self.groups.items():
            if not all(k in fields for k in keys):
                continue
            for i in by_values.get(tuple(fields[k] for k in keys), ()):
                if best is not None and i >= best:
                    break
                if matches(self.globs[i], fields):
                    best = i
                    break
        return best
