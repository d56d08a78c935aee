"""Per known-good record: of its bytes above its base, how many another record of its line holds too.

A line here is the records of one base image (its ID), one Python (major.minor) and one platform.
A layer of a record is `shared` when another record of the line holds the same layer on the same
layers beneath it (the same diff IDs from the base up to it: the engine stores a layer under that
chain, so a teammate who pulled the other image does not download it again); the rest is `own`.
On a canonical CUDA line that is the NVIDIA layer, right above the base (lock/layer.py).

Computed when the catalog is shown, from each record's measured `layers` (catalog/layers.py),
because it depends on which other records the catalog holds: a record published alone shares
nothing until a sibling is published. A record without `layers` (published before records carried
them, or whose history the engine could not pair) has no share: None, never zero. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from builder.catalog.records import KnownGood
from builder.model.versions import release_line

MB = 1e6


@dataclass(frozen=True)
class Share:
    """A record's bytes above its base, split into those shared within its line and its own."""

    above_base: int
    shared: int
    shared_with: tuple[str, ...]  # the ids of the line's records that hold one of its layers, sorted

    @property
    def own(self) -> int:
        return self.above_base - self.shared

    def to_json(self) -> dict[str, Any]:
        return {
            "above_base_mb": round(self.above_base / MB, 1),
            "shared_mb": round(self.shared / MB, 1),
            "own_mb": round(self.own / MB, 1),
            "shared_with": list(self.shared_with),
        }


def line_key(record: KnownGood) -> tuple[str, str, str]:
    """The line a record shares layers within: its base image's ID, its Python's major.minor, its platform."""
    return record.base.id, release_line(record.python), record.platform


def shares(records: Sequence[KnownGood]) -> dict[str, Share]:
    """Each record with measured layers -> its Share among the given records of its line (pass the
    whole catalog, then keep the ones shown: a query's hits are not the line)."""
    chains: dict[tuple[tuple[str, str, str], tuple[str, ...]], set[str]] = {}
    for record in records:
        for chain in _chains(record):
            chains.setdefault((line_key(record), chain), set()).add(record.id)
    out = {}
    for record in records:
        if record.layers is None:
            continue
        shared, others = 0, set()
        for layer, chain in zip(record.layers, _chains(record), strict=True):
            holders = chains[(line_key(record), chain)] - {record.id}
            if holders:
                shared += layer.size
                others |= holders
        out[record.id] = Share(sum(layer.size for layer in record.layers), shared, tuple(sorted(others)))
    return out


def _chains(record: KnownGood) -> list[tuple[str, ...]]:
    """Each of its layers as the diff IDs from the first above the base up to it."""
    ids = [layer.diff_id for layer in record.layers or ()]
    return [tuple(ids[: i + 1]) for i in range(len(ids))]
