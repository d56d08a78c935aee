"""The smoke-test runner: one locked-down container per image, the checks (checks/) run against it, results on disk.

Every container goes through the engine port's `container` (tracked: labelled as this run's), so it
is removed after a pass, a failure, a timeout or Ctrl-C. Results: build/results/<id>.json, build/results/junit.xml.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import filelock

from builder.compat.rules import table
from builder.engine.diagnose import diagnose_text
from builder.engine.port import Container, Engine, NotFound
from builder.fit import measure
from builder.host.facts import HostInfo, host_machine, runs_emulated
from builder.model import probe_report, results
from builder.model.measured_fit import MeasuredFit
from builder.model.plan import ImageSpec
from builder.model.probe_report import ProbeReport
from builder.model.results import CudaCheck, Diagnosed, GpuUse, SmokeResult, TestCounts, TestedOn, verdict_of
from builder.render.formats import image_entry
from builder.render.labels import HASH_LABEL
from builder.smoke.args import GpuAccess, gpu_access, run_spec
from builder.util.errors import RunFailure, UserError
from builder.util.fsio import read_json
from builder.util.text import utc_stamp

CHECKS_DIR = Path(__file__).resolve().parent / "checks"


def _junit_counts(path: Path) -> tuple[TestCounts, list[str]]:
    if not path.exists():
        return TestCounts(), []
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failures = []
    for suite in suites:
        for key in counts:
            counts[key] += int(suite.get(key, "0"))
        for case in suite.iter("testcase"):
            for bad in list(case.findall("failure")) + list(case.findall("error")):
                message = (bad.get("message") or "").splitlines()[0:1]
                failures.append(f"{case.get('name')}: {message[0] if message else 'failed'}"[:400])
    return TestCounts(**counts), failures


def _diagnoses(probe: ProbeReport | None, failures: list[str]) -> list[Diagnosed]:
    out = []
    for name, result in probe.frameworks.items() if probe else ():
        if result.status == "failed" and result.diagnosis:
            out.append(Diagnosed(name, result.diagnosis.cause, result.diagnosis.fix))
    if probe and not probe.cuda.ok and probe.cuda.diagnosis:
        out.append(Diagnosed("cuda libraries", probe.cuda.diagnosis.cause, probe.cuda.diagnosis.fix))
    if not out:
        for failure in failures:
            found = diagnose_text(failure)
            if found:
                out.append(Diagnosed("", found.cause, found.fix))
    return out


NATIVE_CRASH = "the check process was killed by "  # hello_gpu.DIAGNOSES' cause for a signal
EMULATED_CRASH = (
    "under qemu-user emulation, which says nothing of the image: qemu-user passes this "
    "x86_64 host's /proc/cpuinfo through, and torch's CPU probe (cpuinfo) crashes parsing it on import "
    "(pytorch/pytorch#188255); other native code that probes the CPU can crash the same way"
)
EMULATED_FIX = "Run `builder test` for this image on an arm64 host (the image built here is the same); it stays unpublished until then."


def emulated_diagnoses(diagnoses: tuple[Diagnosed, ...]) -> tuple[Diagnosed, ...]:
    """An emulated run's crash is the emulation's until an arm64 host says otherwise."""
    return tuple(
        replace(d, cause=f"{NATIVE_CRASH}{d.cause.removeprefix(NATIVE_CRASH).split(':')[0]} {EMULATED_CRASH}", fix=EMULATED_FIX)
        if d.cause.startswith(NATIVE_CRASH)
        else d
        for d in diagnoses
    )


def cuda_checks(probe: ProbeReport | None) -> list[CudaCheck]:
    """Every CUDA check the probe ran without a GPU: per framework (built-for, compile) and per library."""
    if probe is None:
        return []
    out = [CudaCheck(name, c.name, c.ok, c.detail) for name, result in sorted(probe.frameworks.items()) for c in result.offline]
    return out + [CudaCheck("", c.name, c.ok, c.detail) for c in probe.cuda.checks]


def read_probe(path: Path) -> ProbeReport | None:
    """The probe's report the checks saved (probe.json); None when they saved none. One of the
    wrong shape is a one-line UserError naming the file."""
    if not path.exists():
        return None
    return probe_report.from_json(read_json(path, results.LIMIT, "probe report"), str(path))


def probe_command(timeout_s: int, libraries: dict[str, str]) -> list[str]:
    """hello-gpu inside the container, killed by `timeout` at the limit; it loads the CUDA libraries the
    lock pins (image.json "libraries") and checks their versions against it."""
    expect = [arg for name, version in sorted(libraries.items()) for arg in ("--expect", f"{name}={version}")]
    return ["timeout", "-s", "KILL", str(timeout_s), "hello-gpu", "--json", "--timeout", str(max(30, timeout_s // 2)), *expect]


def run_probe(container: Container, timeout_s: int, libraries: dict[str, str], out: Path) -> None:
    """Run the probe with `exec` and write {rc, stdout, stderr} to `out` atomically, whatever happens."""
    record: dict[str, Any] = {"rc": -1, "stdout": "", "stderr": ""}
    try:
        done = container.exec(probe_command(timeout_s, libraries))
        record = {"rc": done.returncode, "stdout": done.stdout.decode(errors="replace"), "stderr": done.stderr.decode(errors="replace")}
    except Exception as exc:  # noqa: BLE001 - the container went away (timeout, Ctrl-C): say so in the record
        record["stderr"] = f"probe exec failed: {exc}"
    finally:
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(record), encoding="utf-8")
        tmp.replace(out)


@dataclass(frozen=True)
class Workdir:
    """build/results/<id>/: what one run reads and writes (the plan entry, the probe's and pytest's output)."""

    path: Path

    @property
    def image_json(self) -> Path:
        return self.path / "image.json"

    @property
    def labels(self) -> Path:
        """The image's labels as the engine reported them: the checks compare them with image.json
        without asking the engine themselves."""
        return self.path / "labels.json"

    @property
    def junit(self) -> Path:
        return self.path / "junit.xml"

    @property
    def probe_raw(self) -> Path:
        return self.path / "probe-run.json"

    @property
    def probe_out(self) -> Path:
        return self.path / "probe.json"

    @property
    def pytest_log(self) -> Path:
        return self.path / "pytest.log"

    def prepare(self, spec: ImageSpec) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self.image_json.write_text(image_entry(spec).text(indent=None), encoding="utf-8")
        for stale in (self.junit, self.probe_out, self.probe_raw, self.labels):
            stale.unlink(missing_ok=True)


def pytest_argv(spec: ImageSpec, work: Workdir) -> list[str]:
    """pytest over the checks folder only: its own ini and conftest, none of the caller's."""
    return [
        sys.executable, "-m", "pytest", str(CHECKS_DIR), "-q", "-p", "no:cacheprovider",
        "-c", str(CHECKS_DIR / "pytest.ini"), f"--confcutdir={CHECKS_DIR}", f"--rootdir={CHECKS_DIR}", f"--junitxml={work.junit}",
        "-o", f"junit_suite_name={spec.id}",
    ]  # fmt: skip


