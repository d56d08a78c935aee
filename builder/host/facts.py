"""What this host offers to GPU containers: the engine, NVIDIA GPUs, AMD device nodes, arm64 emulation.

Gathering is the only I/O `builder doctor` does; every source (commands, the /dev tree, the
engine, the user's groups) is a parameter, so tests hand in fixtures and the verdicts in
`doctor.py` stay pure functions over the `HostInfo` record built here.
"""

from __future__ import annotations

import dataclasses
import grp
import os
import platform
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from builder.compat.require import BRANDS
from builder.model.plan import PLATFORM_ARCH
from builder.util.errors import UserError
from builder.util.text import redact

Runner = Callable[[list[str]], tuple[int, str]]
Identity = Callable[[], tuple[int, frozenset[int]]]  # (effective uid, group ids)
GroupName = Callable[[int], str | None]

NVIDIA_SMI_FIELDS = ("name", "driver_version", "compute_cap", "memory.total")
NVIDIA_SMI_QUERY = (
    "nvidia-smi",
    f"--query-gpu={','.join(NVIDIA_SMI_FIELDS)}",
    "--format=csv,noheader,nounits",
)
# Drivers older than ~510 do not know the compute_cap field; ask again without it.
_FALLBACK_FIELDS = ("name", "driver_version", "memory.total")
_NOT_A_FIELD = re.compile(r"is not a valid field", re.IGNORECASE)
_NO_DEVICES = re.compile(r"No devices were found", re.IGNORECASE)
_UNSET = {"", "[n/a]", "n/a", "[not supported]", "[unknown error]"}
RUN_TIMEOUT_S = 30

NvidiaStatus = Literal["ok", "absent", "no_devices", "failed"]


@dataclass(frozen=True)
class EngineFacts:
    reachable: bool
    version: str | None = None
    runtimes: tuple[str, ...] = ()
    error: str | None = None
    checks_blocked: str | None = None  # why the smoke checks could not reach its containers (no docker CLI)


@dataclass(frozen=True)
class NvidiaGpu:
    index: int  # position in nvidia-smi's list, i.e. what NVIDIA_VISIBLE_DEVICES takes
    name: str
    compute_cap: str | None  # "9.0"; None when the driver does not report it
    memory_mib: int | None
    brand: str | None = None  # libnvidia-container's name of its product brand ("nvidia", "geforce"); None: not read


@dataclass(frozen=True)
class NvidiaInfo:
    """`absent`: no nvidia-smi; `no_devices`: driver up, no GPU; `failed`: driver broken."""

    status: NvidiaStatus
    driver: str | None = None
    gpus: tuple[NvidiaGpu, ...] = ()
    error: str | None = None
    device_nodes: bool = False  # /dev/nvidiactl exists

    @property
    def has_gpu(self) -> bool:
        return self.status == "ok" and bool(self.gpus)


@dataclass(frozen=True)
class DeviceNode:
    path: str  # as seen on the host, e.g. /dev/dri/renderD128
    gid: int
    group: str | None  # owning group's name; None when the host has no name for the gid
    user_in_group: bool  # the current user can open it through group membership (or is root)

    @property
    def group_label(self) -> str:
        return self.group or str(self.gid)


@dataclass(frozen=True)
class AmdInfo:
    kfd: DeviceNode | None = None
    render_nodes: tuple[DeviceNode, ...] = ()
    kernel: str | None = None  # `uname -r`, gathered where /dev/kfd is (the kernel-driver check, compat/rocm_driver.py)
    amdgpu: str | None = None  # /sys/module/amdgpu/version: AMD's amdgpu-dkms driver has one, the kernel's own does not

    @property
    def present(self) -> bool:
        return self.kfd is not None


BINFMT_DIR = Path("proc/sys/fs/binfmt_misc")  # under the root given to gather_emulation
ARM64_HANDLER = "qemu-aarch64"  # the name Debian's qemu-user-static registers

EmulationState = Literal["native", "unmounted", "absent", "disabled", "enabled"]


@dataclass(frozen=True)
class EmulationFacts:
    """Whether this host runs linux/arm64 binaries: natively, or through a binfmt_misc handler."""

    machine: str  # uname -m: x86_64, aarch64
    state: EmulationState  # native: an arm64 host; unmounted: /proc/sys/fs/binfmt_misc is empty; absent: no handler
    flags: str = ""  # the handler's flags (F: the interpreter is opened at registration, so it works inside containers)


@dataclass(frozen=True)
class HostInfo:
    engine: EngineFacts
    nvidia: NvidiaInfo
    amd: AmdInfo
    emulation: EmulationFacts | None = None  # None: not looked at


