"""`builder updates`: the releases newer than matrix.yaml lists, what their metadata says, whether
the rules can place them; with `apply` the placeable ones added to matrix.yaml (the nightly's first
stage too)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from builder.updates import apply as applying
from builder.updates import releases
from builder.workspace import Workspace


@dataclass(frozen=True)
class UpdatesOptions:
    apply: bool = False  # add the releases the rules can place to matrix.yaml
    max_new: int = applying.MAX_NEW  # with `apply`: at most this many per framework, the newest
    index_json_url: str | None = None  # the JSON API's base (PyPI's by default)
    ca_bundle: str | None = None


@dataclass(frozen=True)
class Updates:
    found: releases.UpdatesReport
    applied: tuple[str, ...] = ()  # matrix.yaml's edits, one line each

    def to_json(self) -> dict[str, Any]:
        return {**self.found.to_json(), "applied": list(self.applied)}


def updates(ws: Workspace, options: UpdatesOptions) -> Updates:
    found = releases.check(ws.matrix, base_url=options.index_json_url, ca_bundle=options.ca_bundle)
    edits = applying.apply(ws.matrix_path, found.releases, options.max_new) if options.apply else []
    return Updates(found, tuple(edits))
