"""What the last nightly saw, kept in build/nightly/last.json (Workspace.store.history; written
atomically at the end of a run), plus what the catalog says passed: together, "passed before"."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from builder.catalog.records import KnownGood
from builder.model.results import is_good
from builder.nightly.compare import BAD, Outcome
from builder.util.errors import UserError
from builder.util.fsio import MiB, dump_json, read_json, write_atomic

SCHEMA = 1
MAX_BYTES = 16 * MiB  # one short entry per image


def _read(target: Path) -> Any:
    """The last run's document, or None when there is none or it cannot be trusted (a FIFO, a
    device, JSON nested 200k deep, NaN): history is a hint, the catalog stands without it."""
    try:
        return read_json(target, MAX_BYTES, "nightly history")
    except UserError:
        return None


def previous(target: Path, known_good: Sequence[KnownGood]) -> dict[str, str]:
    """id -> status before this run: the last nightly's (`target`), else "passed" for a known-good record."""
    seen = {r.id: "passed" for r in known_good}
    data = _read(target)  # None: no previous nightly (or an unreadable one): the catalog alone
    if isinstance(data, dict) and data.get("schema") == SCHEMA and isinstance(data.get("images"), list):
        for entry in data["images"]:
            if isinstance(entry, dict) and isinstance(entry.get("id"), str) and isinstance(entry.get("status"), str):
                seen[entry["id"]] = entry["status"]
    return seen


def save(target: Path, date: str, outcomes: Sequence[Outcome]) -> Path:
    """Merge this run's outcomes over the last file's (a run over a selection keeps the others)."""
    kept: dict[str, dict[str, object]] = {}
    data = _read(target)
    if isinstance(data, dict) and data.get("schema") == SCHEMA and isinstance(data.get("images"), list):
        kept = {e["id"]: e for e in data["images"] if isinstance(e, dict) and isinstance(e.get("id"), str)}
    for o in outcomes:
        if is_good(o.status) or o.status in BAD:  # not-run, build-blocked: nothing learned, the last status stands
            kept[o.id] = {**o.to_json(), "date": date}
    doc = {"schema": SCHEMA, "date": date, "images": [kept[k] for k in sorted(kept)]}
    write_atomic(target, dump_json(doc))
    return target
