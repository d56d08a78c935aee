#!/usr/bin/env python3
"""hello-gpu: prove each installed ML framework imports, computes on the CPU and computes on the GPU.

Stdlib only and a single file: it is copied alone into every image as /usr/local/bin/hello-gpu, and the
builder imports DIAGNOSES / diagnose() from it so failure diagnosis has one source of truth.
Each framework is checked in its own subprocess, one after another (GPU memory), so a segfault or a
hang in one framework cannot hide the verdict on the others. No GPU on the host is "skipped", never
"passed"; a framework that sees no GPU on a host that has one is "failed".

    hello-gpu [--json] [--frameworks torch,jax] [--timeout SECONDS] [--require-gpu]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import glob
import importlib
import importlib.metadata
import importlib.util
import json
import math
import operator
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

SCHEMA = 1
FRAMEWORKS: tuple[str, ...] = ("torch", "tensorflow", "jax", "cupy", "numba")
STATUSES: tuple[str, ...] = ("passed", "failed", "skipped", "not-installed")
DEFAULT_TIMEOUT_S = 180.0
LIBRARIES_CHILD = "cuda-libraries"  # the child that loads the CUDA libraries (--one cuda-libraries)
DEV_ROOT_ENV = "HELLO_GPU_DEV_ROOT"  # where GPU device nodes are looked for; tests point it at a temp dir
GPU_NODE = re.compile(r"nvidiactl|nvidia\d+|kfd|dxg")  # dxg: WSL2
NO_GPU_ON_HOST = "no GPU on this host (no /dev/nvidiactl, /dev/nvidia0 or /dev/kfd)"
CPU_N = 16  # matmul size of the CPU check, against a pure-Python reference
GPU_N = 256  # matmul size of the GPU check
VECTOR_N = 1_000_000  # elements of the cupy / numba vector checks
REL_TOL = 1e-3  # of the largest reference value; inputs are multiples of 1/4, exact even in TF32/bf16
KERNEL_SOURCE = (
    'extern "C" __global__ void scale(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }\n'
)

# (regex searched case-insensitively, cause, fix); first match wins, so specific rows come first.
# Cause and fix may use \1-style groups of the regex. Each fix is one actionable sentence.
DIAGNOSES: tuple[tuple[str, str, str], ...] = (
    (
        r"CUDA driver version is insufficient for CUDA runtime version"
        r"|NVIDIA driver on your system is too old|cudaErrorInsufficientDriver",
        "the host's NVIDIA driver (libcuda) is older than the CUDA runtime inside the image",
        "Upgrade the host driver to one that supports the image's CUDA version, or use an image built for an older CUDA.",
    ),
    (
        r"unsatisfied condition: cuda>=\s*(\d+(?:\.\d+)*)",
        "the host driver does not meet the image's NVIDIA_REQUIRE_CUDA (cuda>=\\1)",
        "Upgrade the host NVIDIA driver to one that supports CUDA \\1, or use an image built for an older"
        " CUDA (NVIDIA_DISABLE_REQUIRE=true only skips the check).",
    ),
    (
        r'could not select device driver "" with capabilities: \[\[gpu\]\]',
        "Docker has no GPU device driver: the NVIDIA Container Toolkit is not installed or Docker's runtime is not configured for it",
        "Install nvidia-container-toolkit, run `sudo nvidia-ctk runtime configure --runtime=docker` and restart Docker.",
    ),
    (
        r"libcudart\.so[\w.]*: cannot open shared object file",
        "the CUDA runtime library libcudart is not in the image (or not on the loader path)",
        "Install the CUDA runtime the framework was built for (a CUDA runtime base image or the framework's nvidia-cuda-runtime wheel).",
    ),
    (
        r"libcudnn[\w.]*\.so[\w.]*: cannot open shared object file",
        "the cuDNN library is not in the image (or not on the loader path)",
        "Install the cuDNN the framework was built for (a -cudnn base image or the nvidia-cudnn wheel).",
    ),
    (
        r"lib(nccl|cublas|cublasLt|nvrtc-builtins|nvrtc)[\w.]*\.so[\w.]*: cannot open shared object file",
        "the CUDA library lib\\1 is not in the image (or not on the loader path)",
        "Rebuild the image from its lock (`builder build --no-cache`) so the nvidia-* wheel that ships lib\\1 is whole.",
    ),
    (
        r"(\S+) ([\d.]+) loads, but the lock pins ([\d.]+)",
        "the image loads \\1 \\2, not the \\3 its lock pins (another copy of the library shadows the locked wheel)",
        "Remove the other copy of \\1 (a system package or an LD_LIBRARY_PATH entry) or rebuild the image from its lock.",
    ),
    (
        r"libcuda\.so[\w.]*: cannot open shared object file|CUDA driver library cannot be found"
        r"|Found no NVIDIA driver on your system",
        "the NVIDIA driver library libcuda is not mounted into the container (it comes from the host driver, not from the image)",
        "Run the container with `--gpus all` (or the NVIDIA runtime) on a host with the NVIDIA driver and Container Toolkit installed.",
    ),
    (
        r"no kernel image is available for execution on the device",
        "the framework build has no kernels for this GPU's compute capability",
        "Install a build of the framework compiled for this GPU's compute capability (see"
        " `nvidia-smi --query-gpu=compute_cap --format=csv`).",
    ),
    (
        r"Numba needs NumPy (\d+\.\d+) or less\. Got NumPy (\d+\.\d+)",
        "this numba supports NumPy up to \\1 but NumPy \\2 is installed",
        "Pin NumPy to \\1 or older (`numpy==\\1.*`) or upgrade numba to a release that supports NumPy \\2.",
    ),
    (
        r"libNVVM cannot be found|libnvvm\.so[\w.]*: cannot open shared object file",
        "numba's CUDA target cannot find libNVVM, the compiler library every @cuda.jit kernel needs (an nvidia/cuda -runtime"
        " base has none, and numba's built-in target does not look in the nvidia-cuda-nvcc wheels)",
        "Bring libNVVM from a wheel: `numba-cuda[cu12]` / `numba-cuda[cu13]` on CUDA 12/13; on CUDA 11 the nvidia-cuda-nvcc-cu11"
        " wheel with its nvvm folder linked at /usr/local/cuda/nvvm (and libnvvm.so.4 beside libnvvm.so); or use a -devel base.",
    ),
    (
        r"module 'numpy' has no attribute 'row_stack'",
        "NumPy 2.5 removed np.row_stack, which numba-cuda <=0.30.4 (and numba <0.67) still references",
        "Pin numpy<2.5 while numba-cuda <=0.30.4 or numba <0.67 is installed.",
    ),
    (
        r"Unable to open /dev/kfd read-write: Permission denied|/dev/kfd\W.*permission denied"
        r"|permission denied\W.*/dev/kfd",
        "the container user may not open /dev/kfd (owned by the render group, sometimes video)",
        "Run with `--group-add render --group-add video` (the host's numeric GIDs if the image lacks those groups).",
    ),
    (
        r"Failed to initialize NVML: Unknown Error",
        "the container lost access to the GPU device cgroup (typically after `systemctl daemon-reload` with the systemd cgroup driver)",
        "Restart the container, and for a lasting fix use the cgroupfs driver, pass the /dev/nvidia* nodes with --device, or use CDI.",
    ),
    (
        r"Failed to initialize NVML: Insufficient Permissions",
        "SELinux (or the device permissions) keeps the container from the NVIDIA device nodes",
        "Run with `--security-opt=label=disable` or allow the NVIDIA devices in the SELinux policy.",
    ),
    (
        r"CUDA_ERROR_NO_DEVICE|no CUDA-capable device is detected|cudaErrorNoDevice|No CUDA GPUs are available",
        "CUDA finds no GPU: the container has no GPU or CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES hides it",
        "Run with `--gpus all` and leave CUDA_VISIBLE_DEVICES unset or set to a GPU that exists.",
    ),
    (
        r"out of memory|OUT_OF_MEMORY",
        "the GPU ran out of memory (other processes hold it, or a framework preallocated it all)",
        "Free the GPU (see `nvidia-smi` for other processes) and for JAX set XLA_PYTHON_CLIENT_PREALLOCATE=false.",
    ),
    (
        r"timed out after (\d+(?:\.\d+)?) s",
        "the check did not finish within \\1 s (a hang in driver initialisation, device access or first-use compilation)",
        "Rerun with a larger --timeout, and if it still hangs check that `nvidia-smi` (or `rocm-smi`) answers inside the container.",
    ),
    (
        r"crashed with signal (\w+)",
        "the check process was killed by \\1: a native crash in the framework or its GPU libraries",
        "Rerun with PYTHONFAULTHANDLER=1 to see where it crashed, and make sure the framework's wheel"
        " matches the image's Python, CUDA/ROCm version and the host driver.",
    ),
    (
        r"CPU-only build",
        "the installed framework was built without CUDA/ROCm support, so it can never use the GPU",
        "Install the framework's CUDA or ROCm build (its GPU wheel or index) instead of the CPU one.",
    ),
    (
        r"CPU check failed",
        "the framework computes wrong results even on the CPU (a broken or ABI-mismatched install)",
        "Reinstall the framework and NumPy from the image's pinned requirements and run `pip check`.",
    ),
    (
        r"GPU result disagrees",
        "the GPU computed a different result than the CPU reference (faulty GPU, driver or kernel)",
        "Check `nvidia-smi -q` and the kernel log for Xid/ECC errors and rerun on another GPU before trusting this host or image.",
    ),
    (
        r"sees no GPU",
        "the framework found no usable GPU although the host has GPU device nodes (usually a"
        " framework build that does not match the driver)",
        "Match the framework's CUDA/ROCm build to the host driver (compare `nvidia-smi` with the build versions reported here).",
    ),
    (
        r"no GPU on this host",
        "the container has no GPU device nodes",
        "Run the container with `--gpus all` (NVIDIA) or `--device /dev/kfd --device /dev/dri` (ROCm).",
    ),
)


def diagnose(text: str) -> tuple[str, str] | None:
    """(cause, fix) of the first DIAGNOSES row whose regex occurs in text, or None."""
    for pattern, cause, fix in DIAGNOSES:
        match = re.search(pattern, text, re.IGNORECASE)
        if match:
            return match.expand(cause), match.expand(fix)
    return None


# ---------------------------------------------------------------------------------------- host


def gpu_device_nodes(root: str | None = None) -> list[str]:
    """GPU device nodes present (NVIDIA, AMD KFD, WSL), looked for under $HELLO_GPU_DEV_ROOT or /dev."""
    root = root if root is not None else os.environ.get(DEV_ROOT_ENV, "/dev")
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    return [os.path.join(root, name) for name in names if GPU_NODE.fullmatch(name)]


def parse_nvidia_smi(text: str) -> dict[str, str | None] | None:
    """First GPU of `nvidia-smi --query-gpu=name,driver_version[,compute_cap] --format=csv,noheader`."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    cells = [cell.strip() for cell in lines[0].split(",")]
    cells += [""] * (3 - len(cells))
    return {"name": cells[0], "driver_version": cells[1] or None, "compute_cap": cells[2] or None}