def run_command(argv: list[str]) -> tuple[int, str]:
    """Run a command; (exit code, stdout+stderr). 127 = not found, 124 = timed out."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    except FileNotFoundError:
        return 127, f"{argv[0]}: command not found"
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]}: timed out after {RUN_TIMEOUT_S} s"
    except OSError as exc:
        return 126, f"{argv[0]}: {exc}"
    return proc.returncode, proc.stdout + proc.stderr


def current_identity() -> tuple[int, frozenset[int]]:
    return os.geteuid(), frozenset(os.getgroups()) | {os.getegid()}


def group_name(gid: int) -> str | None:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return None


def _value(text: str) -> str | None:
    text = text.strip()
    return None if text.lower() in _UNSET else text


def parse_gpu_csv(output: str, fields: tuple[str, ...] = NVIDIA_SMI_FIELDS) -> tuple[str | None, tuple[NvidiaGpu, ...]]:
    """(driver version, GPUs) from `--format=csv,noheader,nounits` output; other lines are ignored."""
    driver: str | None = None
    gpus: list[NvidiaGpu] = []
    for line in output.splitlines():
        # Split from the right: a GPU name is the one field that could contain a comma.
        parts = line.rsplit(",", len(fields) - 1)
        if len(parts) != len(fields) or not parts[0].strip():
            continue
        row = dict(zip(fields, parts, strict=True))
        memory = _value(row.get("memory.total", ""))
        cc = _value(row.get("compute_cap", ""))
        if cc is not None and not re.fullmatch(r"\d+\.\d+", cc):
            continue
        if memory is not None and not memory.isdigit():
            continue
        driver = driver or _value(row["driver_version"])
        gpus.append(
            NvidiaGpu(
                index=len(gpus),
                name=row["name"].strip(),
                compute_cap=cc,
                memory_mib=int(memory) if memory is not None else None,
            )
        )
    return driver, tuple(gpus)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def gather_nvidia(run: Runner = run_command, dev_root: Path = Path("/")) -> NvidiaInfo:
    nodes = (dev_root / "dev" / "nvidiactl").exists()
    rc, out = run(list(NVIDIA_SMI_QUERY))
    fields: tuple[str, ...] = NVIDIA_SMI_FIELDS
    if rc != 0 and _NOT_A_FIELD.search(out):
        fields = _FALLBACK_FIELDS
        rc, out = run(
            [
                NVIDIA_SMI_QUERY[0],
                f"--query-gpu={','.join(fields)}",
                *NVIDIA_SMI_QUERY[2:],
            ]
        )
    if rc == 127:
        error = "nvidia-smi not found, but /dev/nvidiactl exists" if nodes else None
        return NvidiaInfo(status="failed" if nodes else "absent", error=error, device_nodes=nodes)
    if _NO_DEVICES.search(out):
        return NvidiaInfo(status="no_devices", error=_first_line(out), device_nodes=nodes)
    driver, gpus = parse_gpu_csv(out, fields) if rc == 0 else (None, ())
    if not gpus:
        error = _first_line(out) or f"nvidia-smi exited with {rc} and printed nothing"
        return NvidiaInfo(status="failed", error=error, device_nodes=nodes)
    return NvidiaInfo(status="ok", driver=driver, gpus=gpus, device_nodes=nodes)


NVIDIA_SMI_BRANDS = ("nvidia-smi", "-q")  # the full report: its "Product Brand" line has no --query-gpu field
_PRODUCT_BRAND = re.compile(r"^\s*Product Brand\s*:\s*(.+?)\s*$", re.MULTILINE)


def parse_brands(output: str) -> tuple[str | None, ...]:
    """Each GPU's "Product Brand" from `nvidia-smi -q`, in order, as libnvidia-container names it
    (compat/require.py BRANDS: "NVIDIA RTX" -> nvidiartx); None for one it does not name."""
    return tuple(BRANDS.get(re.sub(r"\s+", "", found).lower()) for found in _PRODUCT_BRAND.findall(output))


def with_brands(info: NvidiaInfo, run: Runner = run_command) -> NvidiaInfo:
    """The GPUs with their product brands (what an image's `brand=` requirement clauses are judged
    by), read from `nvidia-smi -q`; the GPUs unchanged when it fails or lists another number of GPUs."""
    if not info.has_gpu:
        return info
    rc, out = run(list(NVIDIA_SMI_BRANDS))
    brands = parse_brands(out) if rc == 0 else ()
    if len(brands) != len(info.gpus):
        return info
    return dataclasses.replace(info, gpus=tuple(dataclasses.replace(g, brand=b) for g, b in zip(info.gpus, brands, strict=True)))


def _device_node(path: Path, dev_root: Path, uid: int, gids: frozenset[int], name: GroupName) -> DeviceNode:
    gid = path.stat().st_gid
    return DeviceNode(
        path="/" + str(path.relative_to(dev_root)),
        gid=gid,
        group=name(gid),
        user_in_group=uid == 0 or gid in gids,
    )


def _render_number(path: Path) -> int:
    digits = path.name.removeprefix("renderD")
    return int(digits) if digits.isdigit() else 1 << 30


AMDGPU_VERSION = Path("sys/module/amdgpu/version")  # under the root given to amdgpu_version
_MODULE = re.compile(r"^[0-9][0-9A-Za-z.+_-]{0,63}$")


def amdgpu_version(root: Path = Path("/")) -> str | None:
    """The amdgpu module's version file (AMD's amdgpu-dkms driver has one, the kernel's own in-tree driver
    does not); None when absent or not a version."""
    try:
        text = (root / AMDGPU_VERSION).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return text if _MODULE.fullmatch(text) else None


def gather_amd(
    dev_root: Path = Path("/"),
    identity: Identity = current_identity,
    name: GroupName = group_name,
    kernel: Callable[[], str] = platform.release,
) -> AmdInfo:
    kfd_path = dev_root / "dev" / "kfd"
    if not kfd_path.exists():
        return AmdInfo()
    uid, gids = identity()
    nodes = sorted((dev_root / "dev" / "dri").glob("renderD*"), key=_render_number)
    return AmdInfo(
        kfd=_device_node(kfd_path, dev_root, uid, gids, name),
        render_nodes=tuple(_device_node(p, dev_root, uid, gids, name) for p in nodes),
        kernel=kernel() or None,
        amdgpu=amdgpu_version(dev_root),
    )


def engine_facts() -> EngineFacts:
    """Ask the configured engine (builder.engine) for its version and GPU runtimes."""
    # Imported here: only a caller that wants engine facts pays for the docker SDK.
    from builder.engine import client as engine_mod
    from builder.engine.port import EngineFault

    try:
        engine = engine_mod.open_engine(timeout=RUN_TIMEOUT_S)
    except (UserError, EngineFault, OSError) as exc:
        return EngineFacts(reachable=False, error=_first_line(str(exc)) or type(exc).__name__)
    try:
        return EngineFacts(
            reachable=True, version=engine.version(), runtimes=tuple(sorted(engine.gpu_runtimes())), checks_blocked=engine.checks_blocked()
        )
    except (EngineFault, OSError) as exc:
        return EngineFacts(reachable=False, error=redact(_first_line(str(exc))) or type(exc).__name__)
    finally:
        engine.close()


def gather_emulation(root: Path = Path("/"), machine: str | None = None) -> EmulationFacts:
    """What /proc/sys/fs/binfmt_misc says of the arm64 handler (`root` and `machine`: tests give their own)."""
    machine = (machine or platform.machine()).lower()
    if machine in ("aarch64", "arm64"):
        return EmulationFacts(machine, "native")
    folder = root / BINFMT_DIR
    if not (folder / "status").is_file():
        return EmulationFacts(machine, "unmounted")
    handler = folder / ARM64_HANDLER
    try:
        text = handler.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return EmulationFacts(machine, "absent")
    lines = text.splitlines()
    flags = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("flags:")), "")
    return EmulationFacts(machine, "enabled" if lines[:1] == ["enabled"] else "disabled", flags)


_MACHINE_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}  # uname -m -> Docker's name


def runs_emulated(platform_: str, machine: str) -> bool:
    """Whether an image of `platform_` (linux/arm64) runs under emulation on a host whose `uname -m`
    is `machine`: its architecture is not the host's."""
    return PLATFORM_ARCH.get(platform_, platform_) != machine_arch(machine)


def machine_arch(machine: str) -> str:
    """`uname -m` as Docker names the architecture: x86_64 -> amd64, aarch64 -> arm64."""
    return _MACHINE_ARCH.get(machine.lower(), machine.lower())


def host_machine(host: HostInfo) -> str:
    """The host's `uname -m`, as gathered (or this process's machine when emulation was not looked at)."""
    return host.emulation.machine if host.emulation is not None else platform.machine()


def gather(
    run: Runner = run_command,
    dev_root: Path = Path("/"),
    engine: Callable[[], EngineFacts] | None = None,
    *,
    identity: Identity = current_identity,
    name: GroupName = group_name,
) -> HostInfo:
    """Collect everything doctor judges. `engine=None` asks builder.engine."""
    return HostInfo(
        engine=(engine or engine_facts)(),
        nvidia=with_brands(gather_nvidia(run, dev_root), run),
        amd=gather_amd(dev_root, identity, name),
        emulation=gather_emulation(dev_root),
    )
