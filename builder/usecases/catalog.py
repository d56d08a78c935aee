"""`builder catalog`: the known-good records, their queries, and `--verify`: each record's signed evidence and the registry's tags checked against it."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from builder.catalog.query import closest, known_keys, matching, parse_query, unknown_keys
from builder.catalog.records import KnownGood
from builder.catalog.store import Catalog
from builder.compat.rules import table
from builder.engine.registry import HttpRegistry, Registry
from builder.engine.settings import host_ca_bundle
from builder.fit.runs_on import RunsOn, runs_on
from builder.publish import signing
from builder.publish.signing import Signers
from builder.publish.verify import registry_findings, vouch
from builder.util.errors import UserError


def find(catalog: Catalog, query: str) -> list[KnownGood]:
    """Records matching the query, newest first; a key no record has is a usage error."""
    records = catalog.load()
    terms = parse_query(query)
    bad = unknown_keys(records, terms) if records else []
    if bad:
        raise UserError(f"query key {bad[0]!r} is in no record; keys: {known_keys(records)}")
    return matching(records, terms) if terms else list(records)


def runs_on_each(records: Sequence[KnownGood]) -> dict[str, RunsOn]:
    """What each record runs on (compute capabilities, min driver, arch: builder/fit/runs_on.py), by id."""
    compat = table()
    return {r.id: runs_on(r, compat) for r in records}


def no_match_message(catalog: Catalog, query: str) -> str:
    records = catalog.load()
    asked = " ".join(str(t) for t in parse_query(query))
    query = asked if len(asked) <= 200 else asked[:197] + "..."
    if not records:
        return f"the catalog ({catalog.file}) is empty: `builder publish` records known-good images"
    near = closest(records, parse_query(query))
    if not near:
        return f"no known-good image matches {query!r}; `builder catalog` lists all {len(records)}"
    hints = "; ".join(
        f"{r.id} (differs in {', '.join(f'{t.key}={r.fields().get(t.key)}' for t in missed[:5])}{', ...' if len(missed) > 5 else ''})"
        for r, missed in near
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
