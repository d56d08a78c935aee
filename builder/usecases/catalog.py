"""`builder catalog`: the known-good records, their queries, and `--verify`: each record's signed evidence and the registry's tags checked against it."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.catalog.indexes import IndexRecord, image_name
from builder.catalog.query import closest, known_keys, matching, parse_query, unknown_keys
from builder.catalog.records import KnownGood
from builder.catalog.shares import Share, shares
from builder.catalog.store import Catalog
from builder.compat import lifecycle
from builder.compat.rules import table
from builder.engine.registry import HttpRegistry, Registry
from builder.engine.settings import host_ca_bundle
from builder.fit.runs_on import RunsOn, runs_on
from builder.model import reproduced
from builder.model.reproduced import Verdict
from builder.publish import signing
from builder.publish.signing import Signers
from builder.publish.verify import registry_findings, vouch
from builder.util.errors import UserError
from builder.util.query import Term


@dataclass(frozen=True)
class Search:
    """A query's terms against the catalog's records, each read once: what pull, catalog and fit share."""

    file: Path  # the catalog's known-good.json, for messages
    terms: tuple[Term, ...]
    records: tuple[KnownGood, ...]  # every record
    hits: tuple[KnownGood, ...]  # those every term matches, newest first (every record for no terms)

    def no_match(self) -> str:
        return missed(self.file, self.records, self.terms)


def search(catalog: Catalog, terms: tuple[Term, ...]) -> Search:
    """The records matching the terms, newest first; a key no record has is a usage error."""
    records = catalog.load()
    bad = unknown_keys(records, terms) if records else []
    if bad:
        raise UserError(f"query key {bad[0]!r} is in no record; keys: {known_keys(records)}")
    return Search(catalog.file, terms, records, tuple(matching(records, terms)) if terms else records)


def find(catalog: Catalog, query: str) -> list[KnownGood]:
    return list(search(catalog, parse_query(query)).hits)


def runs_on_each(records: Sequence[KnownGood]) -> dict[str, RunsOn]:
    """What each record runs on (compute capabilities, min driver, arch: builder/fit/runs_on.py), by id."""
    compat = table()
    return {r.id: runs_on(r, compat) for r in records}


def record_end_of_life(record: KnownGood) -> tuple[lifecycle.EndOfLife, ...]:
    return lifecycle.for_image(record.python, record.os, record.frameworks)


def no_match_message(catalog: Catalog, query: str) -> str:
    return missed(catalog.file, catalog.load(), parse_query(query))


def missed(file: Path, records: Sequence[KnownGood], terms: Sequence[Term]) -> str:
    """Why nothing matched: an empty catalog, or the closest records and how each differs."""
    asked = " ".join(str(t) for t in terms)
    query = asked if len(asked) <= 200 else asked[:197] + "..."
    if not records:
        return f"the catalog ({file}) is empty: `builder publish` records known-good images"
    near = closest(records, terms)
    if not near:
        return f"no known-good image matches {query!r}; `builder catalog` lists all {len(records)}"
    hints = "; ".join(
        f"{r.id} (differs in {', '.join(f'{t.key}={r.fields().get(t.key)}' for t in off[:5])}{', ...' if len(off) > 5 else ''})"
        for r, off in near
    )
    return f"no known-good image matches {query!r}; closest: {hints}"


NO_MANIFEST = re.compile(r"manifest unknown|manifest for .* not found|name unknown|repository .* not found|404 Client Error", re.IGNORECASE)


@dataclass(frozen=True)
class Verified:
    record: KnownGood
    ok: bool
    detail: str  # what was verified (signatures, tags), or the first finding
    findings: tuple[str, ...] = ()  # every finding, one line each (a tag named in each registry one)


def verify(catalog: Catalog, records: Sequence[KnownGood], chosen: Signers, registry: Registry | None = None) -> list[Verified]:
    """Check each record: its signed local evidence against `chosen` (publish/verify.py's `signers`:
    the allowed signers, or why there are none), then the registry's side (its immutable and
    floating tags, its .sbom and .att evidence tags) against the record and that evidence. No
    engine: the local evidence is checked even where none runs, and the registry is read through
    its own HTTP API (builder/engine/registry.py)."""
    talk = registry or HttpRegistry(ca_bundle=host_ca_bundle(os.environ))  # opens nothing until asked
    out = []
    for record in records:
        findings: list[str] = []
        try:
            said = vouch(catalog, record, chosen)
        except signing.Unverified as exc:
            said, findings = "", [exc.message]
        findings += registry_findings(talk, catalog, record)
        detail = findings[0] if findings else f"{said}; the registry's tags match"
        out.append(Verified(record, not findings, detail, tuple(findings)))
    return out


@dataclass(frozen=True)
class Listing:
    """`builder catalog`: the records a query matches, newest first, and what is known of each: what
    it runs on, its lines' ends of life and support windows, its name's multi-platform index, and
    with --verify its evidence checked."""

    records: tuple[KnownGood, ...]
    runs_on: Mapping[str, RunsOn]  # by record id
    end_of_life: Mapping[str, tuple[lifecycle.EndOfLife, ...]]  # by record id
    indexes: Mapping[str, IndexRecord]  # by image name, of the listed records' names
    verified: tuple[Verified, ...] | None = None  # None: not asked (--verify)
    no_match: str = ""  # a query that matched nothing: why, and what is closest
    reproduced: Mapping[str, Verdict] = field(default_factory=dict)  # `builder reproduce`'s verdicts of the listed digests, by id
    # by id, of the listed records that carry their layers: bytes above the base shared with another
    # record of their line in the whole catalog, and their own (catalog/shares.py); absent: not measured
    shares: Mapping[str, Share] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.no_match and all(v.ok for v in self.verified or ())

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "images": [r.to_json() for r in self.records],
            "runs_on": {i: r.to_json() for i, r in self.runs_on.items()},
            "end_of_life": {i: lifecycle.to_json(dates) for i, dates in self.end_of_life.items()},
            "support_window": {i: lifecycle.window_json(dates) for i, dates in self.end_of_life.items()},
            "indexes": {name: index.to_json() for name, index in self.indexes.items()},
            "shares": {i: share.to_json() for i, share in sorted(self.shares.items())},
        }
        if self.reproduced:
            data["reproduced"] = {i: v.to_json() for i, v in sorted(self.reproduced.items())}
        if self.verified is not None:
            data["verify"] = {v.record.id: {"ok": v.ok, "detail": v.detail, "findings": list(v.findings)} for v in self.verified}
        return data


def listing(catalog: Catalog, words: Sequence[str], chosen: Signers | None, indexes: bool = False, verdicts: Path | None = None) -> Listing:
    """The records the query's words match; with `chosen` (--verify) each one's evidence and tags
    checked; with `indexes` the multi-platform indexes of their names (the JSON lists them); with
    `verdicts` (build/results/reproduced.json) `builder reproduce`'s verdict of each record's digest."""
    found = search(catalog, parse_query(" ".join(words)))
    records = found.hits
    checked = tuple(verify(catalog, records, chosen)) if chosen is not None else None
    names = {image_name(r.id, r.platform) for r in records}
    held = {name: index for name, index in catalog.indexes().items() if name in names} if indexes else {}
    eol = {r.id: record_end_of_life(r) for r in records}
    known = reproduced.load(verdicts) if verdicts is not None else {}
    rebuilt = {r.id: v for r in records if (v := reproduced.current(known, r.id, r.digest)) is not None}
    shown = {r.id for r in records}
    split = {i: share for i, share in shares(found.records).items() if i in shown}  # among the whole catalog's lines
    return Listing(records, runs_on_each(records), eol, held, checked, found.no_match() if words and not records else "", rebuilt, split)
