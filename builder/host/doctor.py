"""`builder doctor`: what this host can run, judged from a HostInfo record and the plan.

Pure functions: no subprocess, no Docker. `host.facts.gather()` does the looking; this module
turns what it saw into host checks and one verdict per image, each with a reason and the fix.
Verdicts: `ok`, `warn` (runs, with a caveat), `fail` (cannot work here), `n/a` (this host has
no GPU of the image's vendor, so the GPU tests will be skipped rather than pass or fail; or the
image is of another CPU architecture, which this host does not run natively).

An image of another CPU architecture is judged apart: doctor answers what this host runs, and a
GPU image does not run under qemu-user emulation with or without binfmt (qemu-user has no GPU), so
emulation is never offered as its fix. Whether it can be built and its CPU checks run here under
emulation is a note of its own (`ImageVerdict.note`), with binfmt's fix where it is missing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from builder.compat import gpu_arch, lifecycle, rocm_driver, runtime_fit
from builder.compat.rules import framework, table
from builder.host.facts import (
    AmdInfo,
    EmulationFacts,
    EngineFacts,
    HostInfo,
    NvidiaGpu,
    NvidiaInfo,
    host_machine,
    machine_arch,
    runs_emulated,
)
from builder.lock.files import libraries
from builder.model.measured_fit import KNOWN_CCS
from builder.model.plan import ARM64, PLATFORM_ARCH, Accelerator, ImageSpec, Install
from builder.model.versions import release_tuple  # driver versions compare numerically: 580.159.03 > 580.65.06

Status = Literal["ok", "warn", "fail", "n/a"]
_SEVERITY: dict[Status, int] = {"fail": 0, "warn": 1, "n/a": 2, "ok": 3}

NO_NVIDIA = "no NVIDIA GPU on this host; the GPU checks will be skipped"
NO_KFD = "no /dev/kfd on this host (no AMD GPU, or amdgpu not loaded); the GPU checks will be skipped"
EMULATION_FIX = "apt-get install qemu-user-static (it registers qemu-aarch64 with the F flag)"
MOUNT_FIX = "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc, then " + EMULATION_FIX
TOOLKIT_FIX = "install nvidia-container-toolkit and run nvidia-ctk runtime configure --runtime=docker, then restart docker"


@dataclass(frozen=True)
class Check:
    """One finding about the host, or about one image on this host."""

    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class ImageVerdict:
    image: str
    vendor: str
    status: Status
    reason: str
    fix: str = ""
    findings: tuple[Check, ...] = ()  # every finding, worst first; reason/fix come from the worst
    unchecked: tuple[str, ...] = ()  # what could not be judged, e.g. no CC facts for a variant
    note: str = ""  # an image of another CPU architecture: whether it builds here under emulation, and the fix


# --- host checks ---------------------------------------------------------------------------


def driver_fix(error: str) -> str:
    lowered = error.lower()
    if "version mismatch" in lowered:
        return "the loaded kernel module and the user-space driver differ (usually after an upgrade): reboot"
    if "couldn't communicate" in lowered or "could not communicate" in lowered:
        return (
            "the kernel module is not loaded: check `lsmod | grep nvidia` and `dmesg | grep -i nvrm`; "
            "reinstall the driver, or reboot after a kernel update"
        )
    if "not found" in lowered:
        return "put nvidia-smi on PATH (it ships with the NVIDIA driver utilities)"
    return "run nvidia-smi by hand and check `dmesg | grep -i nvrm`; reinstall the driver if it stays broken"


def _engine_check(engine: EngineFacts) -> Check:
    if not engine.reachable:
        return Check(
            "engine",
            "fail",
            f"not reachable: {engine.error or 'no answer'}",
            "start the engine (sudo systemctl start docker) or point DOCKER_HOST at it",
        )
    runtimes = ", ".join(engine.runtimes) or "no GPU runtime"
    return Check("engine", "ok", f"version {engine.version or 'unknown'}; {runtimes}")


def _checks_check(engine: EngineFacts) -> list[Check]:
    """`builder test` refuses a host whose smoke checks cannot reach a container: say so here first."""
    if not engine.reachable or engine.checks_blocked is None:
        return []
    return [Check("smoke checks", "fail", engine.checks_blocked, "see the detail: `builder test` refuses this host until then")]


def _has_nvidia_runtime(engine: EngineFacts) -> bool:
    return any(name.startswith("nvidia") for name in engine.runtimes)


def _runtime_check(engine: EngineFacts) -> Check:
    if _has_nvidia_runtime(engine):
        return Check("nvidia runtime", "ok", f"engine runtimes: {', '.join(engine.runtimes)}")
    return Check(
        "nvidia runtime",
        "warn",
        "the engine lists no nvidia runtime; `--gpus all` may fail with 'could not select device driver \"\" with capabilities: [[gpu]]'",
        TOOLKIT_FIX,
    )


def _gpu_check(gpu: NvidiaGpu) -> Check:
    memory = f", {gpu.memory_mib / 1024:.1f} GiB" if gpu.memory_mib is not None else ""
    if gpu.compute_cap is None:
        return Check(
            f"gpu {gpu.index}",
            "warn",
            f"{gpu.name}{memory}; compute capability not reported (driver older than ~510?)",
            "update the driver; until then compute capability is not checked",
        )
    return Check(
        f"gpu {gpu.index}",
        "ok",
        f"{gpu.name}, compute capability {gpu.compute_cap}{memory}",
    )


def _branch_check(driver: str | None, count: int, today: dt.date) -> Check:
    """The driver, and whether NVIDIA has ended its branch (compat/data/lifecycle.yaml: vendor dates only)."""
    detail = f"driver {driver}; {count} GPU{'s' * (count != 1)}"
    ended = lifecycle.load().find("driver", lifecycle.driver_line(driver))
    if ended is not None and ended.date < today:
        return Check(
            "nvidia driver",
            "warn",
            f"{detail}; {ended} is past: NVIDIA no longer fixes this branch",
            "move to a supported branch (a long-term support branch such as R580)",
        )
    return Check("nvidia driver", "ok", detail)


def _nvidia_checks(nvidia: NvidiaInfo, engine: EngineFacts, today: dt.date) -> list[Check]:
    if nvidia.status == "absent":
        return [
            Check(
                "nvidia driver",
                "n/a",
                "nvidia-smi not found: no NVIDIA driver on this host",
            )
        ]
    if nvidia.status == "no_devices":
        return [Check("nvidia driver", "n/a", f"driver loaded, no GPU: {nvidia.error}")]
    if nvidia.status == "failed":
        error = nvidia.error or "nvidia-smi failed"
        return [
            Check(
                "nvidia driver",
                "fail",
                f"nvidia-smi failed: {error}",
                driver_fix(error),
            )
        ]
    count = len(nvidia.gpus)
    checks = [_branch_check(nvidia.driver, count, today)]
    checks += [_gpu_check(gpu) for gpu in nvidia.gpus]
    if engine.reachable:
        checks.append(_runtime_check(engine))
    return checks


def _group_finding(amd: AmdInfo) -> Check:
    nodes = ([amd.kfd] if amd.kfd else []) + list(amd.render_nodes)
    missing = {node.gid: node for node in nodes if not node.user_in_group}
    if not missing:
        groups = sorted({node.group_label for node in nodes})
        return Check("amd groups", "ok", f"you are in the owning group(s): {', '.join(groups)}")
    names = ", ".join(sorted(node.group_label for node in missing.values()))
    paths = ", ".join(node.path for node in nodes if not node.user_in_group)
    adds = " ".join(f"--group-add {gid}" for gid in sorted(missing))
    return Check(
        "amd groups",
        "warn",
        f"you are not in group(s) {names}, which own {paths}",
        f"sudo usermod -aG {names.replace(', ', ',')} $USER (then log in again); run containers "
        f"with {adds} (numeric, so it works when the image has no such group)",
    )


def _amd_checks(amd: AmdInfo) -> list[Check]:
    if amd.kfd is None:
        return [
            Check(
                "amd /dev/kfd",
                "n/a",
                "no /dev/kfd: no AMD GPU, or the amdgpu driver is not loaded",
            )
        ]
    checks = [Check("amd /dev/kfd", "ok", f"present (group {amd.kfd.group_label})")]
    if not amd.render_nodes:
        checks.append(
            Check(
                "amd render nodes",
                "fail",
                "/dev/kfd exists but /dev/dri has no renderD* nodes",
                "install or reload the kernel driver (amdgpu-dkms) and check `ls -l /dev/dri`",
            )
        )
    else:
        listed = ", ".join(f"{node.path} ({node.group_label})" for node in amd.render_nodes)
        checks.append(Check("amd render nodes", "ok", listed))
    checks.append(_group_finding(amd))
    return checks


def emulation_check(emulation: EmulationFacts) -> Check:
    """Whether linux/arm64 images can be built and smoke-tested here: natively, or under qemu-user
    through binfmt_misc. A warning, not a failure: amd64 images do not need it."""
    name = "arm64 emulation"
    cannot = "linux/arm64 images cannot be built or tested here"
    if emulation.state == "native":
        return Check(name, "ok", f"an arm64 host ({emulation.machine}): arm64 images run natively")
    if emulation.state == "unmounted":
        return Check(name, "warn", f"/proc/sys/fs/binfmt_misc is not mounted: {cannot}", MOUNT_FIX)
    if emulation.state == "absent":
        return Check(name, "warn", f"no qemu-aarch64 binfmt handler is registered: {cannot}", EMULATION_FIX)
    if emulation.state == "disabled":
        return Check(
            name, "warn", f"the qemu-aarch64 handler is registered but disabled: {cannot}", "echo 1 > /proc/sys/fs/binfmt_misc/qemu-aarch64"
        )
    if "F" not in emulation.flags:
        return Check(
            name,
            "warn",
            f"qemu-aarch64 is enabled without the F (fix-binary) flag ({emulation.flags or 'no flags'}): containers cannot find the interpreter",
            "apt-get install --reinstall qemu-user-static (Debian's registers it with F), or re-register the handler with flags F",
        )
    return Check(name, "ok", f"qemu-aarch64 registered and enabled (flags {emulation.flags}): arm64 images run emulated")


def emulation_refusal(platforms: Iterable[str], emulation: EmulationFacts) -> str | None:
    """Why `builder build`/`test` cannot take an arm64 image on this host (one line, the fix in it), or
    None: no arm64 image, an arm64 host, or a qemu-aarch64 handler containers can use (doctor's check ok)."""
    if ARM64 not in set(platforms) or not runs_emulated(ARM64, emulation.machine):
        return None
    check = emulation_check(emulation)
    if check.status == "ok":
        return None
    return f"arm64 image needs emulation: install qemu-user-static (scripts/setup.sh does); here {check.detail.split(':')[0]}"


def host_checks(host: HostInfo, today: dt.date | None = None) -> list[Check]:
    """The host section of `builder doctor`: engine (and the smoke checks' way into its containers),
    NVIDIA driver (and whether its branch is past NVIDIA's end of life on `today`) and GPUs, AMD
    device nodes, arm64 emulation."""
    return [
        _engine_check(host.engine),
        *_checks_check(host.engine),
        *_nvidia_checks(host.nvidia, host.engine, today or dt.datetime.now(dt.UTC).date()),
        *_amd_checks(host.amd),
        *([emulation_check(host.emulation)] if host.emulation is not None else []),
    ]


# --- image verdicts ------------------------------------------------------------------------


def _install_label(install: Install) -> str:
    if framework(install.framework).local_variant and install.variant and "+" not in install.version:
        return f"{install.framework} {install.version}+{install.variant}"
    return f"{install.framework} {install.version}" + (f" ({install.variant})" if install.variant else "")


def _driver_finding(driver: str | None, acc: Accelerator, gpus: Sequence[NvidiaGpu]) -> Check | None:
    """The image's NVIDIA_REQUIRE_CUDA judged as the container runtime judges it (compat/runtime_fit.py:
    the one driver rule `builder fit` shares), then the driver of the CUDA release the image carries."""
    if acc.require_cuda is None:
        return None
    if driver is None:
        return Check("driver", "warn", "nvidia-smi reported no driver version; driver not checked")
    devices = runtime_fit.devices_of([g.compute_cap for g in gpus], [g.brand for g in gpus])
    verdict = runtime_fit.started(acc.require_cuda, driver, devices, table())
    if verdict.status == "does not fit":
        return Check("driver", "fail", verdict.reason, "update the driver, or use an image of an older CUDA")
    if verdict.status == "unknown":
        return Check("driver", "warn", verdict.reason, "check the GPUs' brand (nvidia-smi -q: Product Brand)")
    below = "" if verdict.forward_compat else runtime_fit.full_features(driver, acc.version, acc.min_driver)
    if below:
        return Check("driver", "warn", verdict.reason + below, f"update the driver to >= {acc.min_driver}")
    return Check("driver", "ok", verdict.reason)


def _suggest(install: Install, ccs: Sequence[str]) -> str:
    """A variant of the same release covering every GPU, preferring the same naming (cu126 for cu130)."""
    common: set[str] | None = None
    for cc in ccs:
        found = set(gpu_arch.variants_for(install.framework, install.version, cc))
        common = found if common is None else common & found
    candidates = [v for v in gpu_arch.variants_for(install.framework, install.version, ccs[0]) if v in (common or set())]
    prefix = "".join(ch for ch in (install.variant or "") if ch.isalpha())
    same = [v for v in candidates if "".join(ch for ch in v if ch.isalpha()) == prefix]
    if same or candidates:
        return f"use a {(same or candidates)[0]} image"
    return f"no {install.framework} {install.version} wheel variant covers it: use an older release or another GPU"


def _who(gpu: NvidiaGpu, many: bool) -> str:
    return f"GPU {gpu.index} is {gpu.compute_cap} ({gpu.name})" if many else f"this GPU is {gpu.compute_cap} ({gpu.name})"


def _arch_finding(install: Install, gpus: Sequence[NvidiaGpu], unchecked: list[str]) -> Check | None:
    label = _install_label(install)
    row = gpu_arch.lookup(install.framework, install.variant, install.version)
    if row is None:
        unchecked.append(f"{label}: compute capability range unknown, not checked")
        return None
    known = [gpu for gpu in gpus if gpu.compute_cap is not None]
    unchecked += [f"GPU {g.index} ({g.name}): compute capability not reported" for g in gpus if g.compute_cap is None]
    if not known:
        return None
    jit = [g for g in known if row.jit_only(g.compute_cap or "0")]
    outside = [g for g in known if not row.contains(g.compute_cap or "0") and g not in jit]
    many = len(gpus) > 1
    supports = f"{label} supports compute capability {row.label}"
    if outside:
        usable = [gpu for gpu in known if gpu not in outside]
        detail = f"{supports}; {_who(outside[0], many)}"
        suggestion = _suggest(install, [gpu.compute_cap or "0" for gpu in known])
        if usable:
            ids = ",".join(str(gpu.index) for gpu in usable)
            return Check(
                "compute capability",
                "warn",
                detail,
                f"restrict it to GPU {ids} (NVIDIA_VISIBLE_DEVICES={ids}), or {suggestion}",
            )
        return Check("compute capability", "fail", detail, suggestion)
    if jit:
        return Check(
            "compute capability",
            "warn",
            f"{supports}; {_who(jit[0], many)}: runs through PTX JIT (slow first start)",
            "use a newer wheel variant when one ships kernels for this GPU",
        )
    ccs = ", ".join(sorted({gpu.compute_cap or "" for gpu in known}))
    return Check("compute capability", "ok", f"{supports}; GPU {ccs}")


def _measured_finding(image: ImageSpec, runs_on: tuple[str, ...], gpus: Sequence[NvidiaGpu], unchecked: list[str]) -> Check | None:
    """Each GPU against the compute capabilities the image runs on, measured from its locked wheels
    (a set: a GPU between two it runs on may still not run it, like 11.0 for x86 torch cu130)."""
    known = [gpu for gpu in gpus if gpu.compute_cap is not None]
    unchecked += [f"GPU {g.index} ({g.name}): compute capability not reported" for g in gpus if g.compute_cap is None]
    newest = max(KNOWN_CCS, key=release_tuple)
    newer = [g for g in known if release_tuple(g.compute_cap or "0") > release_tuple(newest)]
    unchecked += [
        f"GPU {g.index} ({g.name}): compute capability {g.compute_cap} is newer than every GPU it was measured for" for g in newer
    ]
    judged = [g for g in known if g not in newer]
    if not judged:
        return None
    outside = [g for g in judged if g.compute_cap not in runs_on]
    supports = f"{image.id} runs on compute capability {' '.join(runs_on) or 'none'} (measured from its locked wheels)"
    if outside:
        usable = [gpu for gpu in judged if gpu not in outside]
        detail = f"{supports}; {_who(outside[0], len(gpus) > 1)}"
        if usable:
            ids = ",".join(str(gpu.index) for gpu in usable)
            return Check("compute capability", "warn", detail, f"restrict it to GPU {ids} (NVIDIA_VISIBLE_DEVICES={ids})")
        return Check("compute capability", "fail", detail, "use an image that runs on it: `builder fit --planned` lists them")
    ccs = ", ".join(sorted({gpu.compute_cap or "" for gpu in judged}))
    return Check("compute capability", "ok", f"{supports}; GPU {ccs}")


def _cudnn_finding(image: ImageSpec, gpus: Sequence[NvidiaGpu], unchecked: list[str]) -> Check | None:
    """cuDNN releases drop GPU generations (9.11: Maxwell, Pascal, Volta): judged on the cuDNN the lock pins."""
    cudnn = libraries(image.lock).get("cudnn") if image.lock else None
    if cudnn is None:
        if any(i.cudnn for i in image.installs):
            unchecked.append(f"{image.id}: cuDNN is not locked, so its GPU floor is not checked (run `builder lock`)")
        return None
    floors = [cc for since, cc in table().cudnn_cc if release_tuple(cudnn) >= release_tuple(since)]
    if not floors:
        return None
    floor = max(floors, key=release_tuple)
    old = [gpu for gpu in gpus if gpu.compute_cap is not None and release_tuple(gpu.compute_cap) < release_tuple(floor)]
    if not old:
        return Check("cudnn", "ok", f"cuDNN {cudnn} (locked) supports compute capability >= {floor}")
    usable = [gpu for gpu in gpus if gpu not in old]
    detail = f"cuDNN {cudnn} (locked) needs compute capability >= {floor}; {_who(old[0], len(gpus) > 1)}"
    if usable:
        ids = ",".join(str(gpu.index) for gpu in usable)
        return Check(
            "cudnn", "warn", detail, f"restrict it to GPU {ids} (NVIDIA_VISIBLE_DEVICES={ids}), or use an image locked to cuDNN < 9.11"
        )
    return Check("cudnn", "fail", detail, "use an image whose lock pins cuDNN < 9.11 (an older framework release), or a newer GPU")


def _cuda_verdict(host: HostInfo, image: ImageSpec) -> ImageVerdict:
    nvidia = host.nvidia
    if nvidia.status == "failed":
        error = nvidia.error or "nvidia-smi failed"
        return ImageVerdict(
            image.id,
            "cuda",
            "fail",
            f"the NVIDIA driver does not answer: {error}",
            driver_fix(error),
        )
    if not nvidia.has_gpu:
        return ImageVerdict(image.id, "cuda", "n/a", NO_NVIDIA)
    unchecked: list[str] = []
    findings = [_driver_finding(nvidia.driver, image.accelerator, nvidia.gpus)]
    if findings[0] is None:
        unchecked.append(f"no NVIDIA_REQUIRE_CUDA known for CUDA {image.accelerator.version}")
    measured = image.locked_fit.runs_on if image.locked_fit is not None else None
    if measured is not None:  # its fit measured from its locked wheels (fit.json): every library, cuDNN's included
        findings.append(_measured_finding(image, measured, nvidia.gpus, unchecked))
    else:
        findings += [_arch_finding(install, nvidia.gpus, unchecked) for install in image.installs]
        findings.append(_cudnn_finding(image, nvidia.gpus, unchecked))
    if host.engine.reachable and not _has_nvidia_runtime(host.engine):
        findings.append(_runtime_check(host.engine))
    return _combine(image, "cuda", [f for f in findings if f is not None], unchecked)


@dataclass(frozen=True)
class GfxFinding:
    """A ROCm image on this host's AMD GPUs, from its measured code objects (usecases/fit.py gfx_verdict)."""

    status: str  # fits | does not fit | unknown
    reason: str
    runs_on: str  # what it runs on: fit/runs_on.py's cell, the one pull, catalog and report show


# The use-case injects it: fit/ judges code objects, and this stage comes before fit/.
GfxJudge = Callable[[ImageSpec], GfxFinding]


def _kernel_driver_finding(amd: AmdInfo, image: ImageSpec, unchecked: list[str]) -> Check | None:
    """The host's kernel and amdgpu module against AMD's published support of the image's ROCm (compat/rocm_driver.py)."""
    found = rocm_driver.check(image.accelerator.version, amd.kernel, amd.amdgpu, table().rocm)
    if found.status == "fits":
        return Check("amd kernel driver", "ok", found.reason)
    if found.status == "does not fit":
        return Check("amd kernel driver", "fail", found.reason, "install a kernel and amdgpu-dkms AMD lists for this ROCm release")
    unchecked.append(f"kernel driver: {found.reason}")
    return None


def _gfx_finding(image: ImageSpec, judge_gfx: GfxJudge | None, unchecked: list[str]) -> Check | None:
    if judge_gfx is None:
        unchecked.append(f"{image.id}: this host's gfx targets against its code objects are not checked")
        return None
    found = judge_gfx(image)
    status, reason = found.status, found.reason
    if status == "fits":
        return Check("gfx targets", "ok", reason)
    if status == "does not fit":
        return Check("gfx targets", "fail", reason, "use an image built for this GPU: `builder fit --planned --vendor amd` lists them")
    unchecked.append(f"gfx targets: {reason}")
    return None


def _rocm_verdict(host: HostInfo, image: ImageSpec, judge_gfx: GfxJudge | None = None) -> ImageVerdict:
    amd = host.amd
    if not amd.present:
        cell = f"; it runs on {judge_gfx(image).runs_on}" if judge_gfx is not None else ""
        return ImageVerdict(image.id, "rocm", "n/a", NO_KFD + cell)
    findings: list[Check | None] = [check for check in _amd_checks(amd) if check.name != "amd /dev/kfd"]
    unchecked: list[str] = []
    findings.append(_kernel_driver_finding(amd, image, unchecked))
    findings.append(_gfx_finding(image, judge_gfx, unchecked))
    return _combine(image, "rocm", [f for f in findings if f is not None], unchecked)


def _combine(image: ImageSpec, vendor: str, findings: list[Check], unchecked: list[str]) -> ImageVerdict:
    ordered = tuple(sorted(findings, key=lambda check: _SEVERITY[check.status]))
    if not ordered:
        return ImageVerdict(image.id, vendor, "ok", "nothing to check", unchecked=tuple(unchecked))
    worst = ordered[0]
    if worst.status == "ok":
        reason = "; ".join(check.detail for check in ordered)
        return ImageVerdict(image.id, vendor, "ok", reason, "", ordered, tuple(unchecked))
    more = sum(1 for check in ordered[1:] if check.status in ("fail", "warn"))
    reason = worst.detail + (f" (+{more} more)" if more else "")
    return ImageVerdict(image.id, vendor, worst.status, reason, worst.fix, ordered, tuple(unchecked))


def _another_arch(host: HostInfo, image: ImageSpec, machine: str) -> ImageVerdict:
    """An image this host does not run natively: `n/a` ("another CPU architecture"), the build-here note apart."""
    arch = PLATFORM_ARCH.get(image.platform, image.platform)
    here = machine_arch(machine)
    gpu = image.accelerator.kind != "cpu"
    reason = f"another CPU architecture: a {image.platform} image; this host is {here}" + (
        " (qemu-user emulation has no GPU)" if gpu else ""
    )
    checks = " and its CPU checks run" if gpu else " and runs"
    if image.platform != ARM64 or host.emulation is None:
        note = f"building it here needs {arch} emulation, which doctor does not check"
    else:
        check = emulation_check(host.emulation)
        note = (
            f"builds{checks} here under qemu-aarch64 emulation (slow)"
            if check.status == "ok"
            else f"not buildable here: {check.detail}; to build it here: {check.fix}"
        )
    return ImageVerdict(image.id, image.base.vendor, "n/a", reason, f"run it on an {arch} host", note=note)


def image_verdict(host: HostInfo, image: ImageSpec, judge_gfx: GfxJudge | None = None) -> ImageVerdict:
    machine = host_machine(host)
    if runs_emulated(image.platform, machine):
        return _another_arch(host, image, machine)
    kind = image.accelerator.kind
    if kind == "cuda":
        return _cuda_verdict(host, image)
    if kind == "rocm":
        return _rocm_verdict(host, image, judge_gfx)
    return ImageVerdict(image.id, "cpu", "ok", "CPU image: needs no GPU")


def image_verdicts(host: HostInfo, images: Sequence[ImageSpec], judge_gfx: GfxJudge | None = None) -> list[ImageVerdict]:
    """One verdict per image: can it use this host's GPU, and if not, what to do instead (`judge_gfx`:
    a ROCm image's code objects against this host's AMD GPUs, when the caller can judge them)."""
    return [image_verdict(host, image, judge_gfx) for image in images]


# --- data out -------------------------------------------------------------------------------


def report_json(host: HostInfo, checks: Sequence[Check], verdicts: Sequence[ImageVerdict]) -> dict[str, object]:
    counts = Counter(verdict.status for verdict in verdicts)
    return {
        "host": dataclasses.asdict(host),
        "checks": [dataclasses.asdict(check) for check in checks],
        "images": [dataclasses.asdict(verdict) for verdict in verdicts],
        "summary": {status: counts.get(status, 0) for status in ("ok", "warn", "fail", "n/a")},
    }
