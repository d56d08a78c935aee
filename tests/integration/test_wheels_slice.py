"""The CUDA-from-wheels slice, for real: one image per framework on the bootstrapped Debian base with
CUDA from PyPI wheels (torch cu130, jax[cuda13], cupy-cuda13x[ctk], numba-cuda[cu13],
tensorflow[and-cuda] on CUDA 12.5), and the newest torch (2.15, PyPI's cu132 build) on its CUDA 13.2
base, built and smoke-tested on this GPU-less host.

Each must come out `gpu-skipped` (never `passed`) with its CPU-side CUDA checks passed: the CUDA
each framework was built for, a kernel compiled where the framework can, and every CUDA library the
lock pins loaded at the pinned version. A derived image with libcudnn deleted must come out
`failed` with the cuDNN diagnosis. Each result holds the image's measured fit, every library of it
equal to what NVIDIA's cuobjdump lists for the same file taken out of the image. Sizes are measured
and printed (build/results/sizes.txt, which .ci/run prints); the images are removed afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from docker import DockerClient

from builder.compat.rules import table
from builder.engine import client as engine
from builder.engine.leftovers import STAGE_LABEL
from builder.fit import cuobjdump
from builder.fit import driver as drivers
from builder.fit.arch import Embedded
from builder.fit.measure import embedded_of
from builder.model import results
from builder.model.measured_fit import MeasuredFit
from builder.model.plan import ImageSpec
from builder.model.results import SmokeResult
from builder.usecases.test import TestOptions
from builder.usecases.test import test_images as run_smoke_tests  # not test_*: pytest would collect it
from builder.util.errors import RunFailure
from builder.workspace import Workspace

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "build" / "results"
SELECT = "base=cuda1*-debian12,platform=linux/amd64"  # the arm64 images need emulation (issue 19 part 3)
WS = Workspace.locate(str(ROOT / "matrix.yaml"))
WHEELS = WS.selected(SELECT, use_default=False)
BROKEN_TAG = "builder-test/broken-cudnn:latest"


def builder(*args: str, timeout: int = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", *args],
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _remove(client: DockerClient, tag: str) -> None:
    """The image, and build-stage images older versions left of its tag."""
    for stage in client.api.images(all=True, filters={"label": f"{STAGE_LABEL}={tag}"}):
        engine.remove_image_quietly(client, str(stage["Id"]))
    engine.remove_image_quietly(client, tag)


@pytest.fixture(scope="module")
def wheels_build(docker_client: DockerClient) -> Iterator[list[dict[str, Any]]]:
    """`builder build -j 2` of the wheels slice; the images are removed when the module ends."""
    try:
        done = builder("build", "-j", "2", "--select", SELECT)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
        yield json.loads((RESULTS / "build.json").read_text())
    finally:
        for spec in WHEELS:
            _remove(docker_client, spec.tag)
        for line_image in sorted({s.line_image for s in WHEELS if s.line_image}):
            engine.remove_image_quietly(docker_client, line_image)  # the CUDA line's NVIDIA image, made by this build
        engine.remove_image_quietly(docker_client, BROKEN_TAG)


@pytest.fixture(scope="module")
def wheels_test(wheels_build: Any) -> dict[str, dict[str, Any]]:
    done = builder("test", "--select", SELECT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return {spec.id: json.loads((RESULTS / f"{spec.id}.json").read_text()) for spec in WHEELS}


def test_the_slice_has_one_image_per_framework() -> None:
    assert sorted(s.stack for s in WHEELS) == ["cupy", "jax", "numba", "tensorflow", "torch", "torch"]
    assert {(s.base.name, s.versions["torch"]) for s in WHEELS if s.stack == "torch"} == {
        ("cuda13-debian12", "2.14.1"),
        ("cuda13.2-debian12", "2.15.0"),  # the newest torch: PyPI's wheel is the CUDA 13.2 build
    }
    for spec in WHEELS:
        assert spec.base.vendor == "cuda" and spec.base.cuda_from_wheels and spec.base.image is None
        assert spec.constraints, f"{spec.id}: no constraints keep its CUDA wheels on CUDA {spec.base.version}"
        assert spec.lock is not None, f"{spec.id} is not locked"


def test_locks_keep_the_cuda_wheels_on_the_base_cuda() -> None:
    for spec in WHEELS:
        libraries = json.loads((ROOT / "images" / spec.id / "image.json").read_text())["libraries"]
        assert libraries, spec.id
        for name in ("cuda-runtime", "nvrtc"):
            if name in libraries:
                assert libraries[name].split(".")[:2] == str(spec.base.version).split("."), f"{spec.id}: {name} {libraries[name]}"


def test_every_image_builds_with_nothing_duplicated(wheels_build: list[dict[str, Any]]) -> None:
    results = {r["id"]: r for r in wheels_build}
    assert {r["status"] for r in results.values()} <= {"built", "up-to-date"}
    for spec in WHEELS:
        found = results[spec.id]["sizes"]
        assert found is not None, spec.id
        assert found["venv_mb"] > 500, f"{spec.id}: a CUDA venv of {found['venv_mb']} MB holds no CUDA wheels"
        assert found["ratio"] <= 1.05, f"{spec.id}: image / (venv + base) = {found['ratio']}"


def test_the_cuda_line_shares_one_nvidia_layer(wheels_build: list[dict[str, Any]], docker_client: DockerClient) -> None:
    """matrix.yaml `line_layers`: torch, jax and cupy on cuda13-debian12 build FROM their line's NVIDIA
    image (the base plus one layer of the line's NVIDIA wheels, made once: engine/line_image.py), so
    all three hold that very layer at the same place, and `build` counts it as shared, not as each
    one's own. numba keeps its own NVIDIA layer (not on the line)."""
    members = [s for s in WHEELS if s.line is not None]
    assert sorted(s.stack for s in members) == ["cupy", "jax", "torch"]
    assert len({s.line_image for s in members}) == 1
    results = {r["id"]: r for r in wheels_build}
    base = docker_client.images.get(members[0].base.from_ref).attrs["RootFS"]["Layers"]
    line_image = docker_client.images.get(str(members[0].line_image))
    below = line_image.attrs["RootFS"]["Layers"]
    assert below[: len(base)] == base and len(below) == len(base) + 1, "the line image is its base plus one layer"
    nvidia_mb = (line_image.attrs["Size"] - docker_client.images.get(members[0].base.from_ref).attrs["Size"]) / 1e6
    assert nvidia_mb > 3000, f"the line's NVIDIA layer holds {nvidia_mb:.0f} MB"
    for spec in members:
        layers = docker_client.images.get(spec.tag).attrs["RootFS"]["Layers"]
        assert layers[: len(below)] == below, f"{spec.id} is not on its line's NVIDIA layer"
        found = results[spec.id]["sizes"]
        assert found["shared_mb"] >= nvidia_mb - 1, (spec.id, found)
        assert found["own_mb"] < found["venv_mb"] - nvidia_mb + 1, (spec.id, found)
    numba = next(s for s in WHEELS if s.stack == "numba")
    assert numba.line is None and docker_client.images.get(numba.tag).attrs["RootFS"]["Layers"][len(base)] != below[-1]


def test_smoke_tests_are_gpu_skipped_with_every_cuda_check_passed(wheels_test: dict[str, dict[str, Any]]) -> None:
    for spec in WHEELS:
        result = wheels_test[spec.id]
        assert result["verdict"] == "gpu-skipped", (spec.id, result["failures"], result["diagnoses"])
        assert result["tests"]["failures"] == 0 and result["tests"]["errors"] == 0
        framework = result["probe"]["frameworks"][spec.stack]
        assert framework["status"] == "skipped", "no GPU here: nothing may claim passed"
        assert framework["offline"] and all(c["ok"] for c in framework["offline"]), framework["offline"]
        assert framework["cuda_build"] and str(spec.base.version).startswith(framework["cuda_build"].split(".")[0])
        checks = result["cuda_checks"]
        assert checks and all(c["ok"] for c in checks), checks
        libraries = json.loads((ROOT / "images" / spec.id / "image.json").read_text())["libraries"]
        loaded = {c["name"]: c for c in result["probe"]["cuda"]["checks"]}
        assert set(libraries) <= set(loaded), f"{spec.id}: the probe did not load {set(libraries) - set(loaded)}"
    compiled = {
        spec.stack for spec in WHEELS for c in wheels_test[spec.id]["cuda_checks"] if "compile" in c["name"] or "lowers" in c["name"]
    }
    assert {"cupy", "numba", "jax"} <= compiled, compiled


class _Recorder:
    def __init__(self) -> None:
        self.results: list[SmokeResult] = []

    def started(self, spec: ImageSpec) -> None:
        return

    def done(self, result: SmokeResult) -> None:
        self.results.append(result)


def test_a_deleted_libcudnn_is_failed_with_the_cudnn_diagnosis(wheels_build: Any, docker_client: DockerClient) -> None:
    spec = next(s for s in WHEELS if s.stack == "torch")
    dockerfile = (
        f"FROM {spec.tag}\nUSER root\n"
        'RUN set -eu; lib=$(ls /opt/venv/lib/python*/site-packages/nvidia/cudnn/lib/libcudnn.so.9); rm "$lib"\n'
        "USER app\n"
    )
    context = ROOT / "build" / "broken-cudnn"
    context.mkdir(parents=True, exist_ok=True)
    (context / "Dockerfile").write_text(dockerfile, encoding="utf-8")
    docker_client.images.build(path=str(context), tag=BROKEN_TAG, rm=True, forcerm=True)
    broken = replace(spec, tag=BROKEN_TAG)
    events = _Recorder()
    (result,) = run_smoke_tests(WS, [broken], TestOptions(gpu="auto", timeout_s=600), events)
    assert result.verdict == "failed", result
    cudnn = [c for c in result.cuda_checks if c.name == "cudnn"]
    assert cudnn and not cudnn[0].ok and "libcudnn.so.N: cannot open shared object file" in cudnn[0].detail
    causes = [d.cause for d in result.diagnoses]
    assert "the cuDNN library is not in the image (or not on the loader path)" in causes, result.diagnoses
    assert engine.owned_containers(docker_client) == []


def test_sizes_are_printed_with_the_cpu_difference_explained(wheels_build: Any) -> None:
    """The benchmark's report; builds the CPU images of the default selection too (up to date after test_slice)."""
    done = builder("build", "-j", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    report = RESULTS / "sizes.txt"
    bench = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_sizes.py"), "--out", str(report)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert bench.returncode == 0, bench.stderr[-2000:]
    text = report.read_text()
    assert "target <= 1.05: met" in text, text
    for spec in WHEELS:
        assert spec.id in text
    # A CUDA image is explained against the default selection's CPU image of its framework on the same
    # Python: torch (Debian 12, 3.11); the default's tensorflow, jax and numba are Debian 13's (3.13).
    cpu = WS.selected(None, use_default=True)
    paired = {s.stack for s in WHEELS for c in cpu if c.stack == s.stack and c.python == s.python}
    assert "torch" in paired, paired
    for stack in paired:
        line = next(row for row in text.splitlines() if row.strip().startswith(stack) and " - " in row)
        assert "CUDA wheels" in line, line
    for stack in {s.stack for s in WHEELS} - paired:
        assert f"no CPU image of {stack} built" in text, text


def site_packages(spec: ImageSpec) -> str:
    return f"/opt/venv/lib/python{spec.python}/site-packages"


@contextmanager
def cuobjdump_in(docker_client: DockerClient, tag: str, binary: Path) -> Iterator[cuobjdump.Runner]:
    """NVIDIA's cuobjdump (the wheel's binary, mounted read-only) run inside a container of the image,
    on the image's own files: nothing is copied out (libtorch_cuda.so alone is ~1 GB)."""
    mounted = "/opt/cuobjdump/bin"
    container = docker_client.containers.run(
        tag,
        command=["sleep", "1800"],
        detach=True,
        network_mode="none",
        read_only=True,
        volumes={str(binary.parent): {"bind": mounted, "mode": "ro"}},
        labels={engine.SESSION_LABEL: engine.SESSION_ID},
    )

    def run(argv: Sequence[str]) -> tuple[int, str]:
        """cuobjdump (the mounted binary), or the image's own Python hashing files (SHA-256; OpenSSL's,
        about 3x coreutils' sha256sum here, and a library's GBs are read once per image)."""
        program, *args = argv
        assert program in ("sha256", str(binary)), argv
        command = ["python3", "-c", _SHA256, *args] if program == "sha256" else [f"{mounted}/{binary.name}", *args]
        done = container.exec_run(command, demux=False)  # not streamed: one bytes output, and the exit code
        assert isinstance(done.output, bytes) and done.exit_code is not None, done
        return done.exit_code, done.output.decode(errors="replace")

    try:
        yield run
    finally:
        container.remove(force=True)


_SHA256 = """
import hashlib, sys
for path in sys.argv[1:]:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    print(digest.hexdigest(), path)
"""


# Libraries NVIDIA's cuobjdump refuses ("Invalid ELF"), so nothing to compare with: CUDA 13.2's
# libcufile.so.0 (`file` says "too many notes (256)"; its .nv_fatbin section extracted alone is
# refused too). fit/scan.py reads its fatbin: sm_75 ... sm_90 and compute_90.
CUOBJDUMP_REFUSES = {"libcufile.so.0"}


# What cuobjdump said of each distinct file (name, sha256), across the images of the slice: the CUDA
# wheels of the cu130 images are the same files (cuBLAS, cuSPARSE, cuFFT ... of one toolkit), and
# cuobjdump takes seconds to minutes per large library, so each distinct file is read once; every
# library of every image is still compared, against the reading of its identical bytes.
READ_BY_CUOBJDUMP: dict[tuple[str, str], Embedded | None] = {}


def assert_fit_equals_cuobjdump(docker_client: DockerClient, spec: ImageSpec, fit: MeasuredFit) -> None:
    """Every library the fit lists, read by NVIDIA's cuobjdump where the image holds it."""
    binary = cuobjdump.find_binary()  # the nvidia-cuda-cuobjdump wheel is a dev dependency
    root = site_packages(spec)
    differ = []
    with cuobjdump_in(docker_client, spec.tag, binary) as run:
        paths = [Path(f"{root}/{lib.path}") for lib in fit.libraries]
        rc, out = run(["sha256", *map(str, paths)])  # which libraries are the same file as one already read
        assert rc == 0, f"{spec.id}: hashing the libraries: {out[-300:]}"
        digests = {path: digest for digest, path in (line.split(" ", 1) for line in out.splitlines())}
        keys = [(path.name, digests[str(path)]) for path in paths]

        def read(key: tuple[str, str], path: Path) -> tuple[tuple[str, str], Embedded | None]:
            try:
                return key, cuobjdump.measure(path, binary, run)
            except RunFailure as exc:
                if not (path.name in CUOBJDUMP_REFUSES and "Invalid ELF" in str(exc)):
                    raise
                return key, None

        # two at a time: a large library keeps cuobjdump busy for a while on one core
        with ThreadPoolExecutor(max_workers=2) as pool:
            todo = {key: path for key, path in zip(keys, paths, strict=True) if key not in READ_BY_CUOBJDUMP}
            READ_BY_CUOBJDUMP.update(pool.map(lambda item: read(*item), todo.items()))
        for key, path, lib in zip(keys, paths, fit.libraries, strict=True):
            theirs = READ_BY_CUOBJDUMP[key]
            if theirs is None:
                continue
            ours = embedded_of(lib)
            if theirs != ours:  # read once more: once, in a loaded CI run, cuobjdump listed one architecture fewer of a
                theirs = READ_BY_CUOBJDUMP[key] = read(key, path)[1]  # file it reads whole on the host every time
            if theirs is not None and theirs != ours:
                differ.append(f"{root}/{lib.path}: cuobjdump {theirs.label} ({theirs.ptx_isa}), measured {ours.label} ({ours.ptx_isa})")
    assert differ == [], f"{spec.id}: " + "; ".join(differ)


def test_each_cuda_image_holds_its_measured_fit_equal_to_cuobjdump(
    wheels_test: dict[str, dict[str, Any]], docker_client: DockerClient
) -> None:
    for spec in WHEELS:
        result = results.from_json(wheels_test[spec.id], spec.id)
        fit = result.fit
        assert fit is not None, f"{spec.id}: no measured fit ({result.fit_error})"
        assert [f.name for f in fit.frameworks] == sorted(spec.versions)
        assert fit.runs_on, f"{spec.id}: runs on no known GPU?"
        assert fit.driver is not None and fit.driver.cuda.split(".")[0] == str(spec.base.version).split(".")[0], fit.driver
        floor = drivers.floor_for(fit.driver.cuda, table())
        assert floor is not None and fit.driver_floor() == floor.floor
        if any(f.jit for f in fit.frameworks):
            assert fit.jit is not None and fit.jit.archs, f"{spec.id}: compiles at run time, but no NVRTC was read"
        else:
            assert fit.libraries, f"{spec.id}: a framework with prebuilt kernels and no library holding them"
        assert_fit_equals_cuobjdump(docker_client, spec, fit)
