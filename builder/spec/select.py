"""Selections over planned images and matrix combinations, in the one query language (builder/util/query.py).

`--select EXPR` and matrix.yaml's selects (`defaults.select`, `unlocked:`, `cuda_exceptions:`,
`keep_older_gpus:`) are terms over an image's fields; `exclude` entries are terms over a
combination's. Both match with builder.util.query's rules: globs, and a version matches its release
prefix (`torch=2.14` selects 2.14.1, never 2.140).
"""

from __future__ import annotations

from builder.compat.rules import names as framework_names
from builder.model.plan import Combination, ImageSpec
from builder.util import query
from builder.util.query import matches

SELECT_FIELDS = (
    "id",
    "base",
    "stack",
    "python",
    "vendor",
    "os",
    "index",
    "platform",
    "line",
)  # and every framework of the registry in force
Selector = tuple[tuple[str, str], ...]


def select_keys() -> tuple[str, ...]:
    return (*SELECT_FIELDS, *framework_names())


def parse_select(expr: str) -> Selector:
    """Parse `stack=torch,base=cuda12.*`; an empty expression selects everything."""
    return query.parse_terms(expr, "select", "stack=torch,base=cuda12.*", select_keys())


def combination_fields(combo: Combination) -> dict[str, str]:
    fields = {
        "base": combo.base.name,
        "stack": combo.stack,
        "python": combo.python,
        "vendor": combo.base.vendor,
        "platform": combo.platform,
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
        "platform": spec.platform,
        "line": spec.line or "",  # the CUDA line whose NVIDIA layer it shares (matrix.yaml line_layers)
    }
    fields.update(spec.frameworks)
    return fields


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
