"""What must hold inside every built image: the probe verdicts, the planned versions, the hardening."""

from __future__ import annotations

import re
import shlex
from concurrent.futures import Future
from typing import Any

import pytest

from builder.compat.rules import framework
from builder.model.image_entry import ImageEntry
from builder.model.probe_report import ProbeReport
from builder.model.versions import Release
from builder.probes.hello_gpu import release
from builder.render import labels as lb
from builder.smoke import pip_check

GPU_VENDORS = ("cuda", "rocm")
# a dist's WHEEL file, printed by the image's Python (argv[1]: the name pip check gave)
WHEEL_FILE = "import importlib.metadata as m, sys; print(m.distribution(sys.argv[1]).read_text('WHEEL') or '')"


def _public(version: str | None) -> str | None:
    return version.split("+")[0] if version else version


def test_every_framework_imports_and_computes(probe: ProbeReport, spec: ImageEntry) -> None:
    """Collect every failure first, then fail once with all of them."""
    problems = []
    for name in spec.frameworks:
        result = probe.frameworks.get(name)
        if result is None or result.status == "not-installed":
            problems.append(f"{name}: not installed in the image")
        elif result.status == "failed":
            cause, fix = (result.diagnosis.cause, result.diagnosis.fix) if result.diagnosis else ("", "")
            problems.append(f"{name}: {result.reason} -> {cause} {fix}".strip())
        elif not (result.cpu_check and result.cpu_check.ok):
            problems.append(f"{name}: CPU check failed: {result.cpu_check.detail if result.cpu_check else None}")
    assert not problems, "; ".join(problems)


def test_gpu_verdicts_are_honest(probe: ProbeReport, spec: ImageEntry, gpu_attached: bool) -> None:
    """With a GPU every framework must pass on it; without one nothing may claim `passed`."""
    statuses = {name: probe.frameworks[name].status for name in spec.frameworks}
    if gpu_attached and spec.base.vendor in GPU_VENDORS:
        assert all(s == "passed" for s in statuses.values()), statuses
    else:
        assert all(s == "skipped" for s in statuses.values()), statuses


def test_versions_equal_the_plan(probe: ProbeReport, spec: ImageEntry) -> None:
    mismatches = []
    for name, planned in spec.frameworks.items():
        found = _public(probe.frameworks[name].version)
        if found != planned:
            mismatches.append(f"{name}: planned {planned}, found {found}")
    for name, variant in spec.variants.items():  # what each framework's own build report says (torch.version.cuda)
        found_build = probe.frameworks.get(name)
        if found_build and variant:
            mismatches += framework(name).build_mismatches(variant, found_build.build)
    python = probe.host.python
    if not python.startswith(spec.python + "."):
        mismatches.append(f"python: planned {spec.python}, found {python}")
    assert not mismatches, "; ".join(mismatches)


def planned_cuda(variant: str) -> str | None:
    """The CUDA a wheel variant names: cu130 -> 13.0 (torch), cuda12 / cuda13x / cu13 -> the major only."""
    found = re.fullmatch(r"cu(?:da)?(\d+)x?", variant)
    if not found:
        return None
    digits = found.group(1)
    return f"{digits[:-1]}.{digits[-1]}" if len(digits) == 3 else digits


def _same_release(planned: str, found: str | None) -> bool:
    """The build's CUDA is the planned one, as values (13.0 is 13.00) under the release-prefix rule:
    a major-wide wheel's planned "13" is any 13.x."""
    if found is None or not re.fullmatch(r"\d{1,9}(\.\d{1,9}){0,5}", found):
        return False
    want = release(planned)
    return release(found)[: len(want)] == want


