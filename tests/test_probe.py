"""hello-gpu: the real script, run in subprocesses against fake frameworks on a host without a GPU.

Hermetic, so these tests mean the same on any machine, a GPU workstation with every framework
installed included (issue 39): the probe runs in an isolated Python (a venv made from the test
interpreter's base, without its packages: `isolated_python`) that sees only the standard library and
what the test put on PYTHONPATH (fake frameworks, tiny packages named torch/jax/..., and stand-ins for
the NVIDIA wheels' libraries), in an environment built from nothing (no LD_LIBRARY_PATH, CUDA_* or
NUMBA_* of the host), with a PATH holding only the test's own folder (a fake nvidia-smi or none), and
GPU device nodes simulated with HELLO_GPU_DEV_ROOT pointing at a temp dir.
tests/integration/test_probe_hermetic.py runs this file in an interpreter that has numba, numba-cuda
and the NVIDIA runtime wheels installed, and it must pass there too.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builder.lock.files import LIBRARIES
from builder.probes import hello_gpu

SCRIPT = Path(hello_gpu.__file__).resolve()
RESULT_KEYS = {
    "framework",
    "status",
    "version",
    "build",
    "devices",
    "cpu_check",
    "gpu_check",
    "offline",
    "cuda_build",
    "reason",
    "diagnosis",
    "seconds",
}

FAKE_TORCH = """
import os
MODE = os.environ.get("FAKE_TORCH_MODE", "no-gpu")
print("fake torch chatter on stdout")
os.write(1, b"raw fd-1 chatter from a C library\\n")
__version__ = "9.9.9+fake"
float32 = "float32"


class version:
    cuda = None if MODE == "cpu-only" else "13.0"
    hip = None


class _cudnn:
    @staticmethod
    def version():
        return 91002


class backends:
    cudnn = _cudnn


class Tensor:
    def __init__(self, rows, device):
        self.rows, self.device = rows, device

    def __matmul__(self, other):
        import operator

        cols = list(zip(*other.rows))
        rows = [[sum(map(operator.mul, r, c)) for c in cols] for r in self.rows]
        if (MODE == "cpu-wrong" and self.device == "cpu") or (MODE == "gpu-wrong" and self.device != "cpu"):
            rows[0][0] += 1.0
        return Tensor(rows, self.device)

    def cpu(self):
        return Tensor(self.rows, "cpu")

    def tolist(self):
        return [list(r) for r in self.rows]


def tensor(data, dtype=None, device="cpu"):
    return Tensor([[float(v) for v in row] for row in data], device)


class _Props:
    name, major, minor, total_memory = "Fake GPU", 9, 0, 141 * 2**30


class cuda:
    @staticmethod
    def is_available():
        return MODE in ("gpu-ok", "gpu-wrong")

    @staticmethod
    def init():
        raise RuntimeError("Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU")

    @staticmethod
    def device_count():
        return 1

    @staticmethod
    def get_device_properties(index):
        return _Props()
"""

FAKE_NUMBA_OLD = 'raise ImportError("Numba needs NumPy 2.0 or less. Got NumPy 2.1.")\n'

# Hangs on import, with a grandchild holding the output pipes: only killing the process group ends it.
# NumPy just large enough for the numba check: 2-D arrays indexed by (i, j), shape, tolist
FAKE_NUMPY = """
__version__ = "2.3.5"
float32 = float


class Array:
    def __init__(self, rows):
        self.rows = [list(map(float, r)) for r in rows]
        self.shape = (len(self.rows), len(self.rows[0]) if self.rows else 0)

    def __getitem__(self, at):
        return self.rows[at[0]][at[1]]

    def __setitem__(self, at, value):
        self.rows[at[0]][at[1]] = value

    def tolist(self):
        return [list(r) for r in self.rows]


def asarray(data, dtype=None):
    return Array(data)


def zeros(shape, dtype=None):
    return Array([[0.0] * shape[1] for _ in range(shape[0])])
"""

# numba with its built-in CUDA target (no numba-cuda): what compile_ptx does is FAKE_NVVM's choice
FAKE_NUMBA_BUILTIN = """
import os, sys, types

__version__ = "0.60.0"


def njit(fn):
    return fn


class NvvmSupportError(Exception):
    pass


config = types.ModuleType("numba.core.config")
config.FORCE_CUDA_CC = None
sys.modules["numba.core"] = types.ModuleType("numba.core")
sys.modules["numba.core.config"] = sys.modules["numba.core"].config = config


def compile_ptx(fn, signature, cc=None):
    with open(os.environ["FAKE_NUMBA_CALLS"], "a") as log:
        log.write(f"compile_ptx {signature} {cc} forced={config.FORCE_CUDA_CC}\\n")
    if os.environ.get("FAKE_NVVM") == "missing":
        raise NvvmSupportError(
            "libNVVM cannot be found. Do `conda install cudatoolkit`:\\nlibnvvm.so: cannot open shared object file: No such file or directory"
        )
    if os.environ.get("FAKE_CUDART") == "no-driver" and config.FORCE_CUDA_CC is None:
        # numba's built-in target asks the CUDA runtime which CCs it supports; CUDA 11's answers none without a driver
        raise NvvmSupportError("No supported GPU compute capabilities found. Please check your cudatoolkit version matches your CUDA version.")
    return ".version 7.8\\n.target sm_75\\n.visible .entry scale(\\n)", None


