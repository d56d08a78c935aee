"""Smoke-test run arguments: how a locked-down container with the right GPU access is created.

Pure functions of (image spec, --gpu mode, host facts) to the engine port's ContainerSpec; unit
tests pin the exact docker SDK arguments the adapter makes of it for CUDA, ROCm and cpu images,
without an engine or a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from builder.engine.port import ContainerSpec
from builder.host.facts import HostInfo
from builder.model.plan import ImageSpec

GPU_MODES = ("auto", "require", "off")
MEMORY_LIMIT = "8g"
PIDS_LIMIT = 1024
TMPFS = {"/tmp": "rw,nosuid,nodev,size=2g"}


@dataclass(frozen=True)
class GpuAccess:
    """Whether this run attaches GPUs, and why; `failure` when --gpu require cannot be met."""

    attach: bool
    reason: str
    failure: str | None = None


def gpu_access(spec: ImageSpec, mode: str, host: HostInfo) -> GpuAccess:
    vendor = spec.base.vendor
    if vendor == "cpu":
        return GpuAccess(False, "cpu image: no GPU needed")
    if mode == "off":
        return GpuAccess(False, "--gpu off: GPU checks are skipped")
    if vendor == "cuda":
        present = host.nvidia.has_gpu
        what = "no NVIDIA GPU on this host (nvidia-smi found none)"
    else:
        present = host.amd.present
        what = "no AMD GPU on this host (no /dev/kfd)"
    if present:
        return GpuAccess(True, f"{vendor} GPU found on this host")
    if mode == "require":
        return GpuAccess(False, what, failure=f"--gpu require: {what}")
    return GpuAccess(False, f"{what}: GPU checks are skipped")


@dataclass(frozen=True)
class GpuDevices:
    """What a container needs to see the GPUs: every NVIDIA GPU, or AMD's device nodes and their groups."""

    gpus: bool = False
    devices: tuple[str, ...] = ()
    group_add: tuple[str, ...] = ()


def gpu_devices(spec: ImageSpec, access: GpuAccess, host: HostInfo) -> GpuDevices:
    """`--gpus all` for CUDA; /dev/kfd + /dev/dri with the nodes' groups for ROCm."""
    if not access.attach:
        return GpuDevices()
    if spec.base.vendor == "cuda":
        return GpuDevices(gpus=True)
    devices = ("/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm")
    nodes = [n for n in (host.amd.kfd, *host.amd.render_nodes) if n is not None]
    gids = tuple(sorted({str(n.gid) for n in nodes})) or ("video", "render")
    return GpuDevices(devices=devices, group_add=gids)


def run_spec(spec: ImageSpec, access: GpuAccess, host: HostInfo, timeout_s: int, env: dict[str, str] | None = None) -> ContainerSpec:
    """The locked-down smoke container of an image (the port's ContainerSpec: no network, no
    capabilities, a read-only root, bounded memory and pids).

    The container only sleeps (bounded by the timeout, so it ends itself even if we vanish);
    the checks run in it through `exec`.
    """
    gpu = gpu_devices(spec, access, host)
    return ContainerSpec(
        image=spec.tag,
        command=("sleep", str(timeout_s + 60)),
        environment={"HOME": "/tmp", "XDG_CACHE_HOME": "/tmp/.cache", **(env or {})},
        labels={"io.builder.image-id": spec.id},
        tmpfs=dict(TMPFS),
        mem_limit=MEMORY_LIMIT,
        pids_limit=PIDS_LIMIT,
        gpus=gpu.gpus,
        devices=gpu.devices,
        group_add=gpu.group_add,
        platform=spec.platform,
    )


def gpu_flags(vendor: str, host: HostInfo) -> list[str]:
    """The `docker run` options that give an image of `vendor` this host's GPUs (the CLI twin of gpu_devices)."""
    if vendor == "cuda":
        return ["--gpus", "all"]
    if vendor == "rocm":
        nodes = [n for n in (host.amd.kfd, *host.amd.render_nodes) if n is not None]
        gids = sorted({str(n.gid) for n in nodes}) or ["video", "render"]
        return ["--device", "/dev/kfd", "--device", "/dev/dri", *[arg for gid in gids for arg in ("--group-add", gid)]]
    return []


def docker_run_line(vendor: str, reference: str, host: HostInfo) -> str:
    """The `docker run` a person types for an image of `vendor` on this host: the CLI twin of gpu_kwargs."""
    return " ".join(["docker", "run", "--rm", "-it", *gpu_flags(vendor, host), reference])
