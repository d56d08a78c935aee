"""hello-gpu's JSON report (builder/probes/hello_gpu.py), read back as typed records.

The probe ships alone inside every image and stays stdlib-only, so it writes plain JSON; this is
the one place that JSON becomes records. The smoke checks, the runner (diagnoses, the CUDA checks
that ran without a GPU), publish (what was measured inside the image) and the nightly read these
fields, never the probe's dicts. `from_json` refuses a report of the wrong shape in one line that
names its file; keys the probe adds later are ignored, so a newer probe still reads.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from builder.model import jsonfields as jf
from builder.util.errors import UserError

Status = Literal["passed", "failed", "skipped", "not-installed"]  # hello_gpu.STATUSES
STATUSES: tuple[Status, ...] = ("passed", "failed", "skipped", "not-installed")
RERUN = "run `builder test` again"


@dataclass(frozen=True)
class Diagnosis:
    """A known failure matched in the output: what it is and how to fix it."""

    cause: str
    fix: str


@dataclass(frozen=True)
class Check:
    """A computation compared with the pure-Python reference (cpu_check, gpu_check)."""

    ok: bool
    detail: str = ""
    max_abs_err: float | None = None


@dataclass(frozen=True)
class OfflineCheck:
    """A framework's check that needs no GPU (its built-for CUDA, cuDNN loaded, a kernel compiled)."""

    name: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class LibraryCheck:
    """A CUDA library loaded at the version the lock pins (expected, found, library: its path), or NVRTC compiling a kernel."""

    name: str
    ok: bool
    detail: str = ""
    expected: str | None = None
    found: str | None = None
    library: str | None = None


@dataclass(frozen=True)
class Device:
    name: str | None
    capability: str | None
    memory_gb: float | None


@dataclass(frozen=True)
class FrameworkProbe:
    """One framework's result: not-installed, or imported, computed on the CPU, maybe on a GPU."""

    framework: str
    status: Status
    version: str | None = None
    reason: str = ""
    build: dict[str, jf.Fact] = field(default_factory=dict)  # what the framework says it was built with (per framework)
    cuda_build: str | None = None  # the CUDA its build targets ("13.0", or "13" for a major-wide wheel)
    devices: tuple[Device, ...] = ()
    cpu_check: Check | None = None
    gpu_check: Check | None = None
    offline: tuple[OfflineCheck, ...] = ()
    diagnosis: Diagnosis | None = None
    seconds: float = 0.0

    def built(self, key: str) -> str | None:
        """A build fact as text (torch's `cudnn` is a number, its `hip` text); None when absent, empty or not one value."""
        value = self.build.get(key)
        return None if value is None or value == "" or isinstance(value, tuple | dict) else str(value)


@dataclass(frozen=True)
class CudaLibraries:
    """The CUDA libraries the lock pins, each loaded and versioned (and NVRTC compiling a kernel)."""

    checks: tuple[LibraryCheck, ...] = ()
    ok: bool = True
    diagnosis: Diagnosis | None = None


@dataclass(frozen=True)
class ProbeHost:
    python: str
    platform: str = ""
    gpu_devices: tuple[str, ...] = ()
    nvidia_smi: dict[str, str | None] | None = None  # name, driver_version, compute_cap of the first GPU


@dataclass(frozen=True)
class ProbeReport:
    host: ProbeHost
    frameworks: dict[str, FrameworkProbe]
    cuda: CudaLibraries = field(default_factory=CudaLibraries)
    summary: dict[str, int] = field(default_factory=dict)
    ok: bool = False
    schema: int = 1
    probe: str = "hello-gpu"

    def to_json(self) -> dict[str, Any]:
        """The probe's own JSON keys (what `builder test` saves in the results file)."""
        data = asdict(self)
        for entry in data["frameworks"].values():
            entry["build"] = {k: list(v) if isinstance(v, tuple) else v for k, v in entry["build"].items()}
        return data


# -- the typed reader ---------------------------------------------------------------------------


def from_json(data: Any, where: str) -> ProbeReport:
    """A ProbeReport from the probe's JSON, each field the readers use checked for its type."""

    def fail(what: str) -> UserError:
        return UserError(f"not a hello-gpu report: {what}; {RERUN}", where)

    doc = jf.obj(data, "the report", fail)
    if "frameworks" not in doc or "host" not in doc:
        raise fail("it lacks 'frameworks' or 'host'")
    host = jf.obj(doc["host"], "host", fail)
    smi = host.get("nvidia_smi")
    return ProbeReport(
        host=ProbeHost(
            python=jf.text(host.get("python"), "host.python", fail),
            platform=jf.text(host.get("platform", ""), "host.platform", fail),
            gpu_devices=jf.texts(host.get("gpu_devices", []), "host.gpu_devices", fail),
            nvidia_smi=None
            if smi is None
            else {str(k): jf.optional_text(v, f"host.nvidia_smi.{k}", fail) for k, v in jf.obj(smi, "host.nvidia_smi", fail).items()},
        ),
        frameworks={
            str(name): _framework(entry, f"frameworks.{name}", fail)
            for name, entry in jf.obj(doc["frameworks"], "frameworks", fail).items()
        },
        cuda=_cuda(doc.get("cuda") or {}, fail),
        summary={str(k): jf.whole(v, f"summary.{k}", fail) for k, v in jf.obj(doc.get("summary", {}), "summary", fail).items()},
        ok=jf.flag(doc.get("ok", False), "ok", fail),
        schema=jf.whole(doc.get("schema", 1), "schema", fail),
        probe=jf.text(doc.get("probe", "hello-gpu"), "probe", fail),
    )