# The caller's pytest settings are not the checks': PYTEST_ADDOPTS="-p their_plugin" or "--cov" in
# a user's shell (or a test suite's, which runs `builder test` from within pytest) made the checks'
# pytest exit 4 on its command line and every image "failed", a verdict about the shell, not the image.
CALLERS_PYTEST = "PYTEST_"


def checks_env(container_id: str, work: Workdir, attached: bool, timeout_s: int) -> dict[str, str]:
    """The checks' environment: the caller's, less its pytest settings, plus what the checks read."""
    return dict(
        {name: value for name, value in os.environ.items() if not name.startswith(CALLERS_PYTEST)},
        BUILDER_SMOKE_CONTAINER=container_id,
        BUILDER_SMOKE_IMAGE_JSON=str(work.image_json),
        BUILDER_SMOKE_LABELS=str(work.labels),
        BUILDER_SMOKE_PROBE_RAW=str(work.probe_raw),
        BUILDER_SMOKE_PROBE_OUT=str(work.probe_out),
        BUILDER_SMOKE_GPU="1" if attached else "0",
        BUILDER_SMOKE_TIMEOUT=str(timeout_s),
        BUILDER_SMOKE_PARENT=str(os.getpid()),
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",  # the checks need core pytest only: faster start
    )


@dataclass(frozen=True)
class Checked:
    """What one container run gave: pytest's exit code and output, and a CUDA image's measured fit."""

    returncode: int
    output: str
    fit: MeasuredFit | None = None
    fit_error: str = ""


def measure_fit(container: Container, spec: ImageSpec) -> MeasuredFit:
    """The image's fit, read by its own Python in this locked-down container (fit/measure.py)."""
    return measure.measure(container, spec.versions, table())


def _fit_of(job: Future[MeasuredFit] | None) -> tuple[MeasuredFit | None, str]:
    if job is None:
        return None, ""
    try:
        return job.result(), ""
    except (RunFailure, UserError) as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001 - the container went away (timeout, Ctrl-C): say so in the result
        return None, f"measuring the fit failed: {exc}"


def run_checks(engine: Engine, spec: ImageSpec, access: GpuAccess, host: HostInfo, timeout_s: int, work: Workdir) -> Checked:
    """Start the container, the probe and (CUDA images) the fit measurement in it, and pytest against it."""
    with ThreadPoolExecutor(2) as pool, engine.container(run_spec(spec, access, host, timeout_s)) as container:
        container.start()
        # The probe is the long pole: start it now, while pytest is still starting up.
        pool.submit(run_probe, container, timeout_s, image_entry(spec).libraries, work.probe_raw)
        fit = pool.submit(measure_fit, container, spec) if spec.base.vendor == "cuda" else None
        try:
            done = subprocess.run(
                pytest_argv(spec, work),
                env=checks_env(container.id, work, access.attach, timeout_s),
                capture_output=True,
                text=True,
                timeout=timeout_s + 120,
                check=False,
            )
            return Checked(done.returncode, done.stdout + done.stderr, *_fit_of(fit))
        except subprocess.TimeoutExpired as exc:
            return Checked(124, f"smoke tests timed out after {timeout_s + 120} s: {exc}", *_fit_of(fit))


