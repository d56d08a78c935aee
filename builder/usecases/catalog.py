"""`builder catalog`: the known-good records, their queries and whether the registry still holds each digest."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from builder.catalog.query import closest, known_keys, matching, parse_query, unknown_keys
from builder.catalog.records import KnownGood
from builder.catalog.store import Catalog
from builder.compat.rules import table
from builder.engine.client import open_engine
from builder.engine.port import Connect, EngineFault, NotFound
from builder.fit.runs_on import RunsOn, runs_on
from builder.publish import signing
from builder.publish.verify import verify_record
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
    detail: str


def verify(
    catalog: Catalog, records: Sequence[KnownGood], connect: Connect = open_engine, allowed_signers: Path | None = None
) -> list[Verified]:
    """Check each record's signatures (when the allowed signers file exists: --allowed-signers,
    $BUILDER_ALLOWED_SIGNERS or catalog/allowed_signers), then ask its registry (through the
    engine) whether its digest still exists."""
    allowed = signing.allowed_signers_path(catalog.root, allowed_signers)
    if allowed_signers is not None and not allowed.is_file():
        raise UserError("no such allowed signers file; give OpenSSH's allowed_signers (principal key-type key per line)", str(allowed))
    engine = connect()
    out = []
    for record in records:
        if allowed.is_file():
            try:
                verify_record(catalog.evidence, record, allowed)
            except signing.Unverified as exc:
                out.append(Verified(record, False, exc.message))
                continue
        try:
            found = engine.registry_digest(record.digest)
        except EngineFault as exc:  # the finding, per record
            message = exc.message[:200]
            missing = isinstance(exc, NotFound) or NO_MANIFEST.search(message)
            out.append(Verified(record, False, f"the registry has no such manifest (deleted?): {message}" if missing else message))
            continue
        ok = record.digest.endswith("@" + found)
        out.append(Verified(record, ok, "present" if ok else f"the registry reports {found}"))
    return out
