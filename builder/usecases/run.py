"""`builder run`, the main job: images/ must be current, then build, then test what built."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from builder.engine.build import BuildResult
from builder.engine.client import open_engine
from builder.engine.port import Connect
from builder.model.plan import ImageSpec
from builder.model.results import SmokeResult, is_good
from builder.render.tree import stale
from builder.usecases.build import BUILT, BuildEvents, BuildOptions, build_images, build_ok
from builder.usecases.test import TestEvents, TestOptions, checks_can_run, test_images
from builder.util.errors import RunFailure, UserError
from builder.workspace import Workspace


class RunEvents(Protocol):
    """What `run` reports: the build's and the test's events, and each stage's results."""

    @property
    def build(self) -> BuildEvents: ...
    @property
    def test(self) -> TestEvents: ...

    def built(self, results: Sequence[BuildResult]) -> None: ...
    def tested(self, results: Sequence[SmokeResult]) -> None: ...


def run(
    ws: Workspace, specs: Sequence[ImageSpec], build: BuildOptions, test: TestOptions, events: RunEvents, connect: Connect = open_engine
) -> tuple[list[BuildResult], list[SmokeResult]]:
    """The main job: images/ must be current, then build, then test what built."""
    found = stale(ws.images_dir, ws.rendered_tree())  # renders every context once; selected() reuses them
    if found:
        raise UserError(f"images/ is stale ({len(found)} files, e.g. {found[0]}); run `builder render` and commit the result")
    checks_can_run(connect)  # no build of what could not be tested
    built = build_images(ws, specs, build, events.build, connect)
    events.built(built)
    ready = tuple(s for s, r in zip(specs, built, strict=True) if r.status in BUILT)
    try:
        tested = test_images(ws, ready, test, events.test, connect) if ready else []
    except UserError as exc:  # the engine answered for the build and went away before the tests
        raise RunFailure(f"the smoke tests could not start after the build: {exc.message}") from None
    events.tested(tested)
    return built, tested


def run_ok(specs: Sequence[ImageSpec], built: Sequence[BuildResult], tested: Sequence[SmokeResult]) -> bool:
    return build_ok(built) and len(tested) == len(specs) and all(is_good(r.verdict) for r in tested)