def judge(spec: ImageSpec, access: GpuAccess, returncode: int, output: str, work: Workdir, started: float, stamp: str) -> SmokeResult:
    """The verdict of one run from what it left in its workdir."""
    counts, failures = _junit_counts(work.junit)
    if returncode == 124:
        failures.append(output)
    try:
        probe = read_probe(work.probe_out)
    except UserError as exc:  # the checks saved it from JSON they parsed: this is a fault worth its line
        probe = None
        failures.append(str(exc))
    return SmokeResult(
        id=spec.id,
        tag=spec.tag,
        verdict=verdict_of(returncode, counts, access.attach, spec.base.vendor),
        gpu=GpuUse(access.attach, access.reason),
        seconds=round(time.monotonic() - started, 2),
        tests=counts,
        failures=tuple(failures),
        diagnoses=tuple(_diagnoses(probe, failures)),
        probe=probe,
        date=stamp,
        cuda_checks=tuple(cuda_checks(probe)),
        returncode=returncode,
        vendor=spec.base.vendor,
        platform=spec.platform,
    )


def host_record(host: HostInfo) -> TestedOn:
    """The host a verdict was reached on, as the catalog records it."""
    gpus = [gpu.name for gpu in host.nvidia.gpus] if host.nvidia.has_gpu else []
    return TestedOn(
        gpu=", ".join(gpus) if gpus else ("AMD GPU (/dev/kfd)" if host.amd.present else "no GPU"),
        driver=host.nvidia.driver if host.nvidia.has_gpu else None,
        engine=host.engine.version,
    )


def smoke_one(engine: Engine, spec: ImageSpec, host: HostInfo, mode: str, timeout_s: int, results_dir: Path) -> SmokeResult:
    """Test one built image: GPU access decided, checks run, verdict written to results/<id>.json."""
    started = time.monotonic()
    access = gpu_access(spec, mode, host)
    stamp = utc_stamp()
    if access.failure:
        gpu = GpuUse(access.attach, access.reason)
        return SmokeResult(
            spec.id, spec.tag, "failed", gpu, 0.0, failures=(access.failure,), date=stamp, host=host_record(host), platform=spec.platform
        )
    work = Workdir(results_dir / spec.id)
    with image_under_test(work, spec.id, timeout_s):
        work.prepare(spec)
        tested = engine.inspect_image(spec.tag)  # before the run: what the verdict is about
        if tested is None:
            raise NotFound(f"No such image: {spec.tag}")
        work.labels.write_text(json.dumps(dict(tested.labels), sort_keys=True), encoding="utf-8")
        checked = run_checks(engine, spec, access, host, timeout_s, work)
        work.pytest_log.write_text(checked.output, encoding="utf-8")
        result = replace(
            judge(spec, access, checked.returncode, checked.output, work, started, stamp),
            content_hash=tested.labels.get(HASH_LABEL, ""),
            image_id=tested.id,
            host=host_record(host),
            fit=checked.fit,
            fit_error=checked.fit_error,
            emulated=runs_emulated(spec.platform, host_machine(host)),
        )
        if result.emulated:
            result = replace(result, diagnoses=emulated_diagnoses(result.diagnoses))
        results.write(results_dir, result)  # bound to this run: publish refuses a file edited after it
    return result


# How long a second run waits for the first to finish testing the same image, beyond its own
# timeout: the first's container start, pytest's start and the fit measurement.
WAIT_BEYOND_TIMEOUT_S = 300


@contextmanager
def image_under_test(work: Workdir, image_id: str, timeout_s: int) -> Iterator[None]:
    """One test run of an image at a time per results folder. Two at once (two shells, `builder
    run` beside `builder test`) shared build/results/<id>/: the second's `prepare` deleted the
    first's probe output and junit.xml mid-run, so the first judged the second's probe or no
    junit at all. The second waits (Ctrl-C ends the wait); the lock goes with its process."""
    work.path.mkdir(parents=True, exist_ok=True)
    wait_s = timeout_s + WAIT_BEYOND_TIMEOUT_S
    lock = filelock.FileLock(str(work.path / ".test.lock"), timeout=wait_s)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise UserError(
            f"another `builder test` has been testing {image_id} in this workspace for {wait_s} s (it holds {lock.lock_file}); "
            "run again when it is done"
        ) from None
    try:
        yield
    finally:
        lock.release()


def merge_junit(results_dir: Path, ids: list[str]) -> Path:
    """One JUnit file for CI dashboards: a testsuite per image."""
    suites = ET.Element("testsuites")
    for image in ids:
        path = results_dir / image / "junit.xml"
        if path.exists():
            root = ET.parse(path).getroot()
            suites.extend([root] if root.tag == "testsuite" else list(root))
    out = results_dir / "junit.xml"
    ET.ElementTree(suites).write(out, encoding="utf-8", xml_declaration=True)
    return out
