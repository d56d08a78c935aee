"""The host a fit is judged for: its CPU architecture, GPU vendor, GPUs and driver.

Detected (nvidia-smi through builder.host.facts, `uname -m`, the AMD gfx targets in the kfd
topology of sysfs) or given on the command line; a given value replaces the detected one, so
`builder fit` answers for another machine too. Parsing is pure; the gathering takes its sources
as parameters.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from builder.compat import drivers
from builder.compat.require import BRAND_NAMES
from builder.compat.rules import table
from builder.fit import gfx as gfxs
from builder.fit.arch import Arch
from builder.host import facts
from builder.util.errors import UserError
from builder.util.text import printable

Vendor = Literal["nvidia", "amd", "none"]
CpuArch = Literal["amd64", "arm64"]
VENDORS: tuple[Vendor, ...] = ("nvidia", "amd", "none")
CPU_ARCHES: dict[str, CpuArch] = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
_DRIVER = re.compile(r"^[0-9]{3}(\.[0-9]{1,3}){0,2}$")  # ASCII: \d also takes fullwidth and Arabic-Indic digits
_GFX_LINE = re.compile(r"^\s*gfx_target_version\s+([0-9]{1,9})\s*$", re.MULTILINE)
_ROCMINFO_GFX = re.compile(r"^\s*Name:\s+(gfx[0-9a-f]+)\s*$", re.MULTILINE)
KFD_NODES = Path("sys/class/kfd/kfd/topology/nodes")


@dataclass(frozen=True)
class FitHost:
    arch: CpuArch
    vendor: Vendor
    gpus: tuple[str, ...]  # NVIDIA: compute capabilities ("8.6"); AMD: gfx targets ("gfx90a")
    driver: str | None  # NVIDIA driver version; None when not known
    detected: tuple[str, ...] = ()  # which of arch, vendor, gpus, driver, brand, kernel were detected, not given
    brand: str | None = None  # NVIDIA: the GPUs' product brand as libnvidia-container names it; None when not known (or mixed)
    kernel: str | None = None  # AMD: `uname -r`, detected (the kernel-driver check, compat/rocm_driver.py); None: not known
    amdgpu: str | None = None  # AMD: /sys/module/amdgpu/version (amdgpu-dkms only); None: none, or not detected

    def to_json(self) -> dict[str, object]:
        amd = {"kernel": self.kernel, "amdgpu": self.amdgpu} if self.vendor == "amd" else {}
        return {
            "arch": self.arch,
            "vendor": self.vendor,
            "gpus": list(self.gpus),
            "driver": self.driver,
            "brand": self.brand,
            **amd,
            "detected": list(self.detected),
        }


def cpu_arch(machine: str) -> CpuArch:
    """`uname -m` (or --arch) as an OCI architecture: x86_64 -> amd64, aarch64 -> arm64."""
    found = CPU_ARCHES.get(machine.strip().lower())
    if found is None:
        raise UserError(f"--arch {machine!r} is not a known CPU architecture: give amd64 or arm64")
    return found


def gfx_target(version: int) -> str | None:
    """kfd's gfx_target_version (major*10000 + minor*100 + stepping) as a gfx name: 90010 -> gfx90a; 0 (a CPU node) -> None."""
    if version <= 0:
        return None
    major, rest = divmod(version, 10000)
    minor, stepping = divmod(rest, 100)
    return f"gfx{major}{minor:x}{stepping:x}"


def parse_kfd_properties(text: str) -> str | None:
    """The gfx target of one kfd topology node's `properties` file; None for a CPU node."""
    match = _GFX_LINE.search(text)
    return gfx_target(int(match.group(1))) if match else None


def parse_rocminfo(text: str) -> tuple[str, ...]:
    """The gfx agents rocminfo lists (`Name: gfx90a`), in order, once each."""
    return tuple(dict.fromkeys(_ROCMINFO_GFX.findall(text)))


