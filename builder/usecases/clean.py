"""`builder clean`: this workspace's leftovers removed through the engine port (engine/leftovers.py
decides what is its own), or with `dry_run` only listed."""

from __future__ import annotations

from dataclasses import dataclass

from builder.engine import client, leftovers
from builder.engine.ownership import Owner
from builder.engine.port import Connect
from builder.workspace import Workspace


@dataclass(frozen=True)
class CleanOptions:
    stale: bool = False  # also this matrix's images the plan no longer lists
    everything: bool = False  # also its current images and the bootstrapped bases nothing else is built on
    orphans: bool = False  # also what no workspace owns any more, listed apart
    dry_run: bool = False


@dataclass(frozen=True)
class Cleaned:
    dry_run: bool
    containers: tuple[str, ...] = ()
    images: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()
    orphans: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()  # what was left alone, and why

    def count(self) -> int:
        return len(self.containers) + len(self.images) + len(self.folders) + len(self.orphans)


def clean(ws: Workspace, options: CleanOptions, connect: Connect | None = None) -> Cleaned:
    """`connect`: the engine (the docker adapter's `open_engine`, looked up when called, by default)."""
    planned = {s.tag for s in ws.decided.images} if options.stale else None
    scope = leftovers.Scope(Owner(ws.root, ws.build_dir), orphans=options.orphans)
    engine = (connect or client.open_engine)()
    try:
        removed = leftovers.clean(
            engine,
            ws.build_dir,
            scope=scope,
            repository=ws.matrix.registry,
            planned=planned,
            everything=options.everything,
            planned_lines={s.line_image for s in ws.decided.images if s.line_image} if options.stale else None,
            dry_run=options.dry_run,
        )
    finally:
        engine.close()
    return Cleaned(
        options.dry_run,
        tuple(removed.containers),
        tuple(removed.images),
        tuple(removed.folders),
        tuple(removed.orphans),
        tuple(removed.skipped),
    )
