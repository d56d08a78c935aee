"""`builder test`: smoke-test each built image in a locked-down container; results in
build/results/<id>.json and junit.xml."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from builder.engine import bootstrap, leftovers
from builder.engine.client import open_engine
from builder.engine.port import Connect, Engine, EngineFault
from builder.engine.session import remove_dead_runs_containers
from builder.host import doctor
from builder.host import facts as hostinfo
from builder.model.plan import Base, ImageSpec
from builder.model.results import GpuUse, SmokeResult
from builder.smoke.base import has_smoke_test, smoke_base
from builder.smoke.runner import merge_junit, smoke_one
from builder.util.errors import UserError
from builder.workspace import Workspace


@dataclass(frozen=True)
class TestOptions:
    __test__ = False  # not a pytest class
    gpu: str = "auto"
    timeout_s: int = 600


class TestEvents(Protocol):
    def started(self, spec: ImageSpec) -> None: ...
    def done(self, result: SmokeResult) -> None: ...


def test_images(
    ws: Workspace, specs: Sequence[ImageSpec], options: TestOptions, events: TestEvents, connect: Connect = open_engine
) -> list[SmokeResult]:
    """Smoke-test each built image; results in build/results/<id>.json and junit.xml."""
    engine = connect()
    refuse_blocked_checks(engine)
    remove_dead_runs_containers(engine)  # a killed run's smoke containers
    host = hostinfo.gather(engine=lambda: hostinfo.EngineFacts(True, engine.version(), engine.gpu_runtimes()))
    refusal = None if host.emulation is None else doctor.emulation_refusal((s.platform for s in specs), host.emulation)
    if refusal:
        engine.close()
        raise UserError(refusal)
    results_dir = ws.store.results
    results_dir.mkdir(parents=True, exist_ok=True)
    results = []
    with leftovers.active_run():
        for spec in specs:
            result = _test_one(engine, spec, host, options, results_dir, events)
            events.done(result)
            results.append(result)
    merge_junit(results_dir, [s.id for s in specs])
    return results


def refuse_blocked_checks(engine: Engine) -> None:
    """A host whose smoke checks cannot reach a container is refused before anything runs (the
    engine closed): its checks would fail on the host and record good images as failed."""
    blocked = engine.checks_blocked()
    if blocked:
        engine.close()
        raise UserError(blocked)


def checks_can_run(connect: Connect) -> None:
    """Before a build that will be tested (`builder run`, nightly): the same refusal, up front."""
    engine = connect()
    try:
        refuse_blocked_checks(engine)
    finally:  # also when the engine fails the question itself (closing twice is harmless)
        engine.close()


def _test_one(
    engine: Engine, spec: ImageSpec, host: hostinfo.HostInfo, options: TestOptions, results_dir: Path, events: TestEvents
) -> SmokeResult:
    try:
        if engine.inspect_image(spec.tag) is None:
            return not_built(spec)
        events.started(spec)
        return smoke_one(engine, spec, host, options.gpu, options.timeout_s, results_dir)
    except (EngineFault, ConnectionError) as exc:
        gpu = GpuUse(False, "the engine failed")
        return SmokeResult(
            spec.id, spec.tag, "failed", gpu, 0.0, failures=(f"engine connection failed: {' '.join(str(exc).split())[:300]}",)
        )


def not_built(spec: ImageSpec) -> SmokeResult:
    return SmokeResult(spec.id, spec.tag, "not-built", GpuUse(False, "image not built"), 0.0, failures=("run `builder build` first",))


def base_to_test(ws: Workspace, name: str) -> Base:
    """The matrix's base `name`, if it has a base-level smoke test (a bootstrapped ROCm base)."""
    bases = ws.matrix.bases
    tested = ", ".join(b.name for b in bases if has_smoke_test(b)) or "none"
    found = next((b for b in bases if b.name == name), None)
    if found is None or not has_smoke_test(found):
        why = "is not in" if found is None else "has no base-level smoke test in"
        raise UserError(f"--base {name}: the base {why} {ws.matrix_path}; bases with one (bootstrapped ROCm bases): {tested}")
    return found


def test_base(ws: Workspace, name: str, options: TestOptions, log: bootstrap.Log, connect: Connect = open_engine) -> SmokeResult:
    """Bootstrap a ROCm base (or find it current) and run its base-level smoke test: HIP checks up to
    the device call and its measured AMD fit; the result in build/results/<base>.json."""
    base = base_to_test(ws, name)
    engine = connect()
    refuse_blocked_checks(engine)
    try:
        bootstrap.ensure_base(engine, base, log=log)
        with leftovers.active_run():
            return smoke_base(engine, base, ws.store.results, options.timeout_s)
    finally:
        engine.close()
