"""One query language: the `key=value` terms of `--select`, matrix.yaml's selects and exclude
entries, and `builder pull` / `builder catalog` queries.

One module, so the same words mean the same thing wherever a person types them (before it,
`pull torch=2.14` found 2.14.1 while `--select torch=2.14` found nothing). It sits with the
foundations because spec/ (selections, exclude) and catalog/ (queries) both match with it.

Terms are `key=value`, separated by commas or spaces (`stack=torch,base=cuda12.*`,
`torch=2.14 cuda=13`); keys and values are case-insensitive; a repeated term counts once, and a
query holds at most MAX_TERMS of them. Every term must match; a term whose key the thing lacks
(a framework an image does not have) does not match. A value matches a field when

- it holds a glob character (`*`, `?`, `[`): the whole field matches it as text
  (`base=cuda12.*`, `id=numba*-cu13*`; `torch=2.1*` is text too and matches 2.14.1);
- it is a release (`2.14`, `13`, `3.11`): the field's release is that release or one of its
  `.x` (components compared whole: `2.14` matches 2.14 and 2.14.1, not 2.140; `2.1` never
  matches 2.14.1). The field's local part (`+cu130`) is ignored unless the value names one,
  which must then be equal (`torch=2.14+cu130`);
- otherwise the field is that value (`stack=torch`).

A field may hold several values (an image's index URLs): it matches when any of them does.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import NamedTuple

from builder.util.errors import UserError

GLOB_CHARS = "*?["
MAX_TERMS = 64  # more is not a query a person typed; 3,000 terms against 2,000 records took 29 s
_TERM = re.compile(r"^([a-z][a-z0-9_-]{0,63})=([a-z0-9._*?+:@/!~%\[\]-]{1,256})$")
_AROUND_EQUALS = re.compile(r"\s*=\s*")
_RELEASE_PART = re.compile(r"[0-9]+")

Fields = Mapping[str, str | tuple[str, ...]]  # a tuple matches when any of its values does


class Term(NamedTuple):
    """One `key=value` term (a pair, so a tuple of terms is a selector wherever one is expected)."""

    key: str
    value: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}"


def parse_terms(text: str, what: str, example: str, keys: Sequence[str] | None = None) -> tuple[Term, ...]:
    """The terms of `text`, each once; `what` names them in errors ("select", "query"), and a
    term that is not key=value, or (when `keys` is given) names another key, is one line."""
    words = _AROUND_EQUALS.sub("=", text).replace(",", " ").split()
    terms: dict[Term, None] = {}
    for word in words:
        found = _TERM.match(word.lower())
        if not found:
            shown = word if len(word) <= 80 else word[:77] + "..."
            raise UserError(
                f"{what} term {shown!r} is not key=value: terms must look like key=value with a short key and value, e.g. `{example}`"
            )
        key, value = found.groups()
        if keys is not None and key not in keys:
            close = difflib.get_close_matches(key, keys, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"keys: {', '.join(keys)}"
            raise UserError(f"unknown {what} key {key!r}; {hint}")
        terms[Term(key, value)] = None
        if len(terms) > MAX_TERMS:
            raise UserError(f"the {what} has more than {MAX_TERMS} terms; name only what you need (e.g. `{example}`)")
    return tuple(terms)


def is_glob(value: str) -> bool:
    return any(c in value for c in GLOB_CHARS)


@functools.lru_cache(maxsize=4096)
def exact_values(found: str) -> frozenset[str]:
    """Every value without glob characters that matches `found` (lower case): `found` itself and,
    for a version, each release prefix (with `found`'s local part too, when it has one).

    The one definition of the release-prefix rule: value_matches asks it, and SelectorIndex looks
    its members up, so the two cannot disagree."""
    found = found.lower()
    out = {found}
    release, plus, local = found.partition("+")
    # any query value, not only a version, and util/ comes before model/ (model imports util.errors), so
    # builder.model.versions is out of reach: the prefix rule splits here, each part checked as a number
    parts = release.split(".")
    for n in range(1, len(parts) + 1):
        if not _RELEASE_PART.fullmatch(parts[n - 1]):
            break
        prefix = ".".join(parts[:n])
        out.add(prefix)
        if plus:
            out.add(f"{prefix}+{local}")
    return frozenset(out)


def value_matches(wanted: str, found: str) -> bool:
    wanted = wanted.lower()
    if is_glob(wanted):
        return fnmatchcase(found.lower(), wanted)
    return wanted in exact_values(found)


def _field_matches(wanted: str, found: str | tuple[str, ...]) -> bool:
    if isinstance(found, tuple):
        return any(value_matches(wanted, one) for one in found)
    return value_matches(wanted, found)


def matches(terms: Sequence[tuple[str, str]], fields: Fields) -> bool:
    """All terms match; a term whose key `fields` lacks does not."""
    return all(key in fields and _field_matches(wanted, fields[key]) for key, wanted in terms)


class SelectorIndex:
    """The first of many selectors that matches, without trying each one (matrix.yaml can hold
    tens of thousands of exclude entries).

    Selectors are grouped by the keys they name without globs; a lookup per group, for each
    combination of the exact values the fields match (exact_values: a version is also each of
    its release prefixes), finds the candidates, and only their glob terms are then tried. Order
    is kept: `first` returns the lowest index that matches, as a linear scan would.
    """

    def __init__(self, selectors: Sequence[Sequence[tuple[str, str]]]) -> None:
        groups: dict[tuple[str, ...], dict[tuple[str, ...], list[int]]] = defaultdict(lambda: defaultdict(list))
        self.globs: list[tuple[tuple[str, str], ...]] = []
        for i, selector in enumerate(selectors):
            exact = sorted({(k, v.lower()) for k, v in selector if not is_glob(v)})
            groups[tuple(k for k, _ in exact)][tuple(v for _, v in exact)].append(i)
            self.globs.append(tuple((k, v) for k, v in selector if is_glob(v)))
        self.groups = {keys: dict(values) for keys, values in groups.items()}

    def first(self, fields: Mapping[str, str]) -> int | None:
        best: int | None = None
        for keys, by_values in self.groups.items():
            if not all(k in fields for k in keys):
                continue
            for values in _combinations([sorted(exact_values(fields[k])) for k in keys]):
                for i in by_values.get(values, ()):
                    if best is not None and i >= best:
                        break
                    if matches(self.globs[i], fields):
                        best = i
                        break
        return best


def _combinations(choices: list[list[str]]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = [()]
    for options in choices:
        out = [(*done, option) for done in out for option in options]
    return out
