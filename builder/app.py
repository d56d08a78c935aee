"""The use-cases behind `build`, `test` and `run`: each takes a workspace, the selected images and
options, drives the engine modules, writes results under build/, and returns typed results.

No presentation here: progress goes to an `Events` object (ui/ implements it with rich), and the
caller prints the summary, so the same use-case serves the CLI and the nightly loop.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from builder.compat.facts import table
from builder.engine import client as engine
from builder.engine import leftovers, settings
from builder.engine.build import Builder, BuildResult, git_revision
from builder.engine.image_build import Run
from builder.engine.settings import BuildSettings
from builder.errors import RunFailure, UserError
from builder.host import facts as hostinfo
from builder.lock.target import lock_state
from builder.records import ImageSpec
from builder.render.tree import LOCK_DIR, expected_tree, stale, stale_images
from builder.smoke.runner import SmokeResult, merge_junit, smoke_one
from builder.workspace import Workspace

BUILT = ("built", "up-to-date")
TEST_OK = ("passed", "gpu-skipped")


@dataclass(frozen=True)
class BuildOptions:
    jobs: int = 1
    force: bool = False
    keep_going: bool = False
    ca_bundle: str | None = None
    use_host: bool = True
    wheelhouse: tuple[str, ...] = ()
    index_url: str | None = None
    no_cache: bool = False
    extra_index_urls: tuple[str, ...] = ()


@dataclass(frozen=True)
class TestOptions:
    gpu: str = "auto"
    timeout_s: int = 600


class BuildEvents(Protocol):
    def begin(self, total: int) -> None: ...
    def end(self) -> None: ...
    def info(self, text: str) -> None: ...
    def line(self, image: str, text: str) -> None: ...
    def done(self, result: BuildResult) -> None: ...


class TestEvents(Protocol):
    def started(self, spec: ImageSpec) -> None: ...
    def done(self, result: SmokeResult) -> None: ...


class RunEvents(Protocol):
    """What `run` reports: the build's and the test's events, and each stage's results."""

    @property
    def build(self) -> BuildEvents: ...
    @property
    def test(self) -> TestEvents: ...

    def built(self, results: Sequence[BuildResult]) -> None: ...
    def tested(self, results: Sequence[SmokeResult]) -> None: ...


# -- build --------------------------------------------------------------------------------------


def build_settings(ws: Workspace, options: BuildOptions) -> BuildSettings:
    return settings.resolve(
        os.environ,
        ca_bundle=options.ca_bundle,
        matrix_ca_bundle=ws.matrix.ca_bundle,
        use_host=options.use_host,
        wheelhouse=options.wheelhouse,
        index_url=options.index_url,
        extra_index_urls=options.extra_index_urls,
    )


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


def build_images(ws: Workspace, specs: Sequence[ImageSpec], options: BuildOptions, events: BuildEvents) -> list[BuildResult]:
    """Build what is stale; results in build/results/build.json, also when interrupted. Nothing is
    pushed here: `builder publish` pushes only tested images (builder/deliver.py)."""
    check_rendered(ws, specs)
    chosen = build_settings(ws, options)
    engine.connect()  # fail with the one-line fix before any progress is drawn
    run = Run(
        settings=chosen,
        build_dir=ws.build_dir,
        lock_dir=LOCK_DIR,
        revision=git_revision(ws.root),
        no_cache=options.no_cache,
        on_line=events.line,
    )
    builder = Builder(make_client=lambda: engine.connect(timeout=3600), run=run, contexts=ws.contexts(tuple(specs)))
    events.info(f"CA bundle: {chosen.ca_bundle or 'none'}; local wheel folders: {', '.join(map(str, chosen.pip.local_dirs)) or 'none'}")
    events.begin(len(specs))
    try:
        with leftovers.active_run():
            results = builder.build_all(specs, jobs=options.jobs, force=options.force, keep_going=options.keep_going, on_done=events.done)
    except KeyboardInterrupt:
        write_results(ws, "build.json", [asdict(r) for r in builder.partial])
        raise
    finally:
        events.end()
    write_results(ws, "build.json", [asdict(r) for r in results])
    return results


def build_ok(results: Sequence[BuildResult]) -> bool:
    return all(r.status in BUILT for r in results)


# -- test ---------------------------------------------------------------------------------------


def test_images(ws: Workspace, specs: Sequence[ImageSpec], options: TestOptions, events: TestEvents) -> list[SmokeResult]:
    """Smoke-test each built image; results in build/results/<id>.json and junit.xml."""
    client = engine.connect()
    engine.remove_leftover_containers(client)  # a killed run's smoke containers
    host = hostinfo.gather(engine=lambda: hostinfo.EngineFacts(True, engine.engine_version(client), tuple(engine.gpu_runtimes(client))))
    results_dir = ws.build_dir / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    results = []
    with leftovers.active_run():
        for spec in specs:
            result = _test_one(client, spec, host, options, results_dir, events)
            events.done(result)
            results.append(result)
    merge_junit(results_dir, [s.id for s in specs])
    return results


def _test_one(client: Any, spec: ImageSpec, host: Any, options: TestOptions, results_dir: Any, events: TestEvents) -> SmokeResult:
    try:
        if engine.image_labels(client, spec.tag) is None:
            return not_built(spec)
        events.started(spec)
        return smoke_one(client, spec, host, options.gpu, options.timeout_s, results_dir)
    except Exception as exc:
        if not engine.is_engine_fault(exc):
            raise
        gpu = {"attached": False, "reason": "the engine failed"}
        return SmokeResult(spec.id, spec.tag, "failed", gpu, 0.0, failures=(f"engine connection failed: {' '.join(str(exc).split())[:300]}",))


def not_built(spec: ImageSpec) -> SmokeResult:
    return SmokeResult(spec.id, spec.tag, "not-built", {"attached": False, "reason": "image not built"}, 0.0, failures=("run `builder build` first",))


# -- run ----------------------------------------------------------------------------------------


def run(
    ws: Workspace, specs: Sequence[ImageSpec], build: BuildOptions, test: TestOptions, events: RunEvents
) -> tuple[list[BuildResult], list[SmokeResult]]:
    """The main job: images/ must be current, then build, then test what built."""
    found = stale(ws.images_dir, ws.rendered_tree())  # renders every context once; selected() reuses them
    if found:
        raise UserError(f"images/ is stale ({len(found)} files, e.g. {found[0]}); run `builder render` and commit the result")
    built = build_images(ws, specs, build, events.build)
    events.built(built)
    ready = tuple(s for s, r in zip(specs, built, strict=True) if r.status in BUILT)
    try:
        tested = test_images(ws, ready, test, events.test) if ready else []
    except UserError as exc:  # the engine answered for the build and went away before the tests
        raise RunFailure(f"the smoke tests could not start after the build: {exc.message}") from None
    events.tested(tested)
    return built, tested


def run_ok(specs: Sequence[ImageSpec], built: Sequence[BuildResult], tested: Sequence[SmokeResult]) -> bool:
    return build_ok(built) and len(tested) == len(specs) and all(r.verdict in TEST_OK for r in tested)


def write_results(ws: Workspace, name: str, data: Any) -> None:
    path = ws.build_dir / "results" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
