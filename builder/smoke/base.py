"""The base-level smoke test of a bootstrapped ROCm base: its HIP checks and its measured AMD fit.

A base carries no framework (Debian 13's ROCm 5.7 has none published for it), so it is not tested
like an image (checks/ and hello-gpu): one locked-down container of the base itself, run as nobody
(the base has no user of its own), no network, no GPU, read-only root, runs probes/hip_base.py and
fit/offload.py's scan over its library folder with the base's own Python. smoke/hip.py reads both.
Results: build/results/<base>.json (a SmokeResult with `hip_checks` and `amd_fit`), and the two raw
outputs under build/results/<base>/.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

from builder.engine.bootstrap import HASH_LABEL
from builder.engine.port import Container, ContainerSpec, Engine, ExecResult, NotFound
from builder.fit import offload
from builder.model import results
from builder.model.amd_fit import AmdFit
from builder.model.plan import AMD64, Base
from builder.model.results import GpuUse, HipCheck, SmokeResult, TestCounts, TestedOn
from builder.probes import hip_base
from builder.smoke import hip
from builder.smoke.args import MEMORY_LIMIT, PIDS_LIMIT, TMPFS
from builder.util.errors import RunFailure, UserError
from builder.util.text import utc_stamp

PROBE = Path(hip_base.__file__).read_text(encoding="utf-8")
SCAN = Path(offload.__file__).read_text(encoding="utf-8")
NOBODY = "65534:65534"
LIBRARIES = {AMD64: "/usr/lib/x86_64-linux-gnu", "linux/arm64": "/usr/lib/aarch64-linux-gnu"}  # Debian's multiarch folders
NO_GPU = "a base-level smoke test: its container is given no GPU, so its HIP checks stop at the device call"
TIMEOUT_S = 300


def has_smoke_test(base: Base) -> bool:
    """The bases tested at base level: a bootstrapped ROCm base (its ROCm is Debian's, inside it)."""
    return base.vendor == "rocm" and base.bootstrap is not None


def container_spec(base: Base, timeout_s: int) -> ContainerSpec:
    """As locked down as an image's smoke container (smoke/args.py), and never root."""
    return ContainerSpec(
        image=base.local_tag,
        command=("sleep", str(timeout_s + 60)),
        environment={"HOME": "/tmp", "XDG_CACHE_HOME": "/tmp/.cache"},
        labels={"io.builder.image-id": base.name},
        tmpfs=dict(TMPFS),
        mem_limit=MEMORY_LIMIT,
        pids_limit=PIDS_LIMIT,
        platform=base.platform,
        user=NOBODY,
    )


@dataclass(frozen=True)
class BaseRun:
    """What the two commands in the base's container answered."""

    probe: ExecResult
    scan: ExecResult


def _python(timeout_s: int, script: str, *args: str) -> list[str]:
    return ["timeout", "-s", "KILL", str(timeout_s), "python3", "-I", "-c", script, *args]


def run_in(container: Container, base: Base, timeout_s: int) -> BaseRun:
    probe = container.exec(_python(timeout_s, PROBE, *hip.TARGETS))
    scan = container.exec(_python(timeout_s, SCAN, LIBRARIES.get(base.platform, LIBRARIES[AMD64])))
    return BaseRun(probe, scan)


def _last_line(done: ExecResult) -> str:
    return (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1][:300]


def checks_of(done: ExecResult) -> tuple[HipCheck, ...]:
    """The HIP checks of the probe's run; a probe that did not answer is one failed check saying why."""
    if done.returncode != 0:
        return (HipCheck("hip-probe", False, f"the HIP probe exited {done.returncode}: {_last_line(done)}"),)
    try:
        return hip.parse(done.stdout.decode(errors="replace"))
    except RunFailure as exc:
        return (HipCheck("hip-probe", False, str(exc)),)


def fit_of(done: ExecResult, rocm: str | None) -> tuple[AmdFit | None, str]:
    """The base's measured AMD fit, or None and why."""
    if done.returncode != 0:
        return None, f"scanning the code objects exited {done.returncode}: {_last_line(done)}"
    try:
        return hip.amd_fit(done.stdout.decode(errors="replace"), rocm), ""
    except RunFailure as exc:
        return None, str(exc)


def result_of(base: Base, run: BaseRun, seconds: float, tested: TestedOn) -> SmokeResult:
    """The typed result: its counts and exit code give the verdict smoke/hip.py gives (the reader recomputes it)."""
    checks = checks_of(run.probe)
    fit, fit_error = fit_of(run.scan, base.version)
    bad = [c for c in checks if not c.ok]
    verdict = hip.verdict(checks)
    return SmokeResult(
        id=base.name,
        tag=base.local_tag,
        verdict=verdict,
        gpu=GpuUse(False, NO_GPU),
        seconds=round(seconds, 2),
        tests=TestCounts(tests=len(checks), failures=len(bad)),
        failures=tuple(f"{c.name}: {c.detail}" for c in bad),
        date=utc_stamp(),
        host=tested,
        returncode=0 if verdict == "gpu-skipped" else 1,
        vendor=base.vendor,
        platform=base.platform,
        hip_checks=checks,
        amd_fit=fit,
        fit_error=fit_error,
    )


def smoke_base(engine: Engine, base: Base, results_dir: Path, timeout_s: int = TIMEOUT_S) -> SmokeResult:
    """Test one bootstrapped ROCm base (already made: engine/bootstrap.py); the result written and returned."""
    if not has_smoke_test(base):
        raise UserError(f"base '{base.name}' has no base-level smoke test: only a bootstrapped ROCm base has one")
    started = time.monotonic()
    image = engine.inspect_image(base.local_tag)
    if image is None:
        raise NotFound(f"No such image: {base.local_tag} (bootstrap the base first)")
    with engine.container(container_spec(base, timeout_s)) as container:
        container.start()
        run = run_in(container, base, timeout_s)
    work = results_dir / base.name
    work.mkdir(parents=True, exist_ok=True)
    for name, done in (("hip-probe.json", run.probe), ("code-objects.json", run.scan)):
        record = {"rc": done.returncode, "stdout": done.stdout.decode(errors="replace"), "stderr": done.stderr.decode(errors="replace")}
        (work / name).write_text(json.dumps(record), encoding="utf-8")
    tested = TestedOn(gpu="no GPU (none given to a base-level smoke test)", engine=engine.version())
    result = result_of(base, run, time.monotonic() - started, tested)
    result = replace(result, content_hash=image.labels.get(HASH_LABEL, ""), image_id=image.id)
    results.write(results_dir, result)
    return result
