"""`builder build`: build what is stale through the engine; results in build/results/build.json.

No presentation here: progress goes to a `BuildEvents` object (ui/ implements it with rich), and the
caller prints the summary, so the same use-case serves the CLI and the nightly.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Protocol

from builder.compat.rules import table
from builder.engine import leftovers, settings, sizes
from builder.engine.build import Builder, BuildResult, git_revision
from builder.engine.client import open_engine
from builder.engine.image_build import Run
from builder.engine.ownership import Owner
from builder.engine.port import Connect
from builder.engine.settings import BuildSettings
from builder.host import doctor
from builder.host import facts as hostinfo
from builder.lock.target import lock_state
from builder.model import results as results_files
from builder.model.plan import ImageSpec
from builder.model.sources import Sources
from builder.render.tree import expected_tree, stale_images
from builder.usecases.layers import layer_maker
from builder.util import fsio
from builder.util.errors import UserError
from builder.workspace import Workspace

BUILT = ("built", "up-to-date")


@dataclass(frozen=True)
class BuildOptions:
    jobs: int = 1
    force: bool = False
    keep_going: bool = False
    no_cache: bool = False
    sources: Sources = Sources()


class BuildEvents(Protocol):
    def begin(self, total: int) -> None: ...
    def end(self) -> None: ...
    def info(self, text: str) -> None: ...
    def line(self, image: str, text: str) -> None: ...
    def done(self, result: BuildResult) -> None: ...


def build_settings(ws: Workspace, options: BuildOptions) -> BuildSettings:
    return settings.for_sources(os.environ, options.sources, ws.matrix.ca_bundle)


def check_rendered(ws: Workspace, specs: Sequence[ImageSpec]) -> None:
    """Refuse to build unless images/<id>/ is exactly what the plan renders (no edits, no links, no extras)."""
    expected = expected_tree(specs, ws.contexts(tuple(specs)))
    differ = stale_images(ws.images_dir, expected, [s.id for s in specs])
    if differ:
        raise UserError(
            f"{ws.images_dir.name}/{differ[0]} differs from what the plan renders ({len(differ)} file(s): edited, linked, missing or "
            "stale); run `builder render` (it keeps hand edits unless --force) and build again"
        )
    for spec in specs:
        if lock_state(spec, table()) == "stale":
            raise UserError(
                f"{ws.images_dir.name}/{spec.id}/requirements.lock is stale (the image's requirements changed since it was locked); "
                f"run `builder lock --select id={spec.id}`"
            )


def build_images(
    ws: Workspace, specs: Sequence[ImageSpec], options: BuildOptions, events: BuildEvents, connect: Connect = open_engine
) -> list[BuildResult]:
    """Build what is stale; results in build/results/build.json, also when interrupted. Nothing is
    pushed here: `builder publish` pushes only tested images (builder/usecases/publish.py)."""
    check_rendered(ws, specs)
    refusal = doctor.emulation_refusal((s.platform for s in specs), hostinfo.gather_emulation())
    if refusal:  # the engine's own error comes minutes later, from the first RUN step: exec format error
        raise UserError(refusal)
    chosen = build_settings(ws, options)
    connect().close()  # fail with the one-line fix before any progress is drawn
    owner = Owner(ws.root, ws.build_dir)
    owner.register()  # `builder clean` of another checkout on this engine tells this one's images from what nobody owns
    run = Run(
        settings=chosen,
        build_dir=ws.build_dir,
        lock_dir=fsio.lock_dir(),
        revision=git_revision(ws.root),
        no_cache=options.no_cache,
        on_line=events.line,
        owner=owner,
        layers=layer_maker(specs, chosen, ws.build_dir / "wheels"),
    )
    builder = Builder(make_engine=lambda: connect(timeout=3600), run=run, contexts=ws.contexts(tuple(specs)))
    events.info(f"CA bundle: {chosen.ca_bundle or 'none'}; local wheel folders: {', '.join(map(str, chosen.pip.local_dirs)) or 'none'}")
    events.begin(len(specs))
    try:
        with leftovers.active_run():
            results = builder.build_all(specs, jobs=options.jobs, force=options.force, keep_going=options.keep_going, on_done=events.done)
    except KeyboardInterrupt:
        results_files.write_builds(ws.store.build_summary, [asdict(r) for r in builder.partial])
        raise
    finally:
        events.end()
    results = with_line_shares(connect, results, specs, ws.lined)  # base, Python, platform and tag: planned, not decided
    results_files.write_builds(ws.store.build_summary, [asdict(r) for r in results])
    return results


def line_of(spec: ImageSpec) -> tuple[str, str, str]:
    """A line: the images of one base, Python and platform (a CUDA line's base names its CUDA)."""
    return (spec.base.name, spec.python, spec.platform)


def with_line_shares(
    connect: Connect, results: Sequence[BuildResult], specs: Sequence[ImageSpec], plan: Sequence[ImageSpec]
) -> list[BuildResult]:
    """Each built image's sizes with its shared and own MB (engine/sizes.py line_shares), across
    the images of its line the engine holds (built now or before); the sizes stay as they are where
    the engine cannot say."""
    built = {r.id for r in results if r.status in BUILT and r.sizes is not None}
    lines = {line_of(s) for s in specs if s.id in built}
    if not lines:
        return list(results)
    shares: dict[str, tuple[int, int]] = {}
    engine = connect()
    try:
        for line in lines:
            peers = {s.id: sizes.layers_of(engine, s.tag, s.base.from_ref) for s in plan if line_of(s) == line}
            shares.update(sizes.line_shares({name: found for name, found in peers.items() if found is not None}))
    finally:
        engine.close()
    return [
        replace(r, sizes={**r.sizes, "shared_mb": round(shares[r.id][0] / sizes.MB, 1), "own_mb": round(shares[r.id][1] / sizes.MB, 1)})
        if r.id in built and r.id in shares and r.sizes is not None
        else r
        for r in results
    ]


def build_ok(results: Sequence[BuildResult]) -> bool:
    return all(r.status in BUILT for r in results)
