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

from builder.engine import client as engine
from builder.engine import push, settings
from builder.engine.build import Builder, BuildResult, check_rendered, git_revision
from builder.engine.settings import BuildSettings
from builder.errors import UserError
from builder.host import facts as hostinfo
from builder.records import ImageSpec
from builder.render.tree import stale
from builder.smoke.runner import SmokeResult, merge_junit, smoke_one
from builder.workspace import Workspace

BUILT = ("built", "up-to-date")
TEST_OK = ("passed", "gpu-skipped")


@dataclass(frozen=True)
class BuildOptions:
    jobs: int = 1
    force: bool = False
    keep_going: bool = False
    push: bool = False
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


def build_images(ws: Workspace, specs: Sequence[ImageSpec], options: BuildOptions, events: BuildEvents) -> list[BuildResult]:
    """Build what is stale, push when asked; results in build/results/build.json."""
    check_rendered(specs, ws.images_dir)
    chosen = build_settings(ws, options)
    client = engine.connect()  # fail with the one-line fix before any progress is drawn; reused for --push
    builder = Builder(
        make_client=lambda: engine.connect(timeout=3600),
        settings=chosen,
        images_dir=ws.images_dir,
        build_dir=ws.build_dir,
        revision=git_revision(ws.root),
        no_cache=options.no_cache,
        on_line=events.line,
    )
    events.info(f"CA bundle: {chosen.ca_bundle or 'none'}; local wheel folders: {', '.join(map(str, chosen.pip.local_dirs)) or 'none'}")
    events.begin(len(specs))
    try:
        results = builder.build_all(specs, jobs=options.jobs, force=options.force, keep_going=options.keep_going, on_done=events.done)
    finally:
        events.end()
    if options.push:
        push_built(client, specs, results, events)
    write_results(ws, "build.json", [asdict(r) for r in results])
    return results


def push_built(client: Any, specs: Sequence[ImageSpec], results: Sequence[BuildResult], events: BuildEvents) -> None:
    by_id = {s.id: s for s in specs}
    for result in results:
        if result.status in BUILT:
            push.push_image(client, by_id[result.id].tag, log=events.info)


# -- test ---------------------------------------------------------------------------------------


def test_images(ws: Workspace, specs: Sequence[ImageSpec], options: TestOptions, events: TestEvents) -> list[SmokeResult]:
    """Smoke-test each built image; results in build/results/<id>.json and junit.xml."""
    client = engine.connect()
    host = hostinfo.gather(engine=lambda: hostinfo.EngineFacts(True, engine.engine_version(client), tuple(engine.gpu_runtimes(client))))
    results_dir = ws.build_dir / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for spec in specs:
        if engine.image_labels(client, spec.tag) is None:
            result = not_built(spec)
        else:
            events.started(spec)
            result = smoke_one(client, spec, host, options.gpu, options.timeout_s, results_dir)
        events.done(result)
        results.append(result)
    merge_junit(results_dir, [s.id for s in specs])
    return results


def not_built(spec: ImageSpec) -> SmokeResult:
    return SmokeResult(spec.id, spec.tag, "not-built", {"attached": False, "reason": "image not built"}, 0.0, failures=("run `builder build` first",))


# -- run ----------------------------------------------------------------------------------------


def run(
    ws: Workspace, specs: Sequence[ImageSpec], build: BuildOptions, test: TestOptions, events: RunEvents
) -> tuple[list[BuildResult], list[SmokeResult]]:
    """The main job: images/ must be current, then build, then test what built."""
    found = stale(ws.images_dir, ws.rendered_tree())
    if found:
        raise UserError(f"images/ is stale ({len(found)} files, e.g. {found[0]}); run `builder render` and commit the result")
    built = build_images(ws, specs, build, events.build)
    events.built(built)
    ready = tuple(s for s, r in zip(specs, built, strict=True) if r.status in BUILT)
    tested = test_images(ws, ready, test, events.test) if ready else []
    events.tested(tested)
    return built, tested


def run_ok(specs: Sequence[ImageSpec], built: Sequence[BuildResult], tested: Sequence[SmokeResult]) -> bool:
    return all(r.status in BUILT for r in built) and len(tested) == len(specs) and all(r.verdict in TEST_OK for r in tested)


def write_results(ws: Workspace, name: str, data: Any) -> None:
    path = ws.build_dir / "results" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
