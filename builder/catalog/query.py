"""`torch=2.14 cuda=13 python=3.11`: which known-good record a person means.

Terms are `key=value`, separated by spaces or commas; a key is any of KnownGood.fields() (id,
stack, os, base, python, vendor, cuda, cudnn, rocm, a framework name, verdict, digest, ...).
A value with `*`/`?` is a glob; a version matches by release prefix (2.14 matches 2.14.1, not
2.140; a local part like +cu130 is ignored); anything else must be equal (case-insensitive).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from builder.catalog.records import KnownGood
from builder.errors import UserError

TERM = re.compile(r"^([a-z][a-z0-9_-]{0,63})=([a-z0-9._*?+:@/-]{1,256})$")
MAX_TERMS = 64  # more is not a query a person typed; 3,000 terms against 2,000 records took 29 s
VERSIONISH = re.compile(r"^\d+(\.\d+)*([a-z0-9.+-]*)$")


@dataclass(frozen=True)
class Term:
    key: str
    value: str

    def matches(self, record: KnownGood) -> bool:
        found = record.fields().get(self.key)
        return found is not None and value_matches(self.value, found)

    def __str__(self) -> str:
        return f"{self.key}={self.value}"


def parse_query(text: str) -> tuple[Term, ...]:
    """The terms, each once (a repeated term asks nothing new), at most MAX_TERMS of them."""
    words = text.replace(",", " ").split()
    terms: dict[Term, None] = {}
    for word in words:
        found = TERM.match(word.strip().lower())
        if not found:
            shown = word if len(word) <= 80 else word[:77] + "..."
            raise UserError(f"query term {shown!r} is not key=value with a short key and value (e.g. `torch=2.14 cuda=13 python=3.11`)")
        terms[Term(found.group(1), found.group(2))] = None
        if len(terms) > MAX_TERMS:
            raise UserError(f"the query has more than {MAX_TERMS} terms; name only what you need (e.g. `torch=2.14 cuda=13 python=3.11`)")
    return tuple(terms)


def value_matches(wanted: str, found: str) -> bool:
    wanted, found = wanted.lower(), found.lower()
    if any(ch in wanted for ch in "*?["):
        return fnmatch.fnmatchcase(found, wanted)
    if VERSIONISH.match(wanted) and VERSIONISH.match(found):
        want = wanted.split("+")[0].split(".")
        have = found.split("+")[0].split(".")
        return have[: len(want)] == want
    return wanted == found


def _newest_key(record: KnownGood) -> tuple[tuple[Version, ...], str]:
    versions = []
    for _, version in sorted(record.frameworks.items()):
        try:
            versions.append(Version(version))
        except InvalidVersion:
            versions.append(Version("0"))
    return tuple(versions), record.published


def matching(records: Sequence[KnownGood], terms: Sequence[Term]) -> list[KnownGood]:
    """Every record every term matches, newest first (framework versions, then publish date)."""
    hits = [r for r in records if all(t.matches(r) for t in terms)]
    return sorted(hits, key=_newest_key, reverse=True)


def unknown_keys(records: Sequence[KnownGood], terms: Sequence[Term]) -> list[str]:
    known = {key for r in records for key in r.fields()}
    return [t.key for t in terms if t.key not in known]


def known_keys(records: Sequence[KnownGood], limit: int = 40) -> str:
    """The keys a query may name, for a message: at most `limit` of them, then how many more."""
    keys = sorted({k for r in records for k in r.fields()})
    return ", ".join(keys[:limit]) + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def closest(records: Sequence[KnownGood], terms: Sequence[Term], limit: int = 3) -> list[tuple[KnownGood, list[Term]]]:
    """The records that miss the fewest terms, with the terms each misses (for "no match" messages)."""
    scored = sorted(((r, [t for t in terms if not t.matches(r)]) for r in records), key=lambda pair: (len(pair[1]), pair[0].id))
    related = [pair for pair in scored if len(pair[1]) < len(terms) or all(t.key in pair[0].fields() for t in pair[1])]
    return related[:limit]  # records that match some terms, or have every key asked for with other values
