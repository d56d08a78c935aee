"""`builder test`: smoke-test each built image in a locked-down container; results in
build/results/<id>.json and junit.xml."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from builder.engine import client as engine
from builder.engine import leftovers
from builder.host import facts as hostinfo
from builder.records import ImageSpec
from builder.results import GpuUse, SmokeResult
from builder.smoke.runner import merge_junit, smoke_one
from builder.workspace import Workspace


@dataclass(frozen=True)
class TestOptions:
    __test__ = False  # not a pytest class
    gpu: str = "auto"
    timeout_s: int = 600


class TestEvents(Protocol):
    def started(self, spec: ImageSpec) -> None: ...
    def done(self, result: SmokeResult) -> None: ...


def test_images(ws: Workspace, specs: Sequence[ImageSpec], options: TestOptions, events: TestEvents) -> list[SmokeResult]:
    """Smoke-test each built image; results in build/results/<id>.json and junit.xml."""
    client = engine.connect()
    engine.remove_leftover_containers(client)  # a killed run's smoke containers
    host = hostinfo.gather(engine=lambda: hostinfo.EngineFacts(True, engine.engine_version(client), tuple(engine.gpu_runtimes(client))))
    results_dir = ws.store.results
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
        gpu = GpuUse(False, "the engine failed")
        return SmokeResult(
            spec.id, spec.tag, "failed", gpu, 0.0, failures=(f"engine connection failed: {' '.join(str(exc).split())[:300]}",)
        )


def not_built(spec: ImageSpec) -> SmokeResult:
    return SmokeResult(spec.id, spec.tag, "not-built", GpuUse(False, "image not built"), 0.0, failures=("run `builder build` first",))
