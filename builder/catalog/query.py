"""`torch=2.14 cuda=13 python=3.11`: which known-good record a person means.

The terms are builder/util/query.py's, as `--select`'s: a key is any of KnownGood.fields() (id,
stack, os, base, python, vendor, cuda, cudnn, rocm, a framework name, verdict, digest, ...);
globs, and a version matches by release prefix (2.14 matches 2.14.1, not 2.140).
"""

from __future__ import annotations

from collections.abc import Sequence

from packaging.version import Version

from builder.catalog.records import KnownGood
from builder.util.query import Term, parse_terms, value_matches

EXAMPLE = "torch=2.14 cuda=13 python=3.11"


def parse_query(text: str) -> tuple[Term, ...]:
    """The terms, each once (a repeated term asks nothing new), at most query.MAX_TERMS of them."""
    return parse_terms(text, "query", EXAMPLE)


def term_matches(term: Term, record: KnownGood) -> bool:
    found = record.fields().get(term.key)
    return found is not None and value_matches(term.value, found)


def _newest_key(record: KnownGood) -> tuple[tuple[Version, ...], str]:
    versions = []
    for _, version in sorted(record.frameworks.items()):
        try:
            versions.append(Version(version))
        except ValueError:  # InvalidVersion, or int()'s refusal of a number over 4,300 digits
            versions.append(Version("0"))
    return tuple(versions), record.published


def matching(records: Sequence[KnownGood], terms: Sequence[Term]) -> list[KnownGood]:
    """Every record every term matches, newest first (framework versions, then publish date)."""
    hits = [r for r in records if all(term_matches(t, r) for t in terms)]
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
    scored = sorted(((r, [t for t in terms if not term_matches(t, r)]) for r in records), key=lambda pair: (len(pair[1]), pair[0].id))
    related = [pair for pair in scored if len(pair[1]) < len(terms) or all(t.key in pair[0].fields() for t in pair[1])]
    return related[:limit]  # records that match some terms, or have every key asked for with other values