def nvidia_smi() -> dict[str, str | None] | None:
    """What nvidia-smi says about the first GPU, or None when it is absent or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    for fields in ("name,driver_version,compute_cap", "name,driver_version"):  # old drivers lack compute_cap
        try:
            done = subprocess.run(
                [exe, f"--query-gpu={fields}", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        if done.returncode == 0:
            return parse_nvidia_smi(done.stdout)
    return None


def installed(name: str) -> bool:
    """Whether a framework is installed, found without importing it."""
    try:
        if importlib.util.find_spec(name) is not None:
            return True
    except (ImportError, ValueError):
        return True  # something is there but odd: let the check report what importing it does
    return bool(dists(name))  # a distribution without its module: a broken install, the check fails


DIST_NAMES = {
    "torch": r"torch",
    "tensorflow": r"tensorflow(-cpu|-gpu|-rocm|-intel)?|tf-nightly(-cpu|-gpu)?|intel-tensorflow",
    "jax": r"jax",
    "cupy": r"cupy(-cuda\d+x?|-rocm-[\d-]+)?",
    "numba": r"numba",
    "jax-plugins": r"jax-(cuda|rocm)\d+-(plugin|pjrt)",
}


def dists(kind: str) -> dict[str, str]:
    """Installed distributions (normalised name -> version) of one DIST_NAMES kind, or of one exact name.
    Where one is installed twice (a folder on PYTHONPATH over the interpreter's own), the first on
    sys.path, the one `import` loads, is the one reported; the shadowed copy's version is not."""
    pattern = re.compile(DIST_NAMES.get(kind, re.escape(kind)))
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = re.sub(r"[-_.]+", "-", str(dist.metadata["Name"] or "")).lower()
        if pattern.fullmatch(name):
            found.setdefault(name, str(dist.version))
    return dict(sorted(found.items()))


def dist_version(kind: str) -> str | None:
    """Version of the first installed distribution of a kind, or None."""
    return next(iter(dists(kind).values()), None)


# ---------------------------------------------------------------------------------- arithmetic


def matrix(n: int, p: int, q: int) -> list[list[float]]:
    """Deterministic n x n values, multiples of 1/4 in [-1.25, 1.25]: exact in float32, TF32 and bf16."""
    return [[((i * p + j * q) % 11 - 5) / 4 for j in range(n)] for i in range(n)]


def matmul(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    """Pure-Python reference matmul."""
    columns = [[row[j] for row in b] for j in range(len(b[0]) if b else 0)]  # no zip(): 3.9 has no strict=
    return [[sum(map(operator.mul, row, col)) for col in columns] for row in a]


def flatten(values: Any) -> list[float]:
    """Nested lists (from .tolist()) to one flat list of floats."""
    if isinstance(values, (list, tuple)):
        return [x for item in values for x in flatten(item)]
    return [float(values)]


def compare(got: Any, want: Any, what: str) -> dict[str, Any]:
    """A check record: got (framework result) against want (reference) within REL_TOL of its scale."""
    flat_got, flat_want = flatten(got), flatten(want)
    if len(flat_got) != len(flat_want):
        detail = f"{what}: {len(flat_got)} values, expected {len(flat_want)}"
        return {"ok": False, "max_abs_err": None, "detail": detail}
    errors = [abs(d) for d in map(operator.sub, flat_got, flat_want)]
    worst = max(errors, default=0.0)
    if not all(math.isfinite(e) for e in errors):
        return {"ok": False, "max_abs_err": None, "detail": f"{what}: non-finite values in the result"}
    tolerance = REL_TOL * max([1.0] + [abs(w) for w in flat_want])
    verdict = "matches" if worst <= tolerance else "DIFFERS from"
    return {
        "ok": worst <= tolerance,
        "max_abs_err": worst,
        "detail": f"{what} {verdict} the reference (max abs err {worst:g}, tolerance {tolerance:g})",
    }


# ------------------------------------------------------------------- per-framework checks (child)


@dataclass
class Probe:
    """What one framework's check found so far; emitted as a JSON line at each stage, so a crash keeps it."""

    framework: str
    sink: Callable[[dict[str, Any]], None] = field(repr=False, compare=False)
    stage: str = "start"
    version: str | None = None
    build: dict[str, Any] = field(default_factory=dict)
    devices: list[dict[str, Any]] = field(default_factory=list)
    cpu_check: dict[str, Any] | None = None
    gpu_check: dict[str, Any] | None = None
    no_gpu: str | None = None  # why no GPU check ran: the framework found no GPU to use
    offline: list[dict[str, Any]] = field(default_factory=list)  # CUDA checks that need no GPU (built-for CUDA, a kernel compiled)
    cuda_build: str | None = None  # the CUDA the framework's build targets, as it reports it ("13.0", or "13" for a major-wide wheel)
    error: str | None = None  # full text of the exception that stopped the check
    error_stage: str | None = None  # the stage it stopped in

    def enter(self, stage: str) -> None:
        self.stage = stage
        self.sink({k: v for k, v in vars(self).items() if k != "sink"})


def offline_check(p: Probe, name: str, fn: Callable[[], str]) -> None:
    """Run one check that needs no GPU; its detail on success, the error on failure (never raises)."""
    try:
        p.offline.append({"name": name, "ok": True, "detail": fn()})
    except Exception as exc:  # the failure is the finding
        p.offline.append({"name": name, "ok": False, "detail": one_line(exc)})


def one_line(exc: BaseException | str) -> str:
    """An error as one line, with its type, at most 400 characters."""
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    return " ".join(line.strip() for line in text.splitlines() if line.strip())[:400]


def attempt(fn: Callable[[], Any]) -> Any:
    """fn() or None: for optional facts (versions, device properties) that must not fail a check."""
    try:
        return fn()
    except Exception:  # a missing fact is recorded as null, by design
        return None


def raised(fn: Callable[[], Any]) -> str:
    """'; <error>' if fn() raises (the real reason a framework sees no GPU), else ''."""
    try:
        fn()
    except Exception as exc:
        return f"; {one_line(exc)}"
    return ""


def text(value: Any) -> str | None:
    """bytes or str device property as str."""
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def gib(n_bytes: Any) -> float | None:
    return round(float(n_bytes) / 2**30, 2) if n_bytes is not None else None


def device(name: Any, capability: Any, memory_bytes: Any) -> dict[str, Any]:
    if isinstance(capability, (tuple, list)):
        capability = ".".join(str(part) for part in capability)
    return {"name": text(name), "capability": text(capability), "memory_gb": gib(memory_bytes)}


def _check_torch(p: Probe) -> None:
    p.enter("import")
    torch: Any = importlib.import_module("torch")
    p.version = str(torch.__version__)
    cuda, hip = attempt(lambda: torch.version.cuda), attempt(lambda: torch.version.hip)
    p.build = {"cuda": cuda, "hip": hip, "cudnn": attempt(lambda: torch.backends.cudnn.version())}
    p.enter("cpu check")
    a, b = matrix(CPU_N, 7, 3), matrix(CPU_N, 5, 2)
    got = torch.tensor(a, dtype=torch.float32) @ torch.tensor(b, dtype=torch.float32)
    p.cpu_check = compare(got.tolist(), matmul(a, b), f"{CPU_N}x{CPU_N} float32 matmul on the CPU")
    if cuda is None and hip is None:
        p.no_gpu = "CPU-only build of torch (torch.version.cuda is None)"
        return
    if cuda is not None:
        p.enter("offline cuda checks")
        p.cuda_build = str(cuda)
        offline_check(p, "built for CUDA", lambda: f"torch.version.cuda = {cuda}")
        offline_check(
            p, "cuDNN loads", lambda: f"torch.backends.cudnn.version() = {_required(torch.backends.cudnn.version(), 'cuDNN did not load')}"
        )
    p.enter("gpu discovery")
    if not torch.cuda.is_available():
        p.no_gpu = f"torch sees no GPU (torch.cuda.is_available() is False{raised(torch.cuda.init)})"
        return
    p.devices = [_torch_device(torch, i, hip is not None) for i in range(torch.cuda.device_count())]
    p.enter("gpu check")
    a, b = matrix(GPU_N, 7, 3), matrix(GPU_N, 5, 2)
    out = torch.tensor(a, dtype=torch.float32, device="cuda:0") @ torch.tensor(b, dtype=torch.float32, device="cuda:0")
    what = f"{GPU_N}x{GPU_N} float32 matmul on {out.device}"
    p.gpu_check = compare(out.cpu().tolist(), matmul(a, b), what)
    if "cuda" not in str(out.device):
        p.gpu_check.update(ok=False, detail=f"{what}: not a GPU device")


def _torch_device(torch: Any, index: int, rocm: bool) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(index)
    capability = attempt(lambda: props.gcnArchName) if rocm else attempt(lambda: f"{props.major}.{props.minor}")
    return device(attempt(lambda: props.name), capability, attempt(lambda: props.total_memory))


def _check_tensorflow(p: Probe) -> None:
    p.enter("import")
    tf: Any = importlib.import_module("tensorflow")
    p.version = str(tf.__version__)
    info = attempt(tf.sysconfig.get_build_info) or {}
    keys = ("cuda_version", "cudnn_version", "is_cuda_build", "is_rocm_build")
    p.build = {key: info.get(key) for key in keys}
    tf.config.set_soft_device_placement(False)  # an op that cannot run on the GPU must fail, not fall back
    p.enter("gpu discovery")
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:  # before the first op, or TF refuses; keeps TF from grabbing all GPU memory
        with contextlib.suppress(Exception):
            tf.config.experimental.set_memory_growth(gpu, True)
    p.enter("cpu check")
    a, b = matrix(CPU_N, 7, 3), matrix(CPU_N, 5, 2)
    with tf.device("/CPU:0"):
        got = tf.linalg.matmul(tf.constant(a, dtype=tf.float32), tf.constant(b, dtype=tf.float32))
    p.cpu_check = compare(got.numpy().tolist(), matmul(a, b), f"{CPU_N}x{CPU_N} float32 matmul on the CPU")
    if p.build["is_cuda_build"]:
        p.cuda_build = text(p.build["cuda_version"])
        offline_check(
            p, "built for CUDA", lambda: f"CUDA {_required(p.build['cuda_version'], 'no cuda_version')}, cuDNN {p.build['cudnn_version']}"
        )
    if not gpus:
        gpu_build = p.build["is_cuda_build"] or p.build["is_rocm_build"]
        p.no_gpu = (
            "tensorflow sees no GPU (tf.config.list_physical_devices('GPU') is empty)"
            if gpu_build
            else "CPU-only build of tensorflow (is_cuda_build and is_rocm_build are false)"
        )
        return
    p.devices = [_tf_device(tf, gpu) for gpu in gpus]
    p.enter("gpu check")
    a, b = matrix(GPU_N, 7, 3), matrix(GPU_N, 5, 2)
    with tf.device("/GPU:0"):
        out = tf.linalg.matmul(tf.constant(a, dtype=tf.float32), tf.constant(b, dtype=tf.float32))
    what = f"{GPU_N}x{GPU_N} float32 matmul on {out.device}"
    p.gpu_check = compare(out.numpy().tolist(), matmul(a, b), what)
    if "GPU" not in str(out.device).upper():
        p.gpu_check.update(ok=False, detail=f"{what}: not a GPU device")


def _tf_device(tf: Any, gpu: Any) -> dict[str, Any]:
    details = attempt(lambda: tf.config.experimental.get_device_details(gpu)) or {}
    return device(details.get("device_name") or attempt(lambda: gpu.name), details.get("compute_capability"), None)


def _check_jax(p: Probe) -> None:
    p.enter("import")
    jax: Any = importlib.import_module("jax")
    jnp: Any = importlib.import_module("jax.numpy")
    p.version = str(jax.__version__)
    plugins = dists("jax-plugins")
    jaxlib = dist_version("jaxlib") or attempt(lambda: importlib.import_module("jaxlib").__version__)
    p.build = {"default_backend": attempt(jax.default_backend), "jaxlib": jaxlib, "plugins": plugins}
    p.enter("cpu check")
    cpu = jax.devices("cpu")[0]
    a, b = matrix(CPU_N, 7, 3), matrix(CPU_N, 5, 2)
    with jax.default_device(cpu):
        got = jnp.matmul(jnp.asarray(a, dtype=jnp.float32), jnp.asarray(b, dtype=jnp.float32))
    p.cpu_check = compare(got.tolist(), matmul(a, b), f"{CPU_N}x{CPU_N} float32 matmul on the CPU")
    if any("cuda" in name for name in plugins):
        p.enter("offline cuda checks")
        p.cuda_build = major_in(list(plugins))
        offline_check(p, "lowers for the GPU", lambda: _jax_lower_for_cuda(jax, jnp))
    p.enter("gpu discovery")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError as exc:
        gpu_build = plugins or re.search(r"cuda|rocm", str(jaxlib))
        p.no_gpu = (
            f"jax sees no GPU ({one_line(exc)})" if gpu_build else ("CPU-only build of jax (no jax-cuda*/jax-rocm* plugin installed)")
        )
        return
    p.devices = [device(getattr(d, "device_kind", None), getattr(d, "compute_capability", None), None) for d in gpus]
    p.enter("gpu check")
    a, b = matrix(GPU_N, 7, 3), matrix(GPU_N, 5, 2)
    with jax.default_device(cpu):
        x, y = jnp.asarray(a, dtype=jnp.float32), jnp.asarray(b, dtype=jnp.float32)
    out = jnp.matmul(jax.device_put(x, gpus[0]), jax.device_put(y, gpus[0]))
    platforms = sorted({str(d.platform) for d in out.devices()})
    what = f"{GPU_N}x{GPU_N} float32 matmul on {gpus[0]}"
    p.gpu_check = compare(out.tolist(), matmul(a, b), what)
    if not set(platforms) & {"gpu", "cuda", "rocm"}:
        p.gpu_check.update(ok=False, detail=f"{what}: ran on {platforms}, not a GPU")


def _jax_lower_for_cuda(jax: Any, jnp: Any) -> str:
    """jax.export lowers for a platform without its devices: the CUDA plugin's lowering rules run."""
    exported = jax.export.export(jax.jit(lambda x: jnp.sin(x) @ x.T), platforms=["cuda"])(jax.ShapeDtypeStruct((8, 8), jnp.float32))
    text = exported.mlir_module()
    if "stablehlo" not in text:
        raise RuntimeError("the exported module holds no StableHLO")
    return f"jax.export for cuda: {len(text)} bytes of StableHLO"


def major_in(names: list[str]) -> str | None:
    """The CUDA major a major-wide wheel names: jax-cuda13-plugin, cupy-cuda13x, cuda-bindings 13.x -> "13"."""
    for name in names:
        found = re.search(r"cuda(\d+)", name)
        if found:
            return found.group(1)
    return None


def _required(value: Any, why: str) -> Any:
    if value in (None, "", 0):
        raise RuntimeError(why)
    return value


def _check_cupy(p: Probe) -> None:
    p.enter("import")
    cupy: Any = importlib.import_module("cupy")
    p.version = str(cupy.__version__)
    runtime = cupy.cuda.runtime
    p.build = {
        "runtime_version": attempt(runtime.runtimeGetVersion),
        "driver_version": attempt(runtime.driverGetVersion),
        "is_hip": attempt(lambda: bool(runtime.is_hip)),
        "package": next(iter(dists("cupy")), None),
    }
    p.cpu_check = {"ok": True, "detail": "imported (cupy has no CPU path)"}
    if not p.build["is_hip"]:
        p.enter("offline cuda checks")
        p.cuda_build = major_in([p.build["package"] or ""])
        offline_check(p, "NVRTC compiles a kernel", lambda: _cupy_nvrtc(cupy))
    p.enter("gpu discovery")
    try:
        count = int(runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError without a driver or a device
        p.no_gpu = f"cupy sees no GPU ({one_line(exc)})"
        return
    if count == 0:
        p.no_gpu = "cupy sees no GPU (getDeviceCount() is 0)"
        return
    p.devices = [_cupy_device(runtime, i) for i in range(count)]
    p.enter("gpu check")
    xs = [(i % 1000) / 8 for i in range(VECTOR_N)]
    got = (cupy.asarray(xs, dtype=cupy.float32) * 2 + 1).get().tolist()
    p.gpu_check = compare(got, [x * 2 + 1 for x in xs], f"x*2+1 over {VECTOR_N} float32 on GPU 0")


def _cupy_nvrtc(cupy: Any) -> str:
    """CuPy's own NVRTC (from the [ctk] wheels) compiles a kernel to PTX, with no device."""
    nvrtc = cupy.cuda.nvrtc  # the NVRTC API itself: cupy's compiler front end asks the driver for the GPU
    major, minor = nvrtc.getVersion()
    program = nvrtc.createProgram(KERNEL_SOURCE, "scale.cu", [], [])
    try:
        nvrtc.compileProgram(program, ["--gpu-architecture=compute_75"])
        size = len(nvrtc.getPTX(program))
    finally:
        nvrtc.destroyProgram(program)
    if not size:
        raise RuntimeError("NVRTC returned no PTX")
    return f"NVRTC {major}.{minor}: {size} bytes of PTX for compute_75"


def _cupy_device(runtime: Any, index: int) -> dict[str, Any]:
    props = attempt(lambda: runtime.getDeviceProperties(index)) or {}
    arch = props.get("gcnArchName")
    capability = arch if arch else f"{props.get('major')}.{props.get('minor')}" if "major" in props else None
    return device(props.get("name"), capability, props.get("totalGlobalMem"))


def _loop_matmul(a: Any, b: Any, out: Any) -> None:
    """Plain loops for numba's @njit (module level, so numba compiles it as an ordinary global function)."""
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            acc = 0.0
            for k in range(a.shape[1]):
                acc += a[i, k] * b[k, j]
            out[i, j] = acc


def _check_numba(p: Probe) -> None:
    p.enter("import")
    numba: Any = importlib.import_module("numba")
    np: Any = importlib.import_module("numpy")
    p.version = str(numba.__version__)
    p.build = {"numba": p.version, "numba_cuda": dist_version("numba-cuda"), "numpy": str(np.__version__)}
    p.enter("cpu check")
    a, b = matrix(CPU_N, 7, 3), matrix(CPU_N, 5, 2)
    out = np.zeros((CPU_N, CPU_N), dtype=np.float32)
    numba.njit(_loop_matmul)(np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32), out)
    p.cpu_check = compare(out.tolist(), matmul(a, b), f"{CPU_N}x{CPU_N} @njit matmul on the CPU")
    p.enter("gpu discovery")
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        p.no_gpu = "numba's CUDA simulator is enabled (NUMBA_ENABLE_CUDASIM), which is not a GPU"
        return
    try:
        cuda: Any = importlib.import_module("numba.cuda")
    except ImportError as exc:
        p.no_gpu = f"CPU-only numba (no numba.cuda: {one_line(exc)})"
        return
    if p.build["numba_cuda"] or cuda_image():
        # every numba CUDA image compiles a kernel, GPU or not: a missing NVVM fails here, not on the user's GPU
        p.enter("offline cuda checks")
        if p.build["numba_cuda"]:
            p.cuda_build = major_in([f"cuda{(dist_version('cuda-bindings') or '').split('.')[0]}"])
        builtin = not p.build["numba_cuda"]
        offline_check(p, "compiles a kernel (compile_ptx)", lambda: _numba_compile_ptx(cuda, builtin))
    if not cuda.is_available():
        p.no_gpu = f"numba sees no GPU (numba.cuda.is_available() is False{raised(cuda.get_current_device)})"
        return
    gpu = cuda.get_current_device()
    total = attempt(lambda: cuda.current_context().get_memory_info()[1])
    p.devices = [device(attempt(lambda: gpu.name), attempt(lambda: gpu.compute_capability), total)]
    p.enter("gpu check")
    _numba_kernel_check(p, cuda, np)


def cuda_image() -> bool:
    """Is this a CUDA image? Every one sets NVIDIA_REQUIRE_CUDA (the product's Dockerfile) or
    CUDA_VERSION (nvidia/cuda bases); a CPU image sets neither."""
    return any(os.environ.get(name, "").strip() for name in ("NVIDIA_REQUIRE_CUDA", "CUDA_VERSION"))


def _numba_compile_ptx(cuda: Any, builtin: bool = False) -> str:
    """numba (numba-cuda, or the built-in target) compiles to PTX through NVVM with no device.

    The built-in target maps the asked compute capability to the nearest one the CUDA runtime
    reports, and CUDA 11's runtime reports none without a driver ("No supported GPU compute
    capabilities found"); so the target is fixed (NUMBA_FORCE_CUDA_CC's setting) for this compile
    only: it still proves that NVVM and libdevice load and compile."""

    def scale(x: Any, out: Any) -> None:
        i = cuda.grid(1)
        if i < out.size:
            out[i] = x[i] * 2.0

    config = attempt(lambda: importlib.import_module("numba.core.config")) if builtin else None
    forced = getattr(config, "FORCE_CUDA_CC", None)
    if config is not None:
        config.FORCE_CUDA_CC = (7, 5)
    try:
        ptx, _ = cuda.compile_ptx(scale, "(float32[:], float32[:])", cc=(7, 5))
    finally:
        if config is not None:
            config.FORCE_CUDA_CC = forced
    if ".entry" not in ptx:
        raise RuntimeError("compile_ptx returned no kernel entry")
    return f"compile_ptx for sm_75: {len(ptx)} bytes of PTX"


def _numba_kernel_check(p: Probe, cuda: Any, np: Any) -> None:
    def vector_add(x: Any, y: Any, out: Any) -> None:
        i = cuda.grid(1)
        if i < out.size:
            out[i] = x[i] + y[i]

    x = np.asarray([(i % 1000) / 8 for i in range(VECTOR_N)], dtype=np.float32)
    y = np.asarray([(i % 7) / 4 for i in range(VECTOR_N)], dtype=np.float32)
    out = cuda.device_array(VECTOR_N, dtype=np.float32)
    threads = 256
    cuda.jit(vector_add)[(VECTOR_N + threads - 1) // threads, threads](cuda.to_device(x), cuda.to_device(y), out)
    what = f"@cuda.jit vector add over {VECTOR_N} float32 on {text(attempt(lambda: cuda.get_current_device().name))}"
    p.gpu_check = compare(out.copy_to_host().tolist(), (x + y).tolist(), what)


# ------------------------------------------------------------- CUDA libraries, loaded without a GPU


def _int_out(lib: Any, function: str, *args: Any) -> int:
    """Call `status f(args..., int* out)` and return out (status 0 is success for every library here)."""
    value = ctypes.c_int(0)
    status = getattr(lib, function)(*args, ctypes.byref(value))
    if status != 0:
        raise RuntimeError(f"{function} returned status {status}")
    return value.value


def _cudart_version(lib: Any) -> str:
    code = _int_out(lib, "cudaRuntimeGetVersion")
    return f"{code // 1000}.{code % 1000 // 10}"


def _cudnn_version(lib: Any) -> str:
    lib.cudnnGetVersion.restype = ctypes.c_size_t
    code = int(lib.cudnnGetVersion())
    return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"


def _nccl_version(lib: Any) -> str:
    code = _int_out(lib, "ncclGetVersion")
    return f"{code // 10000}.{code % 10000 // 100}.{code % 100}" if code >= 10000 else f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _cublas_version(lib: Any) -> str:
    return ".".join(str(_int_out(lib, "cublasGetProperty", ctypes.c_int(part))) for part in (0, 1, 2))  # MAJOR, MINOR, PATCH


def _nvrtc_version(lib: Any) -> str:
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    if lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) != 0:
        raise RuntimeError("nvrtcVersion failed")
    return f"{major.value}.{minor.value}"


# name (as image.json "libraries" and the lock call it) -> (soname glob, how to read its version)
CUDA_LIBRARIES: dict[str, tuple[str, Callable[[Any], str]]] = {
    "cuda-runtime": ("libcudart.so.*", _cudart_version),
    "cudnn": ("libcudnn.so.*", _cudnn_version),
    "nccl": ("libnccl.so.*", _nccl_version),
    "cublas": ("libcublas.so.*", _cublas_version),
    "nvrtc": ("libnvrtc.so.*", _nvrtc_version),
}


def find_library(pattern: str) -> str | None:
    """A library from the NVIDIA wheels (site-packages/nvidia/*/lib), never an `.alt` build."""
    found = sorted(
        path
        for entry in sys.path
        if entry and os.path.isdir(os.path.join(entry, "nvidia"))
        for path in glob.glob(os.path.join(entry, "nvidia", "*", "lib", pattern))
        if ".alt." not in os.path.basename(path)
    )
    return found[0] if found else None


def release(version: str) -> tuple[int, ...]:
    """A version as its numbers ("13.01" -> (13, 1)): versions are compared as values, never as text."""
    return tuple(int(part) for part in version.split("."))


def same_release(found: str, expected: str) -> bool:
    """Whether the version a library reports is the one expected, as values: 13.1 is 13.1.0 and
    `cuda-runtime=13` is 13.0 (missing parts are 0), but 13 is not 13.1. A library says fewer parts
    than a lock pins (cudnnGetVersion 9.24.0 for 9.24.0.43, cudaRuntimeGetVersion 13.0 for 13.0.96),
    so they are compared to the precision the library reports."""
    have, want = release(found), release(expected)
    return have == (want + (0,) * len(have))[: len(have)]


def library_checks(expected: dict[str, str]) -> list[dict[str, Any]]:
    """Load each expected CUDA library and read its version; with nvrtc, compile a kernel. No GPU needed."""
    checks: list[dict[str, Any]] = []
    nvrtc: tuple[Any, str] | None = None
    for name, want in sorted(expected.items()):
        pattern, version_of = CUDA_LIBRARIES[name]
        check: dict[str, Any] = {"name": name, "expected": want, "found": None, "library": None, "ok": False}
        path = find_library(pattern)
        try:
            if path is None:
                raise OSError(f"{pattern.replace('*', 'N')}: cannot open shared object file: not in the image's NVIDIA wheels")
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            check.update(library=path, found=version_of(lib))
            check["ok"] = same_release(check["found"], want)
            check["detail"] = f"{name} {check['found']} loads" + ("" if check["ok"] else f", but the lock pins {want}")
            if name == "nvrtc":
                nvrtc = (lib, path)
        except (OSError, RuntimeError, AttributeError) as exc:
            check["detail"] = one_line(exc)
        checks.append(check)
    if nvrtc is not None:
        checks.append(_nvrtc_compile(nvrtc[0], os.path.dirname(nvrtc[1])))
    return checks


def _nvrtc_compile(lib: Any, folder: str) -> dict[str, Any]:
    """NVRTC compiles a kernel to PTX for compute_75 (what a GPU would JIT), with no device.

    NVRTC dlopens libnvrtc-builtins by soname and the wheels set no RUNPATH, so, as every framework's
    loader does, the builtins from the same folder are loaded first."""
    try:
        builtins = sorted(p for p in glob.glob(os.path.join(folder, "libnvrtc-builtins.so.*")) if ".alt." not in os.path.basename(p))
        if not builtins:
            raise OSError("libnvrtc-builtins.so.N: cannot open shared object file: not next to libnvrtc in the image's NVIDIA wheels")
        ctypes.CDLL(builtins[0], mode=ctypes.RTLD_GLOBAL)
        program = ctypes.c_void_p()
        if lib.nvrtcCreateProgram(ctypes.byref(program), KERNEL_SOURCE.encode(), b"scale.cu", 0, None, None) != 0:
            raise RuntimeError("nvrtcCreateProgram failed")
        options = (ctypes.c_char_p * 1)(b"--gpu-architecture=compute_75")
        status = lib.nvrtcCompileProgram(program, 1, options)
        size = ctypes.c_size_t(0)
        lib.nvrtcGetPTXSize(program, ctypes.byref(size))
        lib.nvrtcDestroyProgram(ctypes.byref(program))
        if status != 0 or not size.value:
            raise RuntimeError(f"nvrtcCompileProgram returned status {status}")
        return {"name": "nvrtc compiles a kernel", "ok": True, "detail": f"{size.value} bytes of PTX for compute_75"}
    except (OSError, RuntimeError, AttributeError) as exc:
        return {"name": "nvrtc compiles a kernel", "ok": False, "detail": one_line(exc)}


CHECKS: dict[str, Callable[[Probe], None]] = {
    "torch": _check_torch,
    "tensorflow": _check_tensorflow,
    "jax": _check_jax,
    "cupy": _check_cupy,
    "numba": _check_numba,
}


def run_one(name: str, channel: IO[str]) -> None:
    """Child side: run one framework's check, writing a JSON line to channel at every stage."""

    def sink(record: dict[str, Any]) -> None:
        channel.write(json.dumps(record) + "\n")
        channel.flush()

    p = Probe(name, sink)
    try:
        CHECKS[name](p)
    except (Exception, SystemExit) as exc:  # SystemExit: some imports give up with sys.exit()
        p.error, p.error_stage = error_chain(exc), p.stage
        traceback.print_exc(file=sys.stderr)
    p.enter("done")


def error_chain(exc: BaseException, depth: int = 3) -> str:
    """`Type: message`, then what caused it (`<- Type: message`): an extension that fails to
    initialise says only that; the cause (a broken NumPy, a missing library) is in the chain."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(parts) < depth:
        seen.add(id(current))
        parts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return " <- ".join(parts)


def _child_main(name: str, expected: dict[str, str]) -> int:
    channel = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # framework chatter, even from C libraries, goes to stderr and cannot corrupt the JSON
    if name == LIBRARIES_CHILD:
        channel.write(json.dumps({"stage": "done", "checks": library_checks(expected)}) + "\n")
        channel.flush()
        return 0
    run_one(name, channel)
    return 0


# ----------------------------------------------------------------------------- verdicts (parent)


@dataclass(frozen=True)
class ChildRun:
    """How a framework's check subprocess ended."""

    record: dict[str, Any] | None  # last JSON line it wrote
    returncode: int
    timed_out: bool
    stderr: str


def run_child(name: str, timeout: float, extra: tuple[str, ...] = ()) -> ChildRun:
    """Run `<this file> --one NAME` in its own process group; kill the whole group at the timeout."""
    command = [sys.executable, "-X", "faulthandler", os.path.abspath(__file__), "--one", name, *extra]
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        out, err = proc.communicate()
    except BaseException:
        _kill_group(proc)
        raise
    return ChildRun(_last_record(out.decode(errors="replace")), proc.returncode, timed_out, err.decode(errors="replace"))


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()


def _last_record(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            return record
    return None


def child_error(run: ChildRun, timeout: float) -> str | None:
    """Why the check process itself failed (timeout, crash, no result), else the check's own error."""
    record = run.record or {}
    stage = record.get("stage", "start")
    if run.timed_out:
        return f"timed out after {timeout:g} s (during {stage})"
    if run.returncode < 0:
        sig = attempt(lambda: signal.Signals(-run.returncode).name) or str(-run.returncode)
        return f"crashed with signal {sig} (during {stage})"
    if stage != "done":
        last = one_line(run.stderr.strip().splitlines()[-1]) if run.stderr.strip() else "no output"
        return f"check process exited with code {run.returncode} during {stage}: {last}"
    error = record.get("error")
    return f"{one_line(str(error))} (during {record.get('error_stage')})" if error else None


def verdict(
    error: str | None,
    cpu_check: dict[str, Any] | None,
    gpu_check: dict[str, Any] | None,
    no_gpu: str | None,
    host_nodes: list[str],
    require_gpu: bool,
    offline: list[dict[str, Any]] | None = None,
) -> tuple[str, str]:
    """(status, reason): passed only when import, CPU check, the CUDA checks that need no GPU and the
    GPU check all worked on a GPU."""
    if error:
        return "failed", one_line(error)
    if not cpu_check or not cpu_check.get("ok"):
        return "failed", f"CPU check failed: {(cpu_check or {}).get('detail', 'it did not run')}"
    bad = [c for c in offline or [] if not c.get("ok")]
    if bad:
        return "failed", f"CUDA check failed without a GPU: {bad[0]['name']}: {bad[0]['detail']}"
    if gpu_check is not None:
        if gpu_check.get("ok"):
            return "passed", ""
        return "failed", f"GPU result disagrees with the CPU reference: {gpu_check.get('detail')}"
    why = no_gpu or "the GPU check did not run"
    if host_nodes:
        return "failed", f"{why}, although this host has {', '.join(host_nodes)}"
    if require_gpu:
        return "failed", f"{NO_GPU_ON_HOST} and --require-gpu was given; {why}"
    return "skipped", f"{NO_GPU_ON_HOST}; {why}"


def framework_result(name: str, timeout: float, host_nodes: list[str], require_gpu: bool) -> dict[str, Any]:
    """The result dict of one framework: not-installed, or its check run in a subprocess and judged."""
    result: dict[str, Any] = {
        "framework": name,
        "status": "not-installed",
        "version": None,
        "build": {},
        "devices": [],
        "cpu_check": None,
        "gpu_check": None,
        "offline": [],
        "cuda_build": None,
        "reason": "not installed",
        "diagnosis": None,
        "seconds": 0.0,
    }
    if not installed(name):
        return result
    started = time.monotonic()
    run = run_child(name, timeout)
    record = run.record or {}
    error = child_error(run, timeout)
    for key in ("build", "devices", "cpu_check", "gpu_check", "offline", "cuda_build"):
        result[key] = record.get(key, result[key])
    result["version"] = record.get("version") or dist_version(name)
    status, reason = verdict(
        error, result["cpu_check"], result["gpu_check"], record.get("no_gpu"), host_nodes, require_gpu, result["offline"]
    )
    found = diagnose(f"{reason}\n{error or ''}\n{run.stderr[-20000:]}") if status == "failed" else None
    result.update(status=status, reason=reason, seconds=round(time.monotonic() - started, 3))
    result["diagnosis"] = {"cause": found[0], "fix": found[1]} if found else None
    if status == "failed" and run.stderr.strip():
        tail = run.stderr.strip().splitlines()[-30:]
        log(f"{name} failed; last lines of its stderr:\n" + "\n".join(f"  [{name}] {line}" for line in tail))
    return result


def cuda_result(expected: dict[str, str], timeout: float) -> dict[str, Any]:
    """The image's CUDA libraries (those the lock pins), loaded and versioned in a child process."""
    if not expected:
        return {"checks": [], "ok": True, "diagnosis": None}
    extra = tuple(arg for name, version in sorted(expected.items()) for arg in ("--expect", f"{name}={version}"))
    run = run_child(LIBRARIES_CHILD, timeout, extra)
    checks = (run.record or {}).get("checks")
    if not isinstance(checks, list):
        error = child_error(run, timeout) or "the library check wrote no result"
        checks = [{"name": "cuda libraries", "ok": False, "detail": error}]
    bad = [c for c in checks if not c.get("ok")]
    found = diagnose("\n".join(c.get("detail", "") for c in bad)) if bad else None
    return {"checks": checks, "ok": not bad, "diagnosis": {"cause": found[0], "fix": found[1]} if found else None}


def probe(frameworks: tuple[str, ...], timeout: float, require_gpu: bool, expected: dict[str, str] | None = None) -> dict[str, Any]:
    """The whole report: host facts, one result per framework (sequentially), the CUDA libraries, summary and ok."""
    nodes = gpu_device_nodes()
    host = {"python": platform.python_version(), "platform": platform.platform(), "gpu_devices": nodes, "nvidia_smi": nvidia_smi()}
    results: dict[str, Any] = {}
    for name in frameworks:
        log(f"checking {name} ...")
        results[name] = framework_result(name, timeout, nodes, require_gpu)
    cuda = cuda_result(expected or {}, timeout)
    summary = {status: sum(r["status"] == status for r in results.values()) for status in STATUSES}
    ok = summary["failed"] == 0 and cuda["ok"]
    return {"probe": "hello-gpu", "schema": SCHEMA, "host": host, "frameworks": results, "cuda": cuda, "summary": summary, "ok": ok}


# --------------------------------------------------------------------------------------- output


def log(message: str) -> None:
    print(f"hello-gpu: {message}", file=sys.stderr, flush=True)


def render_table(report: dict[str, Any]) -> str:
    """Short human summary of a report."""
    host = report["host"]
    smi = host["nvidia_smi"]
    lines = [
        f"host: python {host['python']}, GPU device nodes: {', '.join(host['gpu_devices']) or 'none'}"
        + (f", nvidia-smi: {smi['name']} (driver {smi['driver_version']})" if smi else ""),
        f"{'framework':<11} {'status':<14} {'version':<22} {'device':<28} detail",
    ]
    for name, r in report["frameworks"].items():
        devices = r["devices"]
        where = f"{devices[0]['name']} ({devices[0]['capability']})" if devices else "-"
        detail = r["gpu_check"]["detail"] if r["status"] == "passed" else r["reason"]
        lines.append(f"{name:<11} {r['status']:<14} {str(r['version'] or '-'):<22} {where:<28} {detail}")
        for check in r["offline"]:
            lines.append(f"{'':<11} {'ok' if check['ok'] else 'FAILED':<14} {check['name']:<22} {'':<28} {check['detail']}")
        if r["diagnosis"]:
            lines.append(f"{'':<11} cause: {r['diagnosis']['cause']}")
            lines.append(f"{'':<11} fix:   {r['diagnosis']['fix']}")
    for check in report["cuda"]["checks"]:
        lines.append(f"{'cuda':<11} {'ok' if check['ok'] else 'FAILED':<14} {check['name']:<22} {'':<28} {check.get('detail', '')}")
    if report["cuda"]["diagnosis"]:
        lines.append(f"{'':<11} cause: {report['cuda']['diagnosis']['cause']}")
        lines.append(f"{'':<11} fix:   {report['cuda']['diagnosis']['fix']}")
    counts = ", ".join(f"{n} {status}" for status, n in report["summary"].items())
    lines.append(f"summary: {counts} -> {'OK' if report['ok'] else 'FAILED'}")
    return "\n".join(lines)


def _frameworks_arg(value: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in FRAMEWORKS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown framework(s) {unknown or value!r}; choose from {','.join(FRAMEWORKS)}")
    return names


def _timeout_arg(value: str) -> float:
    seconds = float(value)
    if not seconds > 0:
        raise argparse.ArgumentTypeError("the timeout must be a positive number of seconds")
    return seconds


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="hello-gpu", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    parser.add_argument("--frameworks", type=_frameworks_arg, default=FRAMEWORKS, help="comma-separated subset")
    parser.add_argument("--timeout", type=_timeout_arg, default=DEFAULT_TIMEOUT_S, help="seconds per framework")
    parser.add_argument("--require-gpu", action="store_true", help="no GPU on the host is a failure")
    parser.add_argument(
        "--expect", type=_expect_arg, action="append", default=[], metavar="LIB=VERSION",
        help="a CUDA library the image must load at this version (cuda-runtime, cudnn, nccl, cublas, nvrtc); repeatable",
    )  # fmt: skip
    parser.add_argument("--one", choices=(*FRAMEWORKS, LIBRARIES_CHILD), help=argparse.SUPPRESS)  # internal: the child side
    return parser.parse_args(argv)


def _expect_arg(value: str) -> tuple[str, str]:
    name, sep, version = value.partition("=")
    if not sep or name not in CUDA_LIBRARIES or not re.fullmatch(r"\d{1,9}(\.\d{1,9}){0,5}", version):
        raise argparse.ArgumentTypeError(f"expected LIB=VERSION with LIB one of {', '.join(CUDA_LIBRARIES)}, got {value!r}")
    return name, version


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    expected = dict(args.expect)
    if args.one:
        return _child_main(args.one, expected)
    report = probe(args.frameworks, args.timeout, args.require_gpu, expected)
    print(json.dumps(report, indent=2) if args.json else render_table(report), flush=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
