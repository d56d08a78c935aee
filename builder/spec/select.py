"""Selectors, in one place: `key=glob` terms matched against the fields of an image or a combination.

`--select EXPR` (comma-separated terms over planned images) and matrix.yaml's include/exclude
entries (terms over combinations) both match with `matches`: every term must match, and a
framework term never matches something without that framework.
"""

from __future__ import annotations

import difflib
from fnmatch import fnmatchcase

from builder.errors import UserError
from builder.records import FRAMEWORKS, Combination, ImageSpec

SELECT_KEYS = ("id", "base", "stack", "python", "vendor", "os", *FRAMEWORKS)
Selector = tuple[tuple[str, str], ...]


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
        if key not in SELECT_KEYS:
            close = difflib.get_close_matches(key, SELECT_KEYS, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"keys: {', '.join(SELECT_KEYS)}"
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


def fields_of(spec: ImageSpec) -> dict[str, str]:
    fields = {
        "id": spec.id,
        "base": spec.base.name,
        "stack": spec.stack,
        "python": spec.python,
        "vendor": spec.base.vendor,
        "os": spec.base.os,
    }
    fields.update(spec.frameworks)
    return fields


def matches(selector: Selector, fields: dict[str, str]) -> bool:
    """All terms must match; a framework term does not match an image without that framework."""
    return all(key in fields and fnmatchcase(fields[key], pattern) for key, pattern in selector)


def select(images: tuple[ImageSpec, ...], selector: Selector) -> tuple[ImageSpec, ...]:
    return tuple(spec for spec in images if matches(selector, fields_of(spec)))
