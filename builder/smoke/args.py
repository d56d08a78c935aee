"""Smoke-test run arguments: how a locked-down container with the right GPU access is created.

Pure functions of (image spec, --gpu mode, host facts) to the engine port's ContainerSpec; unit
tests pin the exact docker SDK arguments the adapter makes of it for CUDA, ROCm and cpu images,
without an engine or a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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


Need = Literal["required", "recommended", "optional"]


@dataclass(frozen=True)
class RocmFlag:
    """One `docker run` option AMD's container documentation gives ROCm containers (compat/data/sources.yaml ROCM_DOCKER)."""

    args: tuple[str, ...]
    need: Need  # required: the GPUs are not reachable without it; recommended: frameworks want it; optional: a trade-off
    why: str
    smoke: bool  # given to the locked-down smoke containers too


# The one table of ROCm device flags: the smoke containers (gpu_devices), `builder pull`'s run line and
# `builder env shell` (gpu_flags) are made from it. A group row stands for the groups that own the
# device nodes: this host's gids where /dev/kfd is seen, else both names.
ROCM_FLAGS: tuple[RocmFlag, ...] = (
    RocmFlag(("--device", "/dev/kfd"), "required", "the compute interface every AMD GPU shares", smoke=True),
    RocmFlag(("--device", "/dev/dri"), "required", "the render nodes, one per GPU (/dev/dri/renderD<N> gives fewer)", smoke=True),
    RocmFlag(
        ("--group-add", "video"), "required", "the image runs as a non-root user: video owns the nodes on older distributions", smoke=True
    ),
    RocmFlag(("--group-add", "render"), "required", "render owns /dev/kfd and /dev/dri/renderD* from Ubuntu 20.04 on", smoke=True),
    RocmFlag(("--ipc=host",), "recommended", "PyTorch's data loaders and RCCL share memory between processes", smoke=False),
    RocmFlag(("--shm-size", "8G"), "recommended", "room in /dev/shm where --ipc=host is not wanted", smoke=False),
    RocmFlag(
        ("--security-opt", "seccomp=unconfined"),
        "optional",
        "memory mapping (numactl) in HPC environments; it lifts the syscall filter, so builder never adds it",
        smoke=False,
    ),
)


def rocm_groups(host: HostInfo) -> tuple[str, ...]:
    """The groups a ROCm container joins: the gids owning this host's /dev/kfd and render nodes, else video and render."""
    nodes = [n for n in (host.amd.kfd, *host.amd.render_nodes) if n is not None]
    return tuple(sorted({str(n.gid) for n in nodes})) or tuple(f.args[1] for f in ROCM_FLAGS if f.args[0] == "--group-add")


def rocm_flags(host: HostInfo, needs: tuple[Need, ...] = ("required", "recommended"), smoke: bool = False) -> list[str]:
    """The table's options of these needs (only the smoke containers' with `smoke`), the groups as this host has them."""
    out: list[str] = []
    grouped = False
    for flag in (f for f in ROCM_FLAGS if f.need in needs and (f.smoke or not smoke)):
        if flag.args[0] != "--group-add":
            out += flag.args
        elif not grouped:  # the group rows, once, as this host has them
            out += [arg for gid in rocm_groups(host) for arg in ("--group-add", gid)]
            grouped = True
    return out


def rocm_flags_note() -> str:
    """What each ROCm option is for, by need: the line `pull` and `env shell` print beside the run line."""
    parts = []
    for need in ("required", "recommended", "optional"):
        flags = [f for f in ROCM_FLAGS if f.need == need]
        parts.append(f"{need}: " + "; ".join(f"{' '.join(f.args)} ({f.why})" for f in flags))
    return "ROCm container options (AMD's docs) - " + " | ".join(parts)


def gpu_devices(spec: ImageSpec, access: GpuAccess, host: HostInfo) -> GpuDevices:
    """`--gpus all` for CUDA; for ROCm the table's smoke devices (/dev/kfd, /dev/dri) with the nodes' groups."""
    if not access.attach:
        return GpuDevices()
    if spec.base.vendor == "cuda":
        return GpuDevices(gpus=True)
    paths = [f.args[1] for f in ROCM_FLAGS if f.smoke and f.args[0] == "--device"]
    return GpuDevices(devices=tuple(f"{p}:{p}:rwm" for p in paths), group_add=rocm_groups(host))


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
        return rocm_flags(host)
    return []


def docker_run_line(vendor: str, reference: str, host: HostInfo) -> str:
    """The `docker run` a person types for an image of `vendor` on this host: the CLI twin of gpu_kwargs."""
    return " ".join(["docker", "run", "--rm", "-it", *gpu_flags(vendor, host), reference])
