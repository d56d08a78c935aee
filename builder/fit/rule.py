"""The one rule for a library's device code on one GPU (pure): `fit --library`, the image measure
(fit/measure.py, and through it a record's measured fit) and `fit --planned` all judge with it, so
one file never gets two answers.

    judge_library(path, code, device, driver=None, compat=None, what=None) -> LibraryFit

- `path` names the library: absolute, or relative to site-packages (`nvidia/cu13/lib/libcufft.so.12`,
  what a scan of an image or a wheel reports). It decides which rule applies (`nvidia_component`).
- `code` is its device code (`Embedded`: fit/fatbin.py, fit/cuobjdump.py, or a record's `LibraryCode`
  through `embedded_of`); `device` the GPU's compute capability (`Arch.cc("9.0")`).
- `driver` (nvidia-smi's version) and `compat` (the tables) are needed only to check that the driver
  can JIT-compile the PTX a device would run; without them that is not checked.
- `what` names the software in the reason (`torch 2.14.1 (libtorch_cuda.so)`); the file name by default.

The rules, and why:
- Any other library runs on exactly what its SASS and PTX allow (fit/arch.py: SASS within its
  major, PTX JIT-compiled on newer devices). Both are in the file, so the verdict is `fits` or
  `does not fit`, never a guess.
- A library NVIDIA ships in its wheels (`nvidia/<package>/.../lib*.so*`) is judged by its floor:
  its lowest target, from which on it supports every GPU of its CUDA release. Not all of its device
  code is in the `.nv_fatbin` section: cuFFT 12.0.0.61 (CUDA 13.0) holds one sm_75 cubin there, by
  cuobjdump too, for a 286 MB library that runs on Hopper (torch.fft round-trips on an H200), and
  cuFFT 12.5 holds none. So a GPU below the floor `does not fit` (NVIDIA builds the library for
  none older), one at or above it `fits`, and what the file cannot tell is `unknown` with the
  reason: a library with no device code in its fatbin, or a GPU newer than the tables know
  (fit/arch.py GENERATIONS), whose support is its CUDA release's.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal

from builder.compat.facts import Compat
from builder.fit import driver as drivers
from builder.fit.arch import GENERATIONS, Arch, Embedded, decide

Status = Literal["fits", "does not fit", "unknown"]
How = Literal["sass", "ptx", "floor", "none"]
KNOWN: tuple[Arch, ...] = tuple(Arch(major, minor) for major, minor in sorted(GENERATIONS))
# nvidia/<package>/lib/<file>: the layout of NVIDIA's wheels (nvidia/cu13/lib/, nvidia/cudnn/lib/), relative
# to site-packages (what a scan reports) or under a site-packages/dist-packages folder
_WHEEL_LAYOUT = re.compile(r"(?:^|/(?:site|dist)-packages/)nvidia/[^/]+/lib/([^/]+)$")
# The CUDA libraries NVIDIA ships (the CUDA Toolkit's and its wheels' file names, e.g. the toolkit's
# lib64/ or a library copied out of a wheel): the same file, the same rule, wherever it lies
_NVIDIA_NAMES = re.compile(
    r"^lib(cublas|cublasLt|cudart|cudnn\w*|cufft|cufftw|cufile\w*|cupti|curand|cusolver|cusolverMg|cusparse|cusparseLt|"
    r"cudss|cutensor\w*|nccl|npp\w+|nvblas|nvJitLink|nvjpeg|nvrtc|nvrtc-builtins|nvshmem\w*)\.so(\.[\d.]+)?$"
)


@dataclass(frozen=True)
class LibraryFit:
    """One library on one GPU: the verdict, how it runs there (`via`: the cubin or PTX target, or the
    floor), and the reason in one line."""

    status: Status
    how: How
    via: Arch | None
    reason: str

    @property
    def fits(self) -> bool:
        return self.status == "fits"


def nvidia_component(path: str) -> str | None:
    """The NVIDIA component a library NVIDIA ships belongs to (`nvidia/cudnn/lib/libcudnn_adv.so.9` -> cudnn,
    `.../site-packages/nvidia/cu13/lib/libcufft.so.12` or `/usr/local/cuda/lib64/libcufft.so.12` -> cufft);
    None for any other library."""
    path = path.replace(os.sep, "/")
    name = path.rsplit("/", 1)[-1]
    if _WHEEL_LAYOUT.search(path) is None and _NVIDIA_NAMES.match(name) is None:
        return None
    return name.removeprefix("lib").partition(".")[0].partition("_")[0] or None


def floor(code: Embedded) -> Arch | None:
    """The lowest known GPU the code runs on through its SASS or PTX; None when it runs on none."""
    return next((cc for cc in KNOWN if decide(code, cc, "").fits), None)


def judge_library(
    path: str, code: Embedded, device: Arch, driver: str | None = None, compat: Compat | None = None, what: str | None = None
) -> LibraryFit:
    """The verdict of one library on one GPU (the module's docstring says the rules)."""
    name = os.path.basename(path)
    if nvidia_component(path) is not None:
        return _nvidia(name, code, device, what or name)
    decision = decide(code, device, what or name)
    if not decision.fits:
        return LibraryFit("does not fit", "none", None, decision.reason)
    if decision.how == "ptx" and driver is not None and compat is not None and code.ptx_isa:
        jit = drivers.check_ptx(driver, code.ptx_isa[-1], compat)
        if not jit.fits:
            return LibraryFit("does not fit", "ptx", decision.via, jit.reason)
    return LibraryFit("fits", decision.how, decision.via, decision.reason)


def _nvidia(name: str, code: Embedded, device: Arch, what: str) -> LibraryFit:
    lowest = floor(code)
    if lowest is None:
        return LibraryFit(
            "unknown",
            "floor",
            None,
            f"{name} (NVIDIA's) holds no device code for a known GPU in its .nv_fatbin ({code.label}): the GPUs it "
            "supports are its CUDA release's (cuFFT 12.5 keeps its kernels outside the fatbin), which the file does not say",
        )
    at = (device.major, device.minor)
    if at < (lowest.major, lowest.minor):
        return LibraryFit(
            "does not fit",
            "floor",
            lowest,
            f"{name} (NVIDIA's) has no SASS below {lowest.sm}: {device.named} cannot run {what}",
        )
    if at not in GENERATIONS:
        return LibraryFit(
            "unknown",
            "floor",
            lowest,
            f"compute capability {device.number} is newer than the GPUs this tool knows: whether {name} (NVIDIA's, "
            f"built from {lowest.sm} on) supports it is its CUDA release's, which the file does not say",
        )
    return LibraryFit(
        "fits",
        "floor",
        lowest,
        f"{device.number} ({device.generation}) runs {what}: NVIDIA's {name} supports every GPU of its CUDA release from {lowest.sm} on",
    )


def runs_on(path: str, code: Embedded) -> tuple[str, ...]:
    """The known compute capabilities the library fits (for a record's "runs on" of each library)."""
    return tuple(cc.number for cc in KNOWN if judge_library(path, code, cc).fits)