def is_available():
    with open(os.environ["FAKE_NUMBA_CALLS"], "a") as log:
        log.write(f"is_available forced={config.FORCE_CUDA_CC}\\n")
    return False


cuda = types.ModuleType("numba.cuda")
cuda.compile_ptx = compile_ptx
cuda.grid = lambda n: 0
cuda.is_available = is_available
cuda.get_current_device = lambda: (_ for _ in ()).throw(RuntimeError("CUDA driver library cannot be found"))
sys.modules["numba.cuda"] = cuda
"""

FAKE_JAX_HANG = """
import os, subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.environ["FAKE_PID_FILE"], "w") as f:
    f.write(f"{os.getpid()} {grandchild.pid}")
time.sleep(600)
"""

FAKE_CUPY_SEGV = "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"


@dataclass
class ProbeRun:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def report(self) -> dict[str, Any]:
        doc = json.loads(self.stdout)  # the whole of stdout must be one JSON document
        assert isinstance(doc, dict)
        return doc

    def result(self, name: str) -> dict[str, Any]:
        result = self.report["frameworks"][name]
        assert isinstance(result, dict)
        return result


@pytest.fixture(scope="session")
def isolated_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python that sees the standard library and nothing else: a venv of the test interpreter's
    base made without pip and without its site-packages (made once per session, ~1 s). The probe's
    children run the same interpreter (sys.executable), so they see no more than it does."""
    venv = tmp_path_factory.mktemp("isolated") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True, timeout=120)
    python = venv / "bin" / "python"
    code = "import importlib.metadata as m; print(sorted(str(d.metadata['Name']) for d in m.distributions()))"
    seen = subprocess.run([str(python), "-c", code], env={"PATH": ""}, capture_output=True, text=True, check=True, timeout=60)
    assert seen.stdout.strip() == "[]", f"the isolated Python sees installed packages: {seen.stdout}"
    return python


