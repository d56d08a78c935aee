"""The kernel-driver check of a ROCm image (pure): the AMD counterpart of compat/drivers.py.

A container brings ROCm's user space; the host brings the kernel and its amdgpu driver. AMD
publishes which kernel-mode driver (KMD) releases each ROCm user space is tested with (+/- 2
releases) and the OSes, so the oldest kernel, it supports (compat.yaml rocm.releases `kmd`,
`kernel`). This compares the host's kernel (`uname -r`) and, where readable, its amdgpu module
version (/sys/module/amdgpu/version, which only AMD's amdgpu-dkms driver has; host/facts.py reads
both) with them:
- a kernel older than every OS AMD lists for that ROCm: does not fit;
- a module version the table names as a KMD release outside the tested ones: does not fit;
- one it names inside them: fits;
- anything else (the kernel's own in-tree amdgpu, a module version no row names, a ROCm the table
  has no row for, a host whose kernel was not detected): unknown, with the reason. Never a pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from builder.compat.rocm import RocmFacts
from builder.model.versions import mm

Status = Literal["fits", "does not fit", "unknown"]
_KERNEL = re.compile(r"^(\d{1,3})\.(\d{1,3})")


@dataclass(frozen=True)
class KernelDriverFit:
    status: Status
    reason: str  # one line

    def to_json(self) -> dict[str, str]:
        return {"status": self.status, "reason": self.reason}


def kernel_release(uname_r: str) -> str | None:
    """`uname -r` (6.8.0-45-generic) as major.minor (6.8); None when it does not start like one."""
    match = _KERNEL.match(uname_r.strip())
    return f"{int(match.group(1))}.{int(match.group(2))}" if match else None


def check(rocm: str | None, kernel: str | None, module: str | None, facts: RocmFacts) -> KernelDriverFit:
    """The host's kernel (`uname -r`) and amdgpu module version against AMD's published support of `rocm`."""
    if not rocm:
        return KernelDriverFit("unknown", "the image's ROCm release is not recorded, so its kernel driver is not checked")
    release = facts.release(rocm)
    if release is None:
        return KernelDriverFit("unknown", f"compat.yaml rocm.releases has no row for ROCm {rocm}: its kernel driver is not checked")
    if kernel is None:
        return KernelDriverFit(
            "unknown", f"the host's kernel is not known (not detected): ROCm {release.rocm} needs Linux >= {release.kernel}"
        )
    running = kernel_release(kernel)
    if running is None:
        return KernelDriverFit(
            "unknown", f"the kernel release {kernel[:40]!r} is not major.minor...: not compared with ROCm {release.rocm}'s"
        )
    if mm(running) < mm(release.kernel):
        return KernelDriverFit(
            "does not fit",
            f"Linux {running} is older than every kernel AMD supports ROCm {release.rocm} on (>= {release.kernel}); "
            "run a newer kernel or an image of an older ROCm",
        )
    said = f"Linux {running} >= {release.kernel}"
    return _module(release.rocm, release.kmd, module, said, facts)


def _module(rocm: str, kmd: tuple[str, ...], module: str | None, said: str, facts: RocmFacts) -> KernelDriverFit:
    tested = f"ROCm {rocm} is tested with amdgpu KMD {', '.join(kmd)}" if kmd else f"compat.yaml lists no KMD releases for ROCm {rocm}"
    if module is None:
        return KernelDriverFit(
            "unknown",
            f"{said}, but its amdgpu driver has no version (/sys/module/amdgpu/version: the kernel's own in-tree driver, or none "
            f"loaded); {tested} (AMD's user and kernel-space support matrix): not checked",
        )
    release = facts.kmd_of(module)
    if release is None:
        return KernelDriverFit(
            "unknown",
            f"{said}; amdgpu module {module} is not in compat.yaml rocm.amdgpu_modules (which KMD release it is is not known); {tested}",
        )
    if not kmd:
        return KernelDriverFit("unknown", f"{said}; amdgpu module {module} is KMD {release}, but {tested}")
    if release not in kmd:
        return KernelDriverFit(
            "does not fit",
            f"amdgpu module {module} is KMD {release}; {tested}: install a tested amdgpu-dkms, or use an image of a ROCm it is tested with",
        )
    return KernelDriverFit("fits", f"{said}; amdgpu module {module} is KMD {release}, which AMD tests ROCm {rocm} with")