def _framework(value: Any, key: str, fail: jf.Fail) -> FrameworkProbe:
    entry = jf.obj(value, key, fail)
    status = entry.get("status")
    if status not in STATUSES:
        raise fail(f"{key}.status {str(status)[:40]!r} is not one of {', '.join(STATUSES)}")
    return FrameworkProbe(
        framework=jf.text(entry.get("framework", key.rpartition(".")[2]), f"{key}.framework", fail),
        status=status,
        version=jf.scalar_text(entry.get("version"), f"{key}.version", fail),
        reason=jf.text(entry.get("reason") or "", f"{key}.reason", fail),
        build=jf.facts(entry.get("build") or {}, f"{key}.build", fail),
        cuda_build=jf.scalar_text(entry.get("cuda_build"), f"{key}.cuda_build", fail),
        devices=tuple(_device(d, f"{key}.devices", fail) for d in jf.objs(entry.get("devices") or [], f"{key}.devices", fail)),
        cpu_check=_check(entry.get("cpu_check"), f"{key}.cpu_check", fail),
        gpu_check=_check(entry.get("gpu_check"), f"{key}.gpu_check", fail),
        offline=tuple(_offline(c, f"{key}.offline", fail) for c in jf.objs(entry.get("offline") or [], f"{key}.offline", fail)),
        diagnosis=_diagnosis(entry.get("diagnosis"), f"{key}.diagnosis", fail),
        seconds=jf.number(entry.get("seconds", 0.0), f"{key}.seconds", fail),
    )


def _cuda(value: Any, fail: jf.Fail) -> CudaLibraries:
    cuda = jf.obj(value, "cuda", fail)
    return CudaLibraries(
        checks=tuple(_library(c, "cuda.checks", fail) for c in jf.objs(cuda.get("checks") or [], "cuda.checks", fail)),
        ok=jf.flag(cuda.get("ok", True), "cuda.ok", fail),
        diagnosis=_diagnosis(cuda.get("diagnosis"), "cuda.diagnosis", fail),
    )


def _check(value: Any, key: str, fail: jf.Fail) -> Check | None:
    if value is None:
        return None
    check = jf.obj(value, key, fail)
    return Check(
        ok=bool(check.get("ok")),
        detail=jf.text(check.get("detail") or "", f"{key}.detail", fail),
        max_abs_err=jf.optional_number(check.get("max_abs_err"), f"{key}.max_abs_err", fail),
    )


def _offline(check: dict[str, Any], key: str, fail: jf.Fail) -> OfflineCheck:
    return OfflineCheck(
        name=jf.text(check.get("name"), f"{key}.name", fail),
        ok=bool(check.get("ok")),
        detail=jf.text(check.get("detail") or "", f"{key}.detail", fail),
    )


def _library(check: dict[str, Any], key: str, fail: jf.Fail) -> LibraryCheck:
    return LibraryCheck(
        name=jf.text(check.get("name"), f"{key}.name", fail),
        ok=bool(check.get("ok")),
        detail=jf.text(check.get("detail") or "", f"{key}.detail", fail),
        expected=jf.scalar_text(check.get("expected"), f"{key}.expected", fail),
        found=jf.scalar_text(check.get("found"), f"{key}.found", fail),
        library=jf.optional_text(check.get("library"), f"{key}.library", fail),
    )


def _device(device: dict[str, Any], key: str, fail: jf.Fail) -> Device:
    return Device(
        name=jf.scalar_text(device.get("name"), f"{key}.name", fail),
        capability=jf.scalar_text(device.get("capability"), f"{key}.capability", fail),
        memory_gb=jf.optional_number(device.get("memory_gb"), f"{key}.memory_gb", fail),
    )


def _diagnosis(value: Any, key: str, fail: jf.Fail) -> Diagnosis | None:
    if value is None:
        return None
    found = jf.obj(value, key, fail)
    return Diagnosis(jf.text(found.get("cause"), f"{key}.cause", fail), jf.text(found.get("fix"), f"{key}.fix", fail))
