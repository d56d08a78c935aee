"""What the last nightly saw, kept in build/nightly/last.json (written atomically at the end of a
run), plus what the catalog says passed: together, "passed before"."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from builder.catalog.records import KnownGood
from builder.fsio import write_atomic
from builder.nightly.compare import BAD, OK, Outcome

SCHEMA = 1


def path(build_dir: Path) -> Path:
    return build_dir / "nightly" / "last.json"


def previous(build_dir: Path, known_good: Sequence[KnownGood]) -> dict[str, str]:
    """id -> status before this run: the last nightly's, else "passed" for a known-good record."""
    seen = {r.id: "passed" for r in known_good}
    try:
        data = json.loads(path(build_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return seen  # no previous nightly (or an unreadable one): the catalog alone
    if isinstance(data, dict) and data.get("schema") == SCHEMA and isinstance(data.get("images"), list):
        for entry in data["images"]:
            if isinstance(entry, dict) and isinstance(entry.get("id"), str) and isinstance(entry.get("status"), str):
                seen[entry["id"]] = entry["status"]
    return seen


def save(build_dir: Path, date: str, outcomes: Sequence[Outcome]) -> Path:
    """Merge this run's outcomes over the last file's (a run over a selection keeps the others)."""
    target = path(build_dir)
    kept: dict[str, dict[str, object]] = {}
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("schema") == SCHEMA:
            kept = {str(e["id"]): e for e in data.get("images", []) if isinstance(e, dict) and "id" in e}
    except (OSError, ValueError):
        pass
    for o in outcomes:
        if o.status in OK or o.status in BAD:  # not-run, build-blocked: nothing learned, the last status stands
            kept[o.id] = {**o.to_json(), "date": date}
    doc = {"schema": SCHEMA, "date": date, "images": [kept[k] for k in sorted(kept)]}
    write_atomic(target, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return target