def test_cuda_proven_without_a_gpu(probe: ProbeReport, spec: ImageEntry) -> None:
    """Everything up to the device call: each framework's build targets the planned CUDA, its CUDA checks
    that need no GPU (a kernel compiled, cuDNN loaded) pass, and the CUDA libraries the lock pins load at
    exactly the pinned versions."""
    if spec.base.vendor != "cuda":
        pytest.skip(f"a {spec.base.vendor} image bundles no CUDA libraries")
    problems = []
    for name in spec.frameworks:
        result = probe.frameworks[name]
        planned = planned_cuda(spec.variants.get(name) or "")
        if planned and not _same_release(planned, result.cuda_build):
            problems.append(f"{name}: built for CUDA {result.cuda_build}, the plan says {planned}")
        if not result.offline:
            problems.append(f"{name}: ran no CUDA check without a GPU")
        problems += [f"{name}: {c.name}: {c.detail}" for c in result.offline if not c.ok]
    cuda = probe.cuda
    checked = {c.name: c for c in cuda.checks}
    for library, version in sorted(spec.libraries.items()):
        check = checked.get(library)
        if check is None:
            problems.append(f"{library} {version}: the probe did not check it")
        elif not check.ok:
            problems.append(f"{library}: {check.detail}")
    problems += [f"{c.name}: {c.detail}" for c in cuda.checks if not c.ok and c.name not in spec.libraries]
    if cuda.diagnosis:
        problems.append(f"-> {cuda.diagnosis.cause}; {cuda.diagnosis.fix}")
    assert not problems, "; ".join(problems)


def test_numpy_pin_holds(runs: dict[str, Future[Any]], spec: ImageEntry) -> None:
    pins = [p.split("==", 1)[1] for p in spec.packages if p.startswith("numpy==")]
    if not pins:
        pytest.skip("the plan pins no NumPy for this image (no framework in it has a NumPy ceiling)")
    run = runs["numpy"].result()
    assert run.rc == 0, run.stderr
    assert run.stdout.strip() == pins[0]


def test_default_user_is_not_root(runs: dict[str, Future[Any]]) -> None:
    run = runs["identity"].result()
    assert run.rc == 0, run.stderr
    uid, name = run.stdout.split()
    assert uid != "0" and name != "root", f"default user is {name} ({uid})"


def test_accelerator_environment(runs: dict[str, Future[Any]], spec: ImageEntry) -> None:
    env = dict(line.split("=", 1) for line in runs["environment"].result().stdout.splitlines() if "=" in line)
    if spec.base.vendor == "cuda":
        assert env.get("NVIDIA_VISIBLE_DEVICES") == "all"
        assert env.get("NVIDIA_DRIVER_CAPABILITIES") == "compute,utility"
        # the CUDA the image declares: its base's, or its lock's where matrix.yaml states an exception
        line = Release.parse(spec.accelerator.version or "").line
        assert env.get("NVIDIA_REQUIRE_CUDA", "").startswith(f"cuda>={line}")
    else:
        assert not [k for k in env if k.startswith("NVIDIA_")], "non-CUDA image sets NVIDIA_* variables"


def test_pip_check_is_clean(runs: dict[str, Future[Any]], host: Any, record_property: Any) -> None:
    """`pip check` finds nothing, but for a wheel whose WHEEL file names its platform by a vendor's
    alias that the image's own pip supports (smoke/pip_check.py: NVIDIA's aarch64 cuSPARSELt says
    `sbsa`); every other line fails, and what was accepted is recorded in the junit report."""
    run = runs["pip_check"].result()
    if run.rc == 0:
        return
    report = pip_check.read_report(run.stdout)
    assert report.unsupported and not report.other, run.stdout + run.stderr
    debug = host.run("python -m pip debug --verbose")
    supported = pip_check.supported_tags(debug.stdout)
    assert supported, f"`pip debug --verbose` listed no compatible tags: {debug.stderr.strip()}"
    accepted = []
    for name in report.unsupported:
        wheel = host.run(f"python -c {shlex.quote(WHEEL_FILE)} {shlex.quote(name)}")
        why = pip_check.accept(name, wheel.stdout, supported)
        assert why is not None, f"pip check: {name} is not supported on this platform (its WHEEL file: {wheel.stdout.strip()!r})"
        accepted.append(why)
    record_property("pip_check_accepted", "; ".join(accepted))


def test_labels(spec: ImageEntry, labels: dict[str, str]) -> None:
    """The labels the engine reports for the tested image are the plan's: its content hash, id and
    frameworks (parsed as `builder doctor --image` parses them), and every OCI annotation set."""
    assert labels.get(lb.HASH_LABEL) == spec.content_hash
    assert labels.get(lb.ID_LABEL) == spec.id
    found = lb.parse_frameworks_label(labels.get(lb.FRAMEWORKS_LABEL, ""), len(spec.frameworks))
    assert found is not None, f"label {lb.FRAMEWORKS_LABEL}={labels.get(lb.FRAMEWORKS_LABEL)!r} is not name=version,..."
    assert dict(found) == spec.frameworks
    for name in lb.OCI_LABELS:
        assert labels.get(name), f"missing OCI label {name}"
