"""The Debian 13 ROCm base, for real: `builder test --base rocm5.7-debian13` bootstraps it from Debian's
mirror (or finds it current by its recipe hash), runs its base-level smoke test in a locked-down
container with no GPU, and records its HIP checks and its measured AMD fit (rocBLAS's code objects)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from docker import DockerClient

from builder.model import results
from builder.model.results import SmokeResult
from builder.smoke import hip

pytestmark = pytest.mark.docker

BASE = "rocm5.7-debian13"


@pytest.fixture(scope="module")
def tested(
    docker_client: DockerClient, tmp_path_factory: pytest.TempPathFactory, repository_copy: Any
) -> tuple[subprocess.CompletedProcess[str], SmokeResult]:
    """One run of the CLI for the module (on the lane's engine: no engine, the fixture's skip or failure);
    the base image stays, shared by recipe hash like the other bootstrapped bases."""
    repo = repository_copy(tmp_path_factory.mktemp("rocm-base"))
    done = subprocess.run(
        [sys.executable, "-m", "builder", "test", "--base", BASE],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    result = results.load(repo / "build" / "results", BASE)
    assert result is not None, done.stdout + done.stderr
    return done, result


def test_the_base_is_gpu_skipped_never_passed(tested: tuple[subprocess.CompletedProcess[str], SmokeResult]) -> None:
    done, result = tested
    assert done.returncode == 0, done.stdout + done.stderr
    assert result.verdict == "gpu-skipped", result.failures
    assert not result.gpu.attached and result.vendor == "rocm"
    assert "gpu-skipped" in done.stdout and "hipErrorNoDevice" in done.stdout


def test_its_hip_checks_are_recorded(tested: tuple[subprocess.CompletedProcess[str], SmokeResult]) -> None:
    _, result = tested
    checks = {c.name: c for c in result.hip_checks}
    assert set(checks) == {"hip-runtime", "rocblas", "hip-device-count", "locked-down", *(f"hiprtc {t}" for t in hip.TARGETS)}
    assert all(c.ok for c in checks.values()), checks
    assert "libamdhip64.so.5" in checks["hip-runtime"].detail and "librocblas.so.0" in checks["rocblas"].detail
    for target in hip.TARGETS:  # hiprtc's code object, read by fit/offload.py, holds the target asked for
        assert f"holding {target}" in checks[f"hiprtc {target}"].detail
    assert "hipErrorNoDevice (100)" in checks["hip-device-count"].detail
    assert checks["locked-down"].detail == "ran as uid 65534, network interfaces: lo"  # nobody, no network
    assert result.tests.tests == len(checks) and result.content_hash.startswith("sha256:") and result.image_id


def test_its_measured_amd_fit_is_rocblas_code_objects(tested: tuple[subprocess.CompletedProcess[str], SmokeResult]) -> None:
    done, result = tested
    assert result.amd_fit is not None, result.fit_error
    targets = result.amd_fit.targets
    # Debian 13's librocblas0 (rocBLAS 2.47, ROCm 5.5.1), measured: gfx803 gfx900 gfx906 gfx908 gfx90a gfx1010
    # gfx1030 gfx1100 gfx1101 gfx1102. No gfx942 code, though its hiprtc compiles for gfx942.
    assert {"gfx90a", "gfx908", "gfx1030", "gfx1100"} <= set(targets), targets
    assert "gfx942" not in targets and not any(t.startswith("gfx-mach-") for t in targets), targets
    paths = [lib.path for lib in result.amd_fit.libraries]
    assert any(p.endswith(".co") and "/rocblas/" in p for p in paths) and any(p.endswith(".hsaco") for p in paths)
    assert "gfx1030" in done.stdout  # shown