def amd_targets(root: Path = Path("/")) -> tuple[str, ...]:
    """gfx targets of this host's AMD GPUs from sysfs (no ROCm needed); () when there is no kfd."""
    nodes = root / KFD_NODES
    if not nodes.is_dir():
        return ()
    found = []
    for node in sorted(nodes.iterdir(), key=lambda p: (len(p.name), p.name)):
        try:
            target = parse_kfd_properties((node / "properties").read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
        if target:
            found.append(target)
    return tuple(dict.fromkeys(found))


def check_driver(value: str) -> str:
    if not _DRIVER.fullmatch(value.strip()):
        raise UserError(f"--driver {printable(value, 40)!r} is not a driver version: give it as nvidia-smi prints it, e.g. 550.54.15")
    return value.strip()


def detect(
    run: facts.Runner = facts.run_command, root: Path = Path("/"), machine: str | None = None, kernel: Callable[[], str] = platform.release
) -> FitHost:
    """What this machine has: NVIDIA first (nvidia-smi), else AMD (kfd in sysfs, else rocminfo, with
    the kernel and amdgpu module a ROCm image meets), else no GPU."""
    arch = cpu_arch(machine or platform.machine())
    nvidia = facts.gather_nvidia(run, root)
    if nvidia.has_gpu:
        nvidia = facts.with_brands(nvidia, run)
        ccs = tuple(gpu.compute_cap for gpu in nvidia.gpus if gpu.compute_cap is not None)
        brands = {gpu.brand for gpu in nvidia.gpus}
        brand = brands.pop() if len(brands) == 1 else None
        return FitHost(arch, "nvidia", ccs, nvidia.driver, ("arch", "vendor", "gpus", "driver", "brand"), brand)
    gfx = amd_targets(root)
    if not gfx:
        rc, out = run(["rocminfo"])
        gfx = parse_rocminfo(out) if rc == 0 else ()
    if gfx:
        return FitHost(
            arch, "amd", gfx, None, ("arch", "vendor", "gpus", "kernel"), kernel=kernel() or None, amdgpu=facts.amdgpu_version(root)
        )
    return FitHost(arch, "none", (), None, ("arch", "vendor", "gpus"))


def given(
    detected: FitHost | None,
    *,
    gpu_cc: Sequence[str] = (),
    driver: str | None = None,
    arch: str | None = None,
    vendor: str | None = None,
    brand: str | None = None,
    gfx: Sequence[str] = (),
) -> FitHost:
    """The host with the given options in place of detected values (`detected` None: nothing detected).

    --gfx (an AMD GPU target, as rocminfo names it) implies an AMD host, and goes with no NVIDIA option.

    --gpu-cc, --driver and --brand imply an NVIDIA host; --vendor none drops the GPUs; a value that is
    neither given nor detected stays unknown (no driver: the driver is not checked). A described host
    that cannot exist (a GPU on a driver branch that does not drive it) is a UserError."""
    _check_nvidia_options(gpu_cc, driver, vendor, brand)
    nvidia_given = bool(gpu_cc) or driver is not None or brand is not None
    targets = _amd_targets(gfx, nvidia_given=nvidia_given, vendor=vendor)
    base = detected or FitHost(cpu_arch(platform.machine()), "none", (), None, ("arch",))
    chosen: Vendor = _vendor(vendor) if vendor is not None else "amd" if targets else "nvidia" if nvidia_given else base.vendor
    host = _merged(base, chosen, tuple(cc.strip() for cc in gpu_cc) or targets, driver, arch, brand)
    if (gpu_cc or driver is not None) and host.driver is not None:
        refused = drivers.impossible(host.gpus, host.driver, table())
        if refused:
            raise UserError(f"this host cannot exist: {refused}")
    return host


# What each NVIDIA-only option names, for the refusal when --vendor says the host has no NVIDIA GPU.
NVIDIA_OPTIONS = {"--gpu-cc": "an NVIDIA compute capability", "--driver": "an NVIDIA driver version", "--brand": "an NVIDIA GPU brand"}


def _check_nvidia_options(gpu_cc: Sequence[str], driver: str | None, vendor: str | None, brand: str | None) -> None:
    """Each value well formed, and no NVIDIA option beside --vendor amd|none."""
    for cc in gpu_cc:
        Arch.cc(cc)
    if vendor is not None:
        _vendor(vendor)
    if brand is not None and brand not in BRAND_NAMES:
        raise UserError(f"--brand {brand!r} is not a GPU brand the container runtime names: give one of {', '.join(BRAND_NAMES)}")
    for option, value in (("--gpu-cc", gpu_cc), ("--driver", driver), ("--brand", brand)):
        if vendor in ("amd", "none") and value:
            raise UserError(f"{option} is {NVIDIA_OPTIONS[option]}, but --vendor is {vendor}: drop one of them")


def _amd_targets(gfx: Sequence[str], *, nvidia_given: bool, vendor: str | None) -> tuple[str, ...]:
    """--gfx's targets, refused beside any option that describes an NVIDIA host or none."""
    targets = tuple(gfxs.parse_device(g) for g in gfx)
    if targets and (nvidia_given or vendor not in (None, "amd")):
        raise UserError("--gfx names an AMD GPU; --gpu-cc, --driver, --brand and --vendor nvidia|none describe another host: drop one")
    return targets


def _merged(base: FitHost, chosen: Vendor, gpus: tuple[str, ...], driver: str | None, arch: str | None, brand: str | None) -> FitHost:
    """`base` with each given value in place; a vendor other than the detected one keeps none of
    its GPUs, driver or brand. `detected` keeps only the keys no option replaced."""
    same = chosen == base.vendor
    replaced = {
        "arch": arch is not None,
        "vendor": not same,
        "gpus": bool(gpus) or not same,
        "driver": driver is not None or not same,
        "brand": brand is not None or not same,
        "kernel": bool(gpus) or not same,  # a described GPU is another machine: this one's kernel is not its
    }
    return FitHost(
        arch=cpu_arch(arch) if arch is not None else base.arch,
        vendor=chosen,
        gpus=gpus or (base.gpus if same else ()),
        driver=check_driver(driver) if driver is not None else base.driver if same else None,
        detected=tuple(key for key in base.detected if not replaced[key]),
        brand=brand if brand is not None else base.brand if same else None,
        kernel=None if replaced["kernel"] else base.kernel,
        amdgpu=None if replaced["kernel"] else base.amdgpu,
    )


def _vendor(value: str) -> Vendor:
    for known in VENDORS:
        if value == known:
            return known
    raise UserError(f"--vendor {value!r} is not one of {', '.join(VENDORS)}: pick one")


def host_for(
    *,
    gpu_cc: Sequence[str] = (),
    driver: str | None = None,
    arch: str | None = None,
    vendor: str | None = None,
    brand: str | None = None,
    gfx: Sequence[str] = (),
) -> FitHost:
    """The host `builder fit` judges for: detected, with the options in place of what they name.
    Nothing is detected when the options already say it all (GPUs and driver, or no GPU), so a
    described host never waits on this machine's nvidia-smi."""
    described = (bool(gpu_cc) and driver is not None) or vendor == "none" or bool(gfx)
    return given(None if described else detect(), gpu_cc=gpu_cc, driver=driver, arch=arch, vendor=vendor, brand=brand, gfx=gfx)
