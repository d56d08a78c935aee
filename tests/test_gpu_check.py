"""scripts/gpu-check.sh, the GPU acceptance check (issue 39), on this machine: without a GPU it says so
and is never a pass; with a GPU described by a stand-in nvidia-smi its steps run (the fit step's two
readers on real device code) and a partial or failing run is not a pass either. The real run is on a
GPU host (docs/gpu-validation.md); no engine is reached here (DOCKER_HOST names none)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from builder.fit import cuobjdump

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "cuobjdump"
H200 = "#!/bin/sh\necho 'NVIDIA H200, 580.159.04, 9.0, 143771'\n"


def gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def run_check(
    tmp_path: Path, *args: str, smi: str | None = None, extra: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The script as a person runs it, with PATH holding only the test's tools (a stand-in nvidia-smi or none)."""
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    if smi is not None:
        (tools / "nvidia-smi").write_text(smi)
        (tools / "nvidia-smi").chmod(0o755)
    for name in ("bash", "dirname", "git"):  # what the script calls, and no nvidia-smi or docker of this machine's
        found = shutil.which(name)
        if found and not (tools / name).exists():
            (tools / name).symlink_to(found)
    env = {"PATH": str(tools), "PYTHON": sys.executable, "DOCKER_HOST": "unix:///nonexistent/gpu-check.sock", "HOME": str(tmp_path)}
    env.update(extra or {})
    out = tmp_path / "out"
    done = subprocess.run(
        [str(tools / "bash"), str(ROOT / "scripts" / "gpu-check.sh"), "--out", str(out), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
    return done, summary


def test_without_a_gpu_it_says_so_and_is_never_a_pass(tmp_path: Path) -> None:
    done, summary = run_check(tmp_path, "--steps", "doctor,slice")
    assert done.returncode == 3, done.stderr
    # "(nvidia-smi not found)", or on a GPU workstation "(nvidia-smi not found, but /dev/nvidiactl exists)"
    assert done.stdout.startswith("gpu-check: NO GPU (not a pass): no NVIDIA GPU on this host (nvidia-smi not found")
    assert summary["result"] == "no-gpu" and "this is not a pass" in summary["reason"]
    assert summary["host"]["gpus"] == [] and summary["host"]["docker"] is False
    assert [s["name"] for s in summary["steps"]] == ["probe", "fit", "doctor", "probe-tests", "slice"]
    assert summary["steps"][-1] == {"name": "slice", "status": "skipped", "detail": summary["steps"][-1]["detail"], "seconds": 0.0}
    assert "no Docker engine" in summary["steps"][-1]["detail"]


def test_on_a_gpu_host_the_fit_step_reads_with_both_readers_and_compares(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    (site / "nvidia" / "cu13" / "lib").mkdir(parents=True)
    (site / "torch" / "lib").mkdir(parents=True)
    shutil.copyfile(FIXTURES / "cufft-12.0.0.61.o", site / "nvidia" / "cu13" / "lib" / "libcufft.so.12")
    shutil.copyfile(FIXTURES / "probe.o", site / "torch" / "lib" / "libkernels.so")
    done, summary = run_check(tmp_path, "--steps", "fit", "--library", str(site / "nvidia"), "--library", str(site / "torch"), smi=H200)
    assert done.returncode == 1, done.stderr  # one step asked for: never a pass
    assert summary["result"] == "fail" and "not every step was asked for" in summary["reason"]
    assert summary["host"]["gpus"] == [{"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0", "memory_mib": 143771}]
    fit = next(s for s in summary["steps"] if s["name"] == "fit")
    assert fit["status"] == "passed", fit
    assert [(f["folder"].rsplit("/", 1)[-1], f["statuses"]["fits"], f["problems"]) for f in fit["folders"]] == [
        ("nvidia", 1, []),
        ("torch", 1, []),
    ]
    raw = json.loads((tmp_path / "out" / "fit.json").read_text())
    readers = raw[str(site / "nvidia")]
    assert json.loads(readers["fatbin"])["records"] == json.loads(readers["cuobjdump"])["records"]


def test_a_library_cuobjdump_refuses_is_listed_and_the_rest_compared_one_by_one(tmp_path: Path) -> None:
    """cuobjdump stops a folder's `fit --library` at its first refusal (CUDA 13.2's libraries are
    "Invalid ELF" to some releases): the folder is then read library by library, a refusal listed."""
    site = tmp_path / "site-packages" / "nvidia" / "cu13" / "lib"
    site.mkdir(parents=True)
    shutil.copyfile(FIXTURES / "probe.o", site / "libgood.so.13")
    shutil.copyfile(FIXTURES / "cufft-12.0.0.61.o", site / "libnew.so.13")
    real = cuobjdump.find_binary()
    picky = tmp_path / "cuobjdump"
    picky.write_text(
        f'#!/bin/sh\ncase "$1" in *libnew*) echo "cuobjdump fatal    : Invalid ELF file" >&2; exit 255;; esac\nexec {real} "$@"\n'
    )
    picky.chmod(0o755)
    folder = tmp_path / "site-packages" / "nvidia"
    done, summary = run_check(tmp_path, "--steps", "fit", "--library", str(folder), smi=H200, extra={cuobjdump.ENV: str(picky)})
    fit = next(s for s in summary["steps"] if s["name"] == "fit")
    assert fit["status"] == "passed", (fit, done.stderr)
    [found] = fit["folders"]
    assert found["problems"] == [] and found["statuses"]["fits"] == 2
    assert found["refused_by_cuobjdump"] == [
        "cu13/lib/libnew.so.13: cuobjdump " + str(site / "libnew.so.13") + " exited 255: cuobjdump fatal    : Invalid ELF file"
    ]


def test_a_refusal_of_what_a_passing_framework_loads_is_a_contradiction() -> None:
    module = gpu_check()
    refused = {"id": "cu13/lib/libcufft.so.12", "status": "does not fit", "reason": "no sm_90 SASS and no PTX"}
    answers = {"fatbin": {"records": [refused]}, "cuobjdump": {"records": [refused]}}
    torch_ran = {"torch": {"status": "passed"}, "jax": {"status": "failed"}}
    nvidia = module._compare(Path("/site/nvidia"), answers, torch_ran)
    assert (
        nvidia["owners"] == ["torch"] and "torch passed on this GPU, but `fit` says 1 of its libraries do not fit" in nvidia["problems"][0]
    )
    assert module._compare(Path("/site/jax"), answers, torch_ran)["problems"] == [], "jax did not run here: no contradiction"
    other = {"fatbin": {"records": [refused]}, "cuobjdump": {"records": [{**refused, "status": "fits"}]}}
    assert module._compare(Path("/site/cupy"), other, {})["problems"] == ["the readers disagree on 1 libraries: cu13/lib/libcufft.so.12"]


@pytest.mark.parametrize("steps", ["probe,fitt", ""])
def test_an_unknown_step_is_a_usage_error(tmp_path: Path, steps: str) -> None:
    done, summary = run_check(tmp_path, "--steps", steps)
    assert done.returncode == 2 and "--steps" in done.stderr and summary == {}