def run_probe(
    tmp_path: Path,
    python: Path,
    *args: str,
    fakes: dict[str, str] | None = None,
    gpu_nodes: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    path: str | None = None,
) -> ProbeRun:
    """Run the real script in the isolated Python with fake framework packages and simulated /dev contents.

    The environment is built from nothing but what the probe needs: the host's variables (a GPU
    host's CUDA_VISIBLE_DEVICES, LD_LIBRARY_PATH, NUMBA_*, PYTHON*) never reach it, and PATH is an
    empty folder of the test's unless `path` names another (one with a fake nvidia-smi)."""
    site, dev, empty = tmp_path / "site", tmp_path / "dev", tmp_path / "no-tools"
    for folder in (site, dev, empty):
        folder.mkdir(exist_ok=True)
    for node in gpu_nodes:
        (dev / node).touch()
    for name, source in (fakes or {}).items():
        (site / name).mkdir(parents=True, exist_ok=True)
        (site / name / "__init__.py").write_text(source)
    full_env = {
        "PATH": path if path is not None else str(empty),
        "HOME": str(tmp_path),
        "LC_ALL": "C.UTF-8",
        "PYTHONPATH": str(site),
        "PYTHONNOUSERSITE": "1",
        "HELLO_GPU_DEV_ROOT": str(dev),
        **(env or {}),
    }
    started = time.monotonic()
    done = subprocess.run([str(python), str(SCRIPT), *args], capture_output=True, text=True, env=full_env, timeout=300, check=False)
    return ProbeRun(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def alive(pid: int) -> bool:
    """A process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_until(predicate: Any, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


# ------------------------------------------------------------------------------- the script itself


def test_script_is_a_stdlib_only_python39_executable() -> None:
    source = SCRIPT.read_text()
    assert source.startswith("#!/usr/bin/env python3\n")
    assert os.access(SCRIPT, os.X_OK), "copied alone into images as /usr/local/bin/hello-gpu"
    tree = ast.parse(source, feature_version=(3, 9))
    roots = {alias.name.split(".")[0] for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
    roots |= {node.module.split(".")[0] for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}
    assert roots - {"__future__"} <= sys.stdlib_module_names
    assert "annotations" in {a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}


# ------------------------------------------------------------------- (a) nothing installed, no GPU


def test_nothing_installed_reports_every_framework_not_installed(tmp_path: Path, isolated_python: Path) -> None:
    run = run_probe(tmp_path, isolated_python, "--json")  # the isolated Python has no framework; PATH no nvidia-smi
    assert run.returncode == 0, run.stderr
    report = run.report
    assert {"probe", "schema", "host", "frameworks", "summary", "ok"} <= report.keys()
    assert (report["probe"], report["schema"], report["ok"]) == ("hello-gpu", 1, True)
    assert set(report["host"]) == {"python", "platform", "gpu_devices", "nvidia_smi"}
    assert report["host"]["gpu_devices"] == []
    assert report["host"]["nvidia_smi"] is None
    assert list(report["frameworks"]) == list(hello_gpu.FRAMEWORKS)
    for name, result in report["frameworks"].items():
        assert set(result) == RESULT_KEYS
        assert result["framework"] == name
        assert result["status"] == "not-installed"
        assert result["gpu_check"] is None and result["diagnosis"] is None
    assert report["summary"] == {"passed": 0, "failed": 0, "skipped": 0, "not-installed": 5}
    assert set(report["summary"]) == {"passed", "failed", "skipped", "not-installed"}


def test_human_table_without_json(tmp_path: Path, isolated_python: Path) -> None:
    run = run_probe(tmp_path, isolated_python, "--frameworks", "torch,numba", fakes={"numba": FAKE_NUMBA_OLD, "torch": FAKE_TORCH})
    assert run.returncode == 1
    lines = run.stdout.splitlines()
    assert re.match(r"torch\s+skipped\s+9\.9\.9\+fake", lines[2])
    assert re.match(r"\s+ok\s+built for CUDA\s+torch\.version\.cuda = 13\.0", lines[3])  # its CUDA checks without a GPU
    assert re.match(r"numba\s+failed\s+-\s", lines[5])
    assert any("fix:" in line and "numpy==2.0.*" in line for line in lines)
    assert lines[-1] == "summary: 0 passed, 1 failed, 1 skipped, 0 not-installed -> FAILED"
    assert "fake torch chatter" not in run.stdout  # framework output goes to stderr


def test_unknown_framework_is_a_usage_error(tmp_path: Path, isolated_python: Path) -> None:
    run = run_probe(tmp_path, isolated_python, "--frameworks", "torch,pytorch")
    assert run.returncode == 2
    assert "pytorch" in run.stderr and run.stdout == ""


def test_nvidia_smi_is_reported_when_it_answers(tmp_path: Path, isolated_python: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H200, 580.159, 9.0'\necho 'NVIDIA H200, 580.159, 9.0'\n")
    smi.chmod(0o755)
    run = run_probe(tmp_path, isolated_python, "--json", "--frameworks", "cupy", path=str(bin_dir))
    assert run.report["host"]["nvidia_smi"] == {"name": "NVIDIA H200", "driver_version": "580.159", "compute_cap": "9.0"}


def test_parse_nvidia_smi_of_old_drivers_without_compute_cap() -> None:
    assert hello_gpu.parse_nvidia_smi("Tesla T4, 470.82.01\n") == {
        "name": "Tesla T4",
        "driver_version": "470.82.01",
        "compute_cap": None,
    }
    assert hello_gpu.parse_nvidia_smi("\n") is None


# -------------------------------------------------------------- (b) failing, hanging, crashing fakes


def test_numba_numpy_import_error_is_failed_with_the_pin(tmp_path: Path, isolated_python: Path) -> None:
    run = run_probe(tmp_path, isolated_python, "--json", "--frameworks", "numba", fakes={"numba": FAKE_NUMBA_OLD})
    assert run.returncode == 1
    numba = run.result("numba")
    assert numba["status"] == "failed"
    assert numba["reason"] == "ImportError: Numba needs NumPy 2.0 or less. Got NumPy 2.1. (during import)"
    assert "NumPy 2.1" in numba["diagnosis"]["cause"]
    assert "numpy==2.0.*" in numba["diagnosis"]["fix"]
    assert numba["cpu_check"] is None and numba["gpu_check"] is None
    assert run.report["summary"]["failed"] == 1 and run.report["ok"] is False


NUMBA_FAKES = {"numba": FAKE_NUMBA_BUILTIN, "numpy": FAKE_NUMPY}
CUDA_IMAGE = {"NVIDIA_REQUIRE_CUDA": "cuda>=11.8 brand=tesla,driver>=470,driver<471"}


def test_a_numba_cuda_image_without_nvvm_fails_without_a_gpu_with_the_nvvm_diagnosis(tmp_path: Path, isolated_python: Path) -> None:
    # numba's built-in CUDA target on an nvidia/cuda -runtime base: no numba-cuda, no libNVVM, no GPU here
    calls = tmp_path / "calls"
    env = {**CUDA_IMAGE, "FAKE_NVVM": "missing", "FAKE_NUMBA_CALLS": str(calls)}
    run = run_probe(tmp_path, isolated_python, "--json", "--frameworks", "numba", fakes=NUMBA_FAKES, env=env)
    assert run.returncode == 1
    numba = run.result("numba")
    assert numba["status"] == "failed"
    assert numba["cpu_check"]["ok"] is True
    assert numba["reason"].startswith(
        "CUDA check failed without a GPU: compiles a kernel (compile_ptx): NvvmSupportError: libNVVM cannot be found"
    )
    assert "libNVVM" in numba["diagnosis"]["cause"] and "numba-cuda[cu12]" in numba["diagnosis"]["fix"]
    assert calls.read_text().startswith("compile_ptx (float32[:], float32[:]) (7, 5)")


def test_a_numba_cuda_image_with_nvvm_compiles_a_kernel_and_is_skipped_without_a_gpu(tmp_path: Path, isolated_python: Path) -> None:
    calls = tmp_path / "calls"
    env = {"CUDA_VERSION": "11.8.0", "FAKE_NUMBA_CALLS": str(calls)}
    run = run_probe(tmp_path, isolated_python, "--json", "--frameworks", "numba", fakes=NUMBA_FAKES, env=env)
    numba = run.result("numba")
    assert numba["status"] == "skipped", numba["reason"]
    assert numba["offline"] == [{"name": "compiles a kernel (compile_ptx)", "ok": True, "detail": numba["offline"][0]["detail"]}]
    assert "bytes of PTX" in numba["offline"][0]["detail"]
    assert calls.read_text().count("compile_ptx") == 1


def test_the_built_in_target_compiles_for_a_fixed_cc_when_the_cuda_runtime_reports_none(tmp_path: Path, isolated_python: Path) -> None:
    # CUDA 11's runtime reports no supported CC without a driver: the offline compile fixes the target, then restores it
    calls = tmp_path / "calls"
    env = {**CUDA_IMAGE, "FAKE_CUDART": "no-driver", "FAKE_NUMBA_CALLS": str(calls)}
    run = run_probe(tmp_path, isolated_python, "--json", "--frameworks", "numba", fakes=NUMBA_FAKES, env=env)
    numba = run.result("numba")
    assert numba["status"] == "skipped", numba["reason"]
    assert numba["offline"][0]["ok"] is True
    assert calls.read_text().splitlines() == ["compile_ptx (float32[:], float32[:]) (7, 5) forced=(7, 5)", "is_available forced=None"]


def test_a_cpu_numba_image_compiles_no_cuda_kernel(tmp_path: Path, isolated_python: Path) -> None:
    calls = tmp_path / "calls"
    env = {"FAKE_NVVM": "missing", "FAKE_NUMBA_CALLS": str(calls)}
    run = run_probe(tmp_path, isolated_python, "--json", "--frameworks", "numba", fakes=NUMBA_FAKES, env=env)
    numba = run.result("numba")
    assert numba["status"] == "skipped" and numba["offline"] == []
    assert "compile_ptx" not in calls.read_text()


def test_hang_is_killed_at_the_timeout_and_the_others_are_still_reported(tmp_path: Path, isolated_python: Path) -> None:
    pid_file = tmp_path / "pids"
    run = run_probe(
        tmp_path,
        isolated_python,
        "--json",
        "--timeout",
        "2",
        fakes={"jax": FAKE_JAX_HANG, "numba": FAKE_NUMBA_OLD, "torch": FAKE_TORCH},
        env={"FAKE_PID_FILE": str(pid_file)},
    )
    assert run.returncode == 1
    assert run.seconds < 60, "the hang (and its grandchild holding the pipes) must be killed at 2 s"
    jax = run.result("jax")
    assert jax["status"] == "failed"
    assert jax["reason"] == "timed out after 2 s (during import)"
    assert jax["diagnosis"]["cause"].startswith("the check did not finish within 2 s")
    assert 2 <= jax["seconds"] < 30
    assert run.result("numba")["status"] == "failed"  # checked after the hang, still reported
    assert run.result("torch")["status"] == "skipped"
    assert run.report["summary"] == {"passed": 0, "failed": 2, "skipped": 1, "not-installed": 2}
    pids = [int(pid) for pid in pid_file.read_text().split()]
    assert wait_until(lambda: not any(alive(pid) for pid in pids)), "hung child or grandchild left running"


def test_segfault_is_failed_as_a_crash_and_the_others_are_still_reported(tmp_path: Path, isolated_python: Path) -> None:
    run = run_probe(tmp_path, isolated_python, "--json", fakes={"cupy": FAKE_CUPY_SEGV, "torch": FAKE_TORCH, "numba": FAKE_NUMBA_OLD})
    assert run.returncode == 1
    cupy = run.result("cupy")
    assert cupy["status"] == "failed"
    assert cupy["reason"] == "crashed with signal SIGSEGV (during import)"
    assert "SIGSEGV" in cupy["diagnosis"]["cause"]
    assert run.result("torch")["status"] == "skipped"
    assert run.result("numba")["status"] == "failed"
    assert "Segmentation fault" in run.stderr  # the child's faulthandler output is passed on to stderr


# ---------------------------------------------------- (c) a fake torch with and without a GPU host


@pytest.mark.parametrize(
    ("mode", "nodes", "flags", "status", "reason"),
    [
        ("no-gpu", (), (), "skipped", "no GPU on this host (no /dev/nvidiactl, /dev/nvidia0 or /dev/kfd); torch sees no GPU"),
        ("no-gpu", ("nvidiactl",), (), "failed", "torch sees no GPU (torch.cuda.is_available() is False; RuntimeError: Found no"),
        ("no-gpu", ("kfd",), (), "failed", "torch sees no GPU"),
        ("no-gpu", (), ("--require-gpu",), "failed", "no GPU on this host (no /dev/nvidiactl, /dev/nvidia0 or /dev/kfd) and --req"),
        ("cpu-only", (), (), "skipped", "no GPU on this host (no /dev/nvidiactl, /dev/nvidia0 or /dev/kfd); CPU-only build of torch"),
        ("cpu-only", ("nvidia0",), (), "failed", "CPU-only build of torch (torch.version.cuda is None), although this host has"),
        ("gpu-ok", ("nvidiactl", "nvidia0"), (), "passed", ""),
        ("gpu-wrong", ("nvidiactl", "nvidia0"), (), "failed", "GPU result disagrees with the CPU reference: 256x256 float32"),
        ("cpu-wrong", ("nvidiactl",), (), "failed", "CPU check failed: 16x16 float32 matmul on the CPU DIFFERS"),
    ],
)
def test_fake_torch_verdicts(
    tmp_path: Path, isolated_python: Path, mode: str, nodes: tuple[str, ...], flags: tuple[str, ...], status: str, reason: str
) -> None:
    run = run_probe(
        tmp_path,
        isolated_python,
        "--json",
        "--frameworks",
        "torch",
        *flags,
        fakes={"torch": FAKE_TORCH},
        gpu_nodes=nodes,
        env={"FAKE_TORCH_MODE": mode},
    )
    torch = run.result("torch")
    assert torch["status"] == status
    assert torch["reason"].startswith(reason)
    assert run.returncode == (1 if status == "failed" else 0)
    assert run.report["host"]["gpu_devices"] == [str(tmp_path / "dev" / node) for node in sorted(nodes)]
    assert torch["version"] == "9.9.9+fake"
    assert torch["build"] == {"cuda": None if mode == "cpu-only" else "13.0", "hip": None, "cudnn": 91002}
    assert torch["cpu_check"]["ok"] is (mode != "cpu-wrong")
    assert (torch["diagnosis"] is not None) is (status == "failed")
    if nodes and mode in {"no-gpu", "cpu-only"}:  # the reason names the nodes the framework failed to use
        assert all(str(tmp_path / "dev" / node) in torch["reason"] for node in nodes)


def test_fake_torch_on_a_gpu_reports_the_device_and_the_error(tmp_path: Path, isolated_python: Path) -> None:
    run = run_probe(
        tmp_path,
        isolated_python,
        "--json",
        "--frameworks",
        "torch",
        fakes={"torch": FAKE_TORCH},
        gpu_nodes=("nvidiactl",),
        env={"FAKE_TORCH_MODE": "gpu-ok"},
    )
    torch = run.result("torch")
    assert torch["status"] == "passed"
    assert torch["devices"] == [{"name": "Fake GPU", "capability": "9.0", "memory_gb": 141.0}]
    assert torch["gpu_check"]["ok"] is True and torch["gpu_check"]["max_abs_err"] == 0.0
    assert "256x256 float32 matmul on cuda:0 matches" in torch["gpu_check"]["detail"]
    wrong = run_probe(
        tmp_path,
        isolated_python,
        "--json",
        "--frameworks",
        "torch",
        fakes={"torch": FAKE_TORCH},
        gpu_nodes=("nvidiactl",),
        env={"FAKE_TORCH_MODE": "gpu-wrong"},
    ).result("torch")
    assert wrong["gpu_check"] == {**wrong["gpu_check"], "ok": False, "max_abs_err": 1.0}
    assert wrong["diagnosis"]["cause"].startswith("the GPU computed a different result")


def test_a_framework_without_a_driver_on_a_gpu_host_gets_the_driver_diagnosis(tmp_path: Path, isolated_python: Path) -> None:
    torch = run_probe(
        tmp_path, isolated_python, "--json", "--frameworks", "torch", fakes={"torch": FAKE_TORCH}, gpu_nodes=("nvidiactl",)
    ).result("torch")
    assert torch["status"] == "failed"
    assert "libcuda is not mounted" in torch["diagnosis"]["cause"]
    assert "--gpus all" in torch["diagnosis"]["fix"]


@given(
    cpu_ok=st.booleans(),
    no_gpu=st.one_of(st.none(), st.text(max_size=20)),
    nodes=st.lists(st.sampled_from(["/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd"]), unique=True),
    require_gpu=st.booleans(),
)
def test_no_gpu_check_is_never_passed(cpu_ok: bool, no_gpu: str | None, nodes: list[str], require_gpu: bool) -> None:
    status, reason = hello_gpu.verdict(None, {"ok": cpu_ok, "detail": "x"}, None, no_gpu, nodes, require_gpu)
    assert status in {"skipped", "failed"}
    assert (status == "skipped") is (cpu_ok and not nodes and not require_gpu)
    assert reason


# --------------------------------------------------------------------------------- (d) diagnose()

SAMPLES: list[tuple[str, str]] = [
    ("libnccl.so.N: cannot open shared object file: not in the image's NVIDIA wheels", "the CUDA library libnccl is not in the image"),
    ("cudnn 9.10.2 loads, but the lock pins 9.24.0.43", "the image loads cudnn 9.10.2, not the 9.24.0.43 its lock pins"),
    ("RuntimeError: CUDA driver version is insufficient for CUDA runtime version", "older than the CUDA runtime"),
    (
        "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, please update your driver to a newer"
        " version, or use an earlier cuda container: unknown",
        "NVIDIA_REQUIRE_CUDA (cuda>=12.4)",
    ),
    ('docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].', "Container Toolkit"),
    ("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory", "libcudart"),
    ("Could not load dynamic library 'libcudnn.so.8'; dlerror: libcudnn.so.8: cannot open shared object file", "cuDNN"),
    ("OSError: libcuda.so.1: cannot open shared object file: No such file or directory", "libcuda is not mounted"),
    ("CUDA error: no kernel image is available for execution on the device", "compute capability"),
    ("ImportError: Numba needs NumPy 1.26 or less. Got NumPy 2.0.", "numpy==1.26.*"),
    ("NvvmSupportError: libNVVM cannot be found. Do `conda install cudatoolkit`:", "numba-cuda[cu13]"),
    ("AttributeError: module 'numpy' has no attribute 'row_stack'", "numpy<2.5"),
    ("hipErrorNoDevice: Unable to open /dev/kfd read-write: Permission denied", "--group-add render"),
    ("Failed to initialize NVML: Unknown Error", "device cgroup"),
    ("Failed to initialize NVML: Insufficient Permissions", "label=disable"),
    ("cudaErrorNoDevice: no CUDA-capable device is detected", "CUDA_VISIBLE_DEVICES"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "XLA_PYTHON_CLIENT_PREALLOCATE"),
    ("timed out after 180 s (during gpu check)", "within 180 s"),
    ("crashed with signal SIGSEGV (during import)", "killed by SIGSEGV"),
    ("CPU-only build of torch (torch.version.cuda is None), although this host has /dev/nvidiactl", "GPU wheel"),
    ("CPU check failed: 16x16 float32 matmul on the CPU DIFFERS from the reference", "pip check"),
    ("GPU result disagrees with the CPU reference: ...", "Xid"),
    ("jax sees no GPU (Unknown backend gpu), although this host has /dev/nvidia0", "does not match the driver"),
    ("no GPU on this host (no /dev/nvidiactl, /dev/nvidia0 or /dev/kfd) and --require-gpu was given", "--device /dev/kfd"),
]


@pytest.mark.parametrize(("message", "expected"), SAMPLES)
def test_diagnose_each_message(message: str, expected: str) -> None:
    found = hello_gpu.diagnose(message)
    assert found is not None
    cause, fix = found
    assert expected in cause + " " + fix


def test_every_diagnosis_row_is_exercised_and_actionable() -> None:
    hit = set()
    for message, _ in SAMPLES:
        rows = [i for i, (pattern, _, _) in enumerate(hello_gpu.DIAGNOSES) if re.search(pattern, message, re.IGNORECASE)]
        hit.add(rows[0])
    assert hit == set(range(len(hello_gpu.DIAGNOSES)))
    for _, cause, fix in hello_gpu.DIAGNOSES:
        assert cause and not cause.endswith(".")
        assert fix[0].isupper() and fix.endswith(".") and "\n" not in fix


def test_diagnose_other_specifics() -> None:
    assert hello_gpu.diagnose("ValueError: something unrelated") is None
    assert hello_gpu.diagnose("CUDA_ERROR_NO_DEVICE") is not None
    assert hello_gpu.diagnose("RESOURCE_EXHAUSTED: CUDA_ERROR_OUT_OF_MEMORY: out of memory") is not None
    _, fix = hello_gpu.diagnose("Numba needs NumPy 2.0 or less. Got NumPy 2.1.") or ("", "")
    assert fix == "Pin NumPy to 2.0 or older (`numpy==2.0.*`) or upgrade numba to a release that supports NumPy 2.1."
    cause, _ = hello_gpu.diagnose("unsatisfied condition: cuda>=13.0.") or ("", "")
    assert cause.endswith("(cuda>=13.0)")
    # the specific cause wins over the generic "sees no GPU" row it comes wrapped in
    cause, _ = hello_gpu.diagnose("numba sees no GPU (CudaSupportError: CUDA driver library cannot be found)") or ("", "")
    assert "libcuda" in cause


# ------------------------------------------------------- CUDA libraries, loaded and versioned without a GPU

# Stand-ins for the NVIDIA wheels' libraries: the same symbols and signatures, fixed versions.
FAKE_LIBRARIES = {
    ("cuda_runtime", "libcudart.so.13"): "int cudaRuntimeGetVersion(int* v) { *v = 13000; return 0; }",
    ("cudnn", "libcudnn.so.9"): "unsigned long cudnnGetVersion(void) { return 92400; }",
    ("nccl", "libnccl.so.2"): "int ncclGetVersion(int* v) { *v = 23007; return 0; }",
    ("cublas", "libcublas.so.13"): "int cublasGetProperty(int t, int* v) { static const int p[] = {13, 1, 1}; *v = p[t]; return 0; }",
    ("cuda_nvrtc", "libnvrtc-builtins.so.13.0"): "int nvrtc_builtins_stand_in(void) { return 1; }",
    ("cuda_nvrtc", "libnvrtc.so.13"): (
        "int nvrtcVersion(int* a, int* b) { *a = 13; *b = 0; return 0; }\n"
        "int nvrtcCreateProgram(void** p, const char* s, const char* n, int k, void* h, void* i) { *p = (void*)1; return 0; }\n"
        "int nvrtcCompileProgram(void* p, int n, const char** o) { return 0; }\n"
        "int nvrtcGetPTXSize(void* p, unsigned long* s) { *s = 1234; return 0; }\n"
        "int nvrtcDestroyProgram(void** p) { return 0; }"
    ),
}
LOCKED = {"cublas": "13.1.1.3", "cuda-runtime": "13.0.96", "cudnn": "9.24.0.43", "nccl": "2.30.7", "nvrtc": "13.0.88"}


@pytest.fixture(scope="module")
def fake_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """site/nvidia/<pkg>/lib/<soname>, compiled from FAKE_LIBRARIES, as the nvidia-* wheels lay them out."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.fail("no C compiler: .ci/docker-up.sh installs gcc for these tests")
    site = tmp_path_factory.mktemp("site")
    for (package, soname), source in FAKE_LIBRARIES.items():
        lib = site / "nvidia" / package / "lib"
        lib.mkdir(parents=True, exist_ok=True)
        (lib / "fake.c").write_text(source + "\n")
        subprocess.run([compiler, "-shared", "-fPIC", "-o", str(lib / soname), str(lib / "fake.c")], check=True, capture_output=True)
    return site


def copy_site(fake_wheels: Path, tmp_path: Path, drop: str | None = None) -> Path:
    site = tmp_path / "site"
    shutil.copytree(fake_wheels, site)
    if drop:
        for path in site.glob(f"nvidia/*/lib/{drop}"):
            path.unlink()
    return site


def expect_args(libraries: dict[str, str]) -> list[str]:
    return [arg for name, version in sorted(libraries.items()) for arg in ("--expect", f"{name}={version}")]


def test_locked_cuda_libraries_load_at_their_versions_and_nvrtc_compiles(fake_wheels: Path, tmp_path: Path, isolated_python: Path) -> None:
    copy_site(fake_wheels, tmp_path)
    run = run_probe(tmp_path, isolated_python, "--json", "--frameworks", "torch", *expect_args(LOCKED))
    assert run.returncode == 0, run.stderr
    cuda = run.report["cuda"]
    assert cuda["ok"] and cuda["diagnosis"] is None
    found = {c["name"]: c["found"] for c in cuda["checks"] if "found" in c}
    assert found == {"cublas": "13.1.1", "cuda-runtime": "13.0", "cudnn": "9.24.0", "nccl": "2.30.7", "nvrtc": "13.0"}
    assert all(c["library"].startswith(str(tmp_path)) for c in cuda["checks"] if "library" in c)
    compiled = [c for c in cuda["checks"] if c["name"] == "nvrtc compiles a kernel"]
    assert compiled == [{"name": "nvrtc compiles a kernel", "ok": True, "detail": "1234 bytes of PTX for compute_75"}]
    assert "cuda        ok" in run_probe(tmp_path, isolated_python, "--frameworks", "torch", *expect_args(LOCKED)).stdout


def test_a_deleted_libcudnn_fails_the_probe_with_the_cudnn_diagnosis(fake_wheels: Path, tmp_path: Path, isolated_python: Path) -> None:
    copy_site(fake_wheels, tmp_path, drop="libcudnn.so.*")
    run = run_probe(tmp_path, isolated_python, "--json", "--frameworks", "torch", *expect_args(LOCKED))
    assert run.returncode == 1
    report = run.report
    assert report["ok"] is False
    bad = [c for c in report["cuda"]["checks"] if not c["ok"]]
    assert [c["name"] for c in bad] == ["cudnn"]
    assert "libcudnn.so.N: cannot open shared object file" in bad[0]["detail"]
    assert report["cuda"]["diagnosis"]["cause"] == "the cuDNN library is not in the image (or not on the loader path)"


def test_nvrtc_without_its_builtins_cannot_compile(fake_wheels: Path, tmp_path: Path, isolated_python: Path) -> None:
    copy_site(fake_wheels, tmp_path, drop="libnvrtc-builtins.so.*")
    run = run_probe(tmp_path, isolated_python, "--json", "--frameworks", "torch", *expect_args(LOCKED))
    bad = [c for c in run.report["cuda"]["checks"] if not c["ok"]]
    assert [c["name"] for c in bad] == ["nvrtc compiles a kernel"]
    assert run.report["cuda"]["diagnosis"]["cause"] == "the CUDA library libnvrtc-builtins is not in the image (or not on the loader path)"


def test_a_library_at_another_version_than_the_lock_fails(fake_wheels: Path, tmp_path: Path, isolated_python: Path) -> None:
    copy_site(fake_wheels, tmp_path)
    run = run_probe(tmp_path, isolated_python, "--json", "--frameworks", "torch", *expect_args({**LOCKED, "cudnn": "9.10.2.21"}))
    assert run.returncode == 1
    bad = [c for c in run.report["cuda"]["checks"] if not c["ok"]]
    assert bad[0]["detail"] == "cudnn 9.24.0 loads, but the lock pins 9.10.2.21"
    assert "another copy of the library" in run.report["cuda"]["diagnosis"]["cause"]


def test_no_expected_libraries_means_no_library_checks(tmp_path: Path, isolated_python: Path) -> None:
    run = run_probe(tmp_path, isolated_python, "--json", "--frameworks", "torch")
    assert run.report["cuda"] == {"checks": [], "ok": True, "diagnosis": None}


def test_an_unknown_library_is_a_usage_error(tmp_path: Path, isolated_python: Path) -> None:
    run = run_probe(tmp_path, isolated_python, "--expect", "cufft=12.0", "--frameworks", "torch")
    assert run.returncode == 2
    assert "LIB one of cuda-runtime, cudnn, nccl, cublas, nvrtc" in run.stderr


def test_the_probe_checks_every_library_the_lock_reports() -> None:
    """One list of CUDA libraries: what the lock extracts (image.json "libraries") is what the probe loads."""
    assert set(hello_gpu.CUDA_LIBRARIES) == set(LIBRARIES)


def test_major_of_a_major_wide_wheel() -> None:
    assert hello_gpu.major_in(["jax-cuda13-plugin", "jax-cuda13-pjrt"]) == "13"
    assert hello_gpu.major_in(["cupy-cuda12x"]) == "12"
    assert hello_gpu.major_in(["cupy-rocm-7-0"]) is None


@pytest.mark.parametrize(
    ("found", "expected", "same"),
    [
        ("13.1.0", "13.1", True),  # --expect cublas=13.1 against cuBLAS 13.1.0 (issue 39)
        ("13.0", "13", True),  # --expect cuda-runtime=13 against the runtime's 13.0
        ("9.24.0", "9.24.0.43", True),  # the library says fewer parts than the lock pins
        ("13.0", "13.0.96", True),
        ("13.1", "13.01", True),  # values, not text
        ("13.1", "13", False),  # 13 is 13.0, not any 13.x
        ("13.1.0", "13.1.1", False),
        ("9.10.2", "9.24.0.43", False),
        ("2.30.7", "2.3", False),  # not a text prefix either
    ],
)
def test_versions_are_compared_as_values(found: str, expected: str, same: bool) -> None:
    assert hello_gpu.same_release(found, expected) is same


def test_expect_takes_a_version_as_a_value(fake_wheels: Path, tmp_path: Path, isolated_python: Path) -> None:
    copy_site(fake_wheels, tmp_path)
    loose = {"cuda-runtime": "13", "cublas": "13.1.1.0", "cudnn": "9.24", "nccl": "2.30.7", "nvrtc": "13"}
    run = run_probe(tmp_path, isolated_python, "--json", "--frameworks", "torch", *expect_args(loose))
    assert run.returncode == 0 and run.report["cuda"]["ok"], run.report["cuda"]
    newer = run_probe(tmp_path, isolated_python, "--json", "--frameworks", "torch", *expect_args({"cuda-runtime": "13.1"}))
    assert [c["detail"] for c in newer.report["cuda"]["checks"]] == ["cuda-runtime 13.0 loads, but the lock pins 13.1"]


def test_a_version_too_long_to_be_one_is_a_usage_error(tmp_path: Path, isolated_python: Path) -> None:
    run = run_probe(tmp_path, isolated_python, "--expect", "cudnn=" + "9" * 5000, "--frameworks", "torch")
    assert run.returncode == 2 and "expected LIB=VERSION" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize(
    ("planned", "found", "same"),
    [
        ("13.0", "13.0", True),
        ("13", "13.2", True),
        ("13.0", "13.00", True),
        ("12.6", "12.8", False),
        ("13", None, False),
        ("13", "x", False),
    ],
)
def test_the_smoke_check_compares_a_builds_cuda_as_values(planned: str, found: str | None, same: bool) -> None:
    from builder.smoke.checks.test_image import _same_release

    assert _same_release(planned, found) is same


def test_a_shadowed_distribution_reports_the_version_that_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the GPU machine numpy 2.4.6 was carried on PYTHONPATH over the interpreter's 2.5.2: the probe
    reported numba's numpy as 2.4.6 (what imported) while the summary said 2.5.2, the shadowed copy."""
    for folder, version in (("first", "2.4.6"), ("second", "2.5.2")):
        info = tmp_path / folder / f"numpy-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: numpy\nVersion: {version}\n", encoding="utf-8")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "first"), str(tmp_path / "second")])
    assert hello_gpu.dists("numpy") == {"numpy": "2.4.6"}
    assert hello_gpu.dist_version("numpy") == "2.4.6"
