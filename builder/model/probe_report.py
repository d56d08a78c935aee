"""hello-gpu's JSON report (builder/probes/hello_gpu.py), read back as typed records.

The probe ships alone inside every image and stays stdlib-only, so it writes plain JSON; this is
the one place that JSON becomes records. The smoke checks, the runner (diagnoses, the CUDA checks
that ran without a GPU), publish (what was measured inside the image) and the nightly read these
fields, never the probe's dicts. `from_json` refuses a report of the wrong shape in one line that
names its file; keys the probe adds later are ignored, so a newer probe still reads.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, cast

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


def _or(empty: Any, read: jf.Reader) -> jf.Reader:
    """`read`, with a null (or any empty value) read as `empty`: the probe writes null for none."""
    return lambda value, key, fail: read(value or empty, key, fail)


def _truthy(value: Any, key: str, fail: jf.Fail) -> bool:
    return bool(value)  # a check's `ok`: the probe's own truth value, as it always was read


def _status(value: Any, key: str, fail: jf.Fail) -> Status:
    if value not in STATUSES:
        raise fail(f"{key} {str(value)[:40]!r} is not one of {', '.join(STATUSES)}")
    return cast(Status, value)


def _whole_map(value: Any, key: str, fail: jf.Fail) -> dict[str, int]:
    return {str(k): jf.whole(v, f"{key}.{k}", fail) for k, v in jf.obj(value, key, fail).items()}


# Every table is open: keys the probe adds later are ignored, so a newer probe still reads.
TEXT_OR_EMPTY = _or("", jf.text)
DIAGNOSIS = jf.optional(jf.nested((jf.Field("cause", jf.text), jf.Field("fix", jf.text)), Diagnosis, closed=False))
CHECK_FIELDS = (
    jf.Field("ok", _truthy, False),
    jf.Field("detail", TEXT_OR_EMPTY, ""),
    jf.Field("max_abs_err", jf.optional_number, None),
)
OFFLINE_FIELDS = (jf.Field("name", jf.text), jf.Field("ok", _truthy, False), jf.Field("detail", TEXT_OR_EMPTY, ""))
LIBRARY_FIELDS = (
    *OFFLINE_FIELDS,
    *(jf.Field(key, jf.scalar_text, None) for key in ("expected", "found")),
    jf.Field("library", jf.optional_text, None),
)
DEVICE_FIELDS = (
    *(jf.Field(key, jf.scalar_text, None) for key in ("name", "capability")),
    jf.Field("memory_gb", jf.optional_number, None),
)
FRAMEWORK_FIELDS = (  # `framework` is read in _framework: absent, it is the entry's name
    jf.Field("status", _status),
    jf.Field("version", jf.scalar_text, None),
    jf.Field("reason", TEXT_OR_EMPTY, ""),
    jf.Field("build", _or({}, jf.facts), {}),
    jf.Field("cuda_build", jf.scalar_text, None),
    jf.Field("devices", _or([], jf.each(jf.nested(DEVICE_FIELDS, Device, closed=False))), ()),
    *(jf.Field(key, jf.optional(jf.nested(CHECK_FIELDS, Check, closed=False)), None) for key in ("cpu_check", "gpu_check")),
    jf.Field("offline", _or([], jf.each(jf.nested(OFFLINE_FIELDS, OfflineCheck, closed=False))), ()),
    jf.Field("diagnosis", DIAGNOSIS, None),
    jf.Field("seconds", jf.number, 0.0),
)
CUDA_FIELDS = (
    jf.Field("checks", _or([], jf.each(jf.nested(LIBRARY_FIELDS, LibraryCheck, closed=False))), ()),
    jf.Field("ok", jf.flag, True),
    jf.Field("diagnosis", DIAGNOSIS, None),
)
HOST_FIELDS = (
    jf.Field("python", jf.text),
    jf.Field("platform", jf.text, ""),
    jf.Field("gpu_devices", jf.texts, ()),
    jf.Field("nvidia_smi", jf.optional(jf.optional_text_map), None),
)


def _framework(value: Any, key: str, fail: jf.Fail) -> FrameworkProbe:
    entry = jf.obj(value, key, fail)
    name = jf.text(entry.get("framework", key.rpartition(".")[2]), f"{key}.framework", fail)
    absent = dict.fromkeys(jf.missing(entry, FRAMEWORK_FIELDS))  # a status it lacks is refused as null
    return FrameworkProbe(framework=name, **jf.read_fields({**absent, **entry}, FRAMEWORK_FIELDS, fail, f"{key}."))


def _frameworks(value: Any, key: str, fail: jf.Fail) -> dict[str, FrameworkProbe]:
    return {str(name): _framework(entry, f"{key}.{name}", fail) for name, entry in jf.obj(value, key, fail).items()}


FIELDS = (
    jf.Field("host", jf.nested(HOST_FIELDS, ProbeHost, closed=False)),
    jf.Field("frameworks", _frameworks),
    jf.Field("cuda", _or({}, jf.nested(CUDA_FIELDS, CudaLibraries, closed=False)), CudaLibraries()),
    jf.Field("summary", _whole_map, {}),
    jf.Field("ok", jf.flag, False),
    jf.Field("schema", jf.whole, 1),
    jf.Field("probe", jf.text, "hello-gpu"),
)


def from_json(data: Any, where: str) -> ProbeReport:
    """A ProbeReport from the probe's JSON, each field the readers use checked for its type."""

    def fail(what: str) -> UserError:
        return UserError(f"not a hello-gpu report: {what}; {RERUN}", where)

    doc = jf.obj(data, "the report", fail)
    if jf.missing(doc, FIELDS):
        raise fail("it lacks 'frameworks' or 'host'")
    return ProbeReport(**jf.read_fields(doc, FIELDS, fail))
