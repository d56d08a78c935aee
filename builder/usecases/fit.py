"""`builder fit QUERY`: does each known-good record the query matches run on this host, and why;
`builder fit --library FILE`: the same for libraries, measured from their device code.

A record with a measured fit (builder/model/measured_fit.py: read from the image's own libraries in its
smoke container, fit/measure.py) is judged from it: the driver floor of the CUDA runtime it loads,
and for every GPU each library of each framework through its SASS or PTX (fit/arch.py), a framework
that compiles at run time through its NVRTC's targets. Those reasons say "measured". A record
without one (published before fits were measured) is judged from what it says (its CUDA version,
cuDNN and framework releases) against the compat tables, and says "from the compat table, not measured".
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from builder.catalog.query import matching, parse_query, unknown_keys
from builder.catalog.records import BaseIdentity, KnownGood, MeasuredAccelerator
from builder.catalog.store import Catalog
from builder.compat import rocm_driver, runtime_fit
from builder.compat.facts import Compat
from builder.compat.rules import below_lowest, framework, names, table
from builder.compat.rules import cuda as rules_cuda
from builder.fit import cuobjdump, fatbin, rule
from builder.fit import driver as drivers
from builder.fit import gfx as gfxs
from builder.fit.arch import Arch, Embedded
from builder.fit.host import FitHost
from builder.fit.labelled import unpublished
from builder.fit.measure import embedded_of, nvrtc_of
from builder.fit.runs_on import cuda_mm, cudnn_floor, record_arch, requirement_of, runs_on
from builder.fit.runs_on import framework_row as _row
from builder.host.doctor import GfxFinding
from builder.lock.files import libraries as locked_libraries
from builder.model.amd_fit import AmdFit
from builder.model.measured_fit import KNOWN_CCS, LibraryCode, MeasuredFit
from builder.model.plan import ImageSpec
from builder.model.versions import cc_tuple
from builder.usecases.catalog import search
from builder.util.errors import RunFailure, UserError
from builder.workspace import Workspace

Status = Literal["fits", "does not fit", "unknown"]
Reader = Literal["fatbin", "cuobjdump"]
FROM_TABLE = "from the compat table, not measured"
MEASURED = "measured from the image's binaries"
MEASURED_WHEELS = "measured from its locked wheels"
NOT_MEASURED = "planned: not measured, and no table is guessed from"


@dataclass(frozen=True)
class RecordFit:
    id: str
    status: Status
    reason: str  # one line
    measured: bool  # True: judged from the record's measured fit; False: from the compat tables

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "status": self.status, "reason": self.reason, "measured": self.measured}


@dataclass(frozen=True)
class FitReport:
    host: FitHost
    records: tuple[RecordFit, ...]  # newest first, as the catalog query orders them
    catalog: bool = True  # False: the rows are libraries (--library), not records to pull
    planned: bool = False  # the rows are planned images (--planned): to build, not to pull

    @property
    def newest_fit(self) -> str | None:
        return next((r.id for r in self.records if r.status == "fits"), None)

    @property
    def ok(self) -> bool:
        """Records: one fits (there is an image to pull). Libraries: all fit (a program loads them all)."""
        if self.catalog:
            return self.newest_fit is not None
        return all(r.status == "fits" for r in self.records)

    def to_json(self) -> dict[str, object]:
        return {
            "host": self.host.to_json(),
            "records": [r.to_json() for r in self.records],
            "newest_fit": self.newest_fit,
            **({"planned": True} if self.planned else {}),
        }


def fit(catalog: Catalog, query: str, host: FitHost) -> FitReport:
    """The fit of every record the query matches (all records for an empty query); none matching is a RunFailure."""
    found = search(catalog, parse_query(query))
    if not found.hits:
        raise RunFailure(found.no_match())
    compat = table()
    return FitReport(host, tuple(judge(record, host, compat) for record in found.hits))


@dataclass(frozen=True)
class FitAsked:
    """What `builder fit` judges: the catalog's records a query matches, the planned images it
    matches (`planned`), or library files (`libraries`, read by `reader`)."""

    query: str = ""
    libraries: tuple[Path, ...] = ()
    reader: Reader = "fatbin"
    planned: bool = False
    catalog_dir: str | None = None


def fit_asked(ws: Workspace, asked: FitAsked, host: FitHost) -> FitReport:
    if asked.libraries:
        return fit_libraries(asked.libraries, host, asked.reader)
    if asked.planned:
        return fit_planned(ws.decided.images, asked.query, host)
    return fit(ws.store.catalog(asked.catalog_dir, must_exist=True), asked.query, host)


def judge(record: KnownGood, host: FitHost, compat: Compat) -> RecordFit:
    refused = _platform(record, host)
    if refused is not None:
        return refused
    if record.accelerator.kind == "rocm" and record.amd is not None:
        return judge_amd(record, record.amd, host, compat)
    if record.fit is not None:
        return _measured(record, record.fit, host, compat)
    return _cuda(record, host, compat)


def _platform(record: KnownGood, host: FitHost) -> RecordFit | None:
    """The answer where the CPU architecture or the GPU vendor decides it; None for a CUDA image on an NVIDIA host."""
    kind = record.accelerator.kind
    arch = record_arch(record)
    if host.arch != arch:
        return _no(record, another_arch(arch, host.arch))
    if kind == "cpu":
        return RecordFit(record.id, "fits", f"a CPU image: runs on any {arch} host", False)
    if kind == "rocm":
        if host.vendor != "amd":
            return _no(record, f"a ROCm image needs an AMD GPU; this host has {_vendor_label(host)}")
        if record.amd is None:
            return RecordFit(
                record.id, "unknown", "not checked: a ROCm image whose code objects were not measured (no AMD fit recorded)", False
            )
        return None
    if host.vendor != "nvidia":
        return _no(record, f"a CUDA image needs an NVIDIA GPU; this host has {_vendor_label(host)}")
    return None


def judge_runs_on(record: KnownGood, ccs: tuple[str, ...], host: FitHost, compat: Compat) -> RecordFit:
    """A record whose fit is known only as the set of compute capabilities it runs on (a local
    image's io.builder.runs-on label, measured from its locked wheels): the driver floor of its
    CUDA, then every GPU in that set; a GPU newer than every one the set was measured against is
    not guessed."""
    refused = _platform(record, host)
    if refused is not None:
        return refused
    said: list[str] = []
    unknown: list[str] = []
    old_driver = _driver_floor(record, host, compat, said, unknown)
    if old_driver is not None:
        return RecordFit(record.id, "does not fit", f"{old_driver} ({MEASURED_WHEELS})", True)
    if not host.gpus:
        unknown.append("the GPUs (none detected or given; give --gpu-cc)")
    label = ", ".join(f"{name} {version}" for name, version in sorted(record.frameworks.items()))
    newest = max(KNOWN_CCS, key=cc_tuple)
    for cc in host.gpus:
        if cc in ccs:
            continue
        if cc_tuple(cc) > cc_tuple(newest):
            unknown.append(f"compute capability {cc} (newer than every GPU its runs-on set was measured for)")
            continue
        return RecordFit(
            record.id,
            "does not fit",
            f"{label} runs on {' '.join(ccs) or 'no GPU'}: {Arch.cc(cc).named} cannot run it ({MEASURED_WHEELS})",
            True,
        )
    if host.gpus and not unknown:
        said.append(f"{label} runs on {' '.join(host.gpus)}")
    if unknown:
        return RecordFit(record.id, "unknown", f"not checked: {', '.join(unknown)} ({MEASURED_WHEELS})", True)
    return RecordFit(record.id, "fits", f"{'; '.join(said)} ({MEASURED_WHEELS})", True)


# -- planned images (`builder fit --planned`) ---------------------------------------------------


def fit_planned(specs: Sequence[ImageSpec], query: str, host: FitHost) -> FitReport:
    """The fit of every planned image the query matches (the same terms as for records: torch=2.14
    cuda=13 platform=linux/arm64), judged by the same `judge` from its fit measured from its locked
    wheels (images/<id>/fit.json), before anything is built or pulled. An image without one is
    `unknown` with the reason: nothing is guessed from a table."""
    records = {spec.id: planned_record(spec) for spec in specs}
    terms = parse_query(query)
    bad = unknown_keys(list(records.values()), terms)
    if bad:
        raise UserError(f"query key {bad[0]!r} is in no planned image; `builder plan --format json` shows their fields")
    hits = matching(list(records.values()), terms)
    if not hits:
        raise RunFailure(f"no planned image matches {query!r}; `builder plan` lists all {len(records)}")
    compat = table()
    why = {spec.id: not_measured(spec) for spec in specs}
    amd = {spec.id: spec.locked_fit.amd if spec.locked_fit else None for spec in specs}
    return FitReport(host, tuple(_judge_planned(record, why[record.id], host, compat, amd[record.id]) for record in hits), planned=True)


def _judge_planned(record: KnownGood, why: str | None, host: FitHost, compat: Compat, amd: AmdFit | None = None) -> RecordFit:
    if record.accelerator.kind == "rocm" and host.vendor == "amd" and record_arch(record) == host.arch:
        if amd is None:
            return RecordFit(
                record.id, "unknown", f"not checked: {why or 'no fit.json measured from its locked wheels'} ({NOT_MEASURED})", False
            )
        return judge_amd(record, amd, host, compat)
    refused = _platform(record, host)
    if refused is not None:
        return refused
    if record.fit is None:
        return RecordFit(record.id, "unknown", f"not checked: {why or 'its fit is not measured'} ({NOT_MEASURED})", False)
    return judge(record, host, compat)


def gfx_verdict(spec: ImageSpec, host: FitHost, compat: Compat) -> GfxFinding:
    """`builder doctor`'s gfx finding for a planned ROCm image on this host's AMD GPUs: what it runs on
    (fit/runs_on.py, the cell the report and `catalog` show) and whether this host's gfx targets are
    covered, by the rule `fit --planned` judges with. The kernel driver is doctor's own finding."""
    record = planned_record(spec)
    cell = runs_on(record, compat).label
    if record.amd is None:
        return GfxFinding("unknown", f"{spec.id}: {not_measured(spec) or 'its code objects are not measured'}", cell)
    verdict = judge_amd(record, record.amd, host, compat, kernel_driver=False)
    return GfxFinding(verdict.status, f"{spec.id} runs on {cell}; this host's {' '.join(host.gpus) or 'GPUs'}: {verdict.reason}", cell)


def not_measured(spec: ImageSpec) -> str | None:
    """Why a planned CUDA or ROCm image has no fit measured from its locked wheels; None when it has one."""
    found = spec.locked_fit
    if spec.base.vendor not in ("cuda", "rocm") or (found is not None and (found.fit is not None or found.amd is not None)):
        return None
    if spec.lock is None:
        return f"it has no lock ({spec.unlocked or 'run `builder lock`'}), so no wheels to measure"
    if spec.locked_fit is None:
        return f"images/{spec.id}/fit.json is missing or stale: `builder lock --select id={spec.id}` measures it"
    return spec.locked_fit.unknown


def planned_record(spec: ImageSpec) -> KnownGood:
    """A planned image as the record `judge` reads: its frameworks, platform and accelerator as
    planned, the CUDA and cuDNN its lock pins and its measured fit (nothing built, pushed or tested)."""
    pinned = locked_libraries(spec.lock) if spec.lock else {}
    measured = spec.locked_fit.fit if spec.locked_fit else None
    cuda = None
    if spec.accelerator.kind == "cuda":
        cuda = measured.driver.cuda if measured and measured.driver else cuda_mm(spec.accelerator.version or "")
    return unpublished(
        spec.id,
        spec.tag,
        stack=spec.stack,
        os=spec.base.os,
        base=BaseIdentity(spec.base.name, spec.base.from_ref, ""),
        frameworks=dict(spec.versions),
        accelerator=MeasuredAccelerator(
            spec.accelerator.kind,
            spec.accelerator.version,
            cuda=cuda,
            cudnn=pinned.get("cudnn"),
            rocm=spec.accelerator.version if spec.accelerator.kind == "rocm" else None,
        ),
        python=spec.python,
        libraries=pinned,
        content_hash=spec.content_hash,
        fit=measured,
        amd=spec.locked_fit.amd if spec.locked_fit else None,
        platform=spec.platform,
        host="not built",
    )


def _measured(record: KnownGood, fit: MeasuredFit, host: FitHost, compat: Compat) -> RecordFit:
    """The record's measured fit: driver floor of the runtime it loads, then every GPU against every
    library each framework loads (a program needs them all; fit/rule.py's verdict on each, the one
    `fit --library` gives) and, for a framework that compiles at run time, its NVRTC's targets. The
    first refusal wins, naming the library. A record is input: its libraries are indexed once and
    each library is judged once per GPU, however often the frameworks list it."""

    source = MEASURED_WHEELS if fit.reader == "wheels" else MEASURED

    def no(reason: str) -> RecordFit:
        return RecordFit(record.id, "does not fit", f"{reason} ({source})", True)

    said: list[str] = []
    unknown: list[str] = []
    runtime = _started(record, host, compat, said, unknown)
    if runtime is not None and runtime.status == "does not fit":
        return no(runtime.reason)
    need = fit.driver
    if need is None:
        unknown.append("the driver floor (no CUDA runtime was read in the image)")
    elif host.driver is not None and _mvc_applies(runtime):
        verdict = drivers.check(host.driver, drivers.DriverFloor(need.cuda, need.floor, need.full))
        if not verdict.fits:
            return no(verdict.reason)
    if not host.gpus:
        unknown.append("the GPUs (none detected or given; give --gpu-cc)")
    judged = _Judged({lib.path: lib for lib in fit.libraries}, host, compat)
    for entry in fit.frameworks:
        label = f"{entry.name} {record.frameworks.get(entry.name, '')}".strip()
        jitted: list[str] = []
        for cc in host.gpus:
            device = Arch.cc(cc)
            for path in dict.fromkeys(entry.libraries):
                library = judged(path, cc)
                if library is None:
                    continue
                if library.status == "does not fit":
                    return no(judged.reason(path, cc, f"{label} ({Path(path).name})"))
                if library.status == "unknown":
                    unknown.append(library.reason)
                elif library.how == "ptx":
                    jitted.append(f"{cc}: {Path(path).name}")
            if entry.jit:
                refused = _jit_refusal(fit, device, label, entry.name, record.frameworks.get(entry.name, ""), compat)
                if refused:
                    return no(refused)
        how = [f"the device code of its {len(entry.libraries)} libraries"] if entry.libraries else []
        if entry.jit and fit.jit is not None:
            how.append(f"NVRTC {fit.jit.version} compiling its kernels")
        said.append(
            f"{label} runs on {' '.join(host.gpus) or 'its GPUs'} through {' and '.join(how) or 'no device code'}"
            + (
                f" (the driver JIT-compiles the PTX of {', '.join(jitted[:3])}{' ...' if len(jitted) > 3 else ''}: slow first start)"
                if jitted
                else ""
            )
        )
    if unknown:
        listed = list(dict.fromkeys(unknown))
        more = f" (+{len(listed) - 3} more)" if len(listed) > 3 else ""
        return RecordFit(record.id, "unknown", f"not checked: {'; '.join(listed[:3])}{more} ({source})", True)
    return RecordFit(record.id, "fits", f"{'; '.join(said)} ({source})", True)


class _Judged:
    """fit/rule.py's verdict per (library, GPU), each computed once: a record's frameworks may list
    thousands of libraries, and a hostile one the same library thousands of times."""

    def __init__(self, libraries: dict[str, LibraryCode], host: FitHost, compat: Compat) -> None:
        self.libraries, self.host, self.compat = libraries, host, compat
        self.codes: dict[str, Embedded] = {}
        self.verdicts: dict[tuple[str, str], rule.LibraryFit] = {}

    def code(self, library: LibraryCode) -> Embedded:
        found = self.codes.get(library.path)
        if found is None:
            found = self.codes[library.path] = embedded_of(library)
        return found

    def __call__(self, path: str, cc: str) -> rule.LibraryFit | None:
        library = self.libraries.get(path)
        if library is None:
            return None
        key = (path, cc)
        if key not in self.verdicts:
            self.verdicts[key] = rule.judge_library(path, self.code(library), Arch.cc(cc), self.host.driver, self.compat)
        return self.verdicts[key]

    def reason(self, path: str, cc: str, what: str) -> str:
        """The refusal's reason, naming the software (only the one that is printed is worded)."""
        return rule.judge_library(path, self.code(self.libraries[path]), Arch.cc(cc), self.host.driver, self.compat, what).reason


def _started(record: KnownGood, host: FitHost, compat: Compat, said: list[str], unknown: list[str]) -> runtime_fit.RuntimeFit | None:
    """The container runtime's verdict on the record's NVIDIA_REQUIRE_CUDA for the host (the one driver
    rule `fit`, `pull`, `fit --planned` and `doctor --image` share); what it fits or leaves open is
    added to `said` / `unknown`. A driver that was not given is only noted, as the GPUs are."""
    requirement = requirement_of(record, compat)
    if requirement is None:
        unknown.append("the image's NVIDIA_REQUIRE_CUDA (no CUDA version recorded)")
        return None
    verdict = runtime_fit.started(requirement, host.driver, runtime_fit.devices_of(host.gpus, (host.brand,)), compat)
    if verdict.status == "fits" and host.driver is not None:
        release_driver = rules_cuda.release_driver(record.accelerator.version or "", compat, record.libraries.get("cuda-runtime"))
        below = "" if verdict.forward_compat else runtime_fit.full_features(host.driver, record.accelerator.version, release_driver)
        said.append(verdict.reason + below)
    elif verdict.status == "unknown" and host.driver is None:
        said.append(verdict.reason)
    elif verdict.status == "unknown":
        unknown.append(verdict.reason)
    return verdict


def _mvc_applies(runtime: runtime_fit.RuntimeFit | None) -> bool:
    """Whether the runtime's minor-version-compatibility floor still decides: not where the container
    runtime starts the image through a forward-compat clause (its cuda-compat package runs a newer
    CUDA), nor where that start is undecided (the GPU's brand decides it, not this floor)."""
    return runtime is None or (runtime.status == "fits" and not runtime.forward_compat)


def _jit_refusal(fit: MeasuredFit, device: Arch, label: str, name: str, release: str, compat: Compat) -> str | None:
    """A framework that compiles its kernels at run time needs its NVRTC to compile something the
    device runs, by the framework's own rule (compat/rules: numba-cuda's arch-specific targets,
    CuPy's capped cubins; the shared rule: nothing below NVRTC's lowest target)."""
    compiler = fit.jit
    if compiler is None:
        return f"{label} compiles its kernels at run time, but no NVRTC was found in the image"
    cc, nvrtc = (device.major, device.minor), nvrtc_of(compiler)
    why = framework(name).jit_refusal(cc, nvrtc, release, compat) if name in names() else below_lowest(cc, nvrtc)
    return f"{label} {why}: {device.named} cannot run it" if why else None


def judge_amd(record: KnownGood, amd: AmdFit, host: FitHost, compat: Compat, kernel_driver: bool = True) -> RecordFit:
    """A ROCm image on AMD GPUs, from its measured code objects: every GPU against every library each
    framework loads (fit/gfx.py: the exact processor or a generic target, xnack/sramecc modes); the
    first refusal wins, naming the library. What the code objects cannot say stays `unknown`: the
    base's own ROCm libraries (rocBLAS, MIOpen: AMD builds them for the GPUs its ROCm release
    supports, compat.yaml rocm.releases) and the kernels a framework compiles at run time (CuPy's
    hiprtc, whose targets are that ROCm runtime's)."""
    source = MEASURED_WHEELS if amd.reader == "wheels" else MEASURED
    if not host.gpus:
        return RecordFit(record.id, "unknown", f"not checked: the GPUs (none detected or given; give --gfx) ({source})", True)
    release = compat.rocm.release(amd.rocm) if amd.rocm else None
    libraries = {lib.path: lib for lib in amd.libraries}
    said: list[str] = []
    unknown: list[str] = []
    driver = rocm_driver.check(amd.rocm or record.accelerator.rocm, host.kernel, host.amdgpu, compat.rocm)
    if not kernel_driver:  # the caller checks the kernel driver on its own (doctor: a finding of its own)
        driver = rocm_driver.KernelDriverFit("fits", "")
    if driver.status == "does not fit":
        return RecordFit(record.id, "does not fit", f"{driver.reason} ({source})", True)
    for entry in amd.frameworks:
        label = f"{entry.name} {record.frameworks.get(entry.name, '')}".strip()
        for device in host.gpus:
            for path in dict.fromkeys(entry.libraries):
                library = libraries[path]
                verdict = gfxs.judge_library(Path(path).name, [t for t, _ in library.targets], device, compat.rocm)
                if verdict.status == "does not fit":
                    return RecordFit(record.id, "does not fit", f"{label}: {verdict.reason}: {device} cannot run it ({source})", True)
                if verdict.status == "unknown":
                    unknown.append(verdict.reason)
            processor = device.split(":")[0]
            if release is None:
                unknown.append(f"whether ROCm {amd.rocm} supports {processor} (compat.yaml rocm.releases has no row)")
            elif processor not in release.gfx:
                jit = ", and the kernels it compiles at run time (hiprtc) are that runtime's" if entry.jit else ""
                unknown.append(
                    f"its base's ROCm {release.rocm} libraries are built for the GPUs AMD supports on it ({' '.join(release.gfx)}), "
                    f"not {processor}{jit}"
                )
        how = f"the code objects of its {len(entry.libraries)} libraries" if entry.libraries else "no code objects of its own"
        jit = f" and ROCm {amd.rocm}'s hiprtc compiling its kernels at run time" if entry.jit else ""
        said.append(f"{label} runs on {' '.join(host.gpus)} through {how}{jit}; its base's ROCm {amd.rocm} supports them")
    if driver.status == "unknown" and host.kernel is not None:  # detected, and not known: never a pass
        unknown.append(f"the kernel driver: {driver.reason}")
    if unknown:
        listed = list(dict.fromkeys(unknown))
        more = f" (+{len(listed) - 3} more)" if len(listed) > 3 else ""
        return RecordFit(record.id, "unknown", f"not checked: {'; '.join(listed[:3])}{more} ({source})", True)
    if driver.reason:
        said.append(driver.reason if driver.status == "fits" else f"kernel driver not checked: {driver.reason}")
    return RecordFit(record.id, "fits", f"{'; '.join(said)} ({source})", True)


def _vendor_label(host: FitHost) -> str:
    return {"nvidia": "an NVIDIA GPU", "amd": "an AMD GPU", "none": "no GPU"}[host.vendor]


def _no(record: KnownGood, reason: str) -> RecordFit:
    return RecordFit(record.id, "does not fit", reason, False)


def another_arch(image: str, host: str) -> str:
    """Why an image of another CPU architecture does not run here: not natively, and a GPU image not
    under emulation either (qemu-user has no GPU), so no emulation is offered as the fix."""
    return f"another CPU architecture: an {image} image; this host is {host} (run it on an {image} host)"


def _cuda(record: KnownGood, host: FitHost, compat: Compat) -> RecordFit:
    """Driver floor, each framework's compute capabilities, cuDNN's GPU floor: the first refusal wins.
    Not knowing the driver is only noted (the person asked about GPUs); not knowing whether a GPU
    runs the kernels makes the answer `unknown`, never a guessed yes."""
    cuda = record.accelerator.cuda or record.accelerator.version or ""
    said: list[str] = []
    unknown: list[str] = []
    refused = _driver_floor(record, host, compat, said, unknown)
    if refused is not None:
        return _no(record, f"{refused} ({FROM_TABLE})")
    if not host.gpus:
        unknown.append("the GPUs (none detected or given; give --gpu-cc)")
    for name, version in sorted(record.frameworks.items()):
        if name not in names():
            continue  # not a GPU framework of the registry (e.g. numpy)
        row = _row(name, version, cuda) if framework(name).gpu_arch else None
        label = f"{name} {version}"
        if row is None:
            unknown.append(f"the compute capabilities of {label} (not in gpu_arch.yaml)")
            continue
        for cc in host.gpus:
            if not row.contains(cc) and not row.jit_only(cc):
                return _no(record, f"{label} ships kernels for {row.label}: {Arch.cc(cc).named} cannot run it ({FROM_TABLE})")
        jit = [cc for cc in host.gpus if row.jit_only(cc)]
        said.append(f"{label} ships kernels for {row.label}" + (f" ({', '.join(jit)} through its PTX, slow first start)" if jit else ""))
    refused = _cudnn_refusal(record.accelerator.cudnn or "", host, compat)
    if refused:
        return _no(record, f"{refused} ({FROM_TABLE})")
    if unknown:
        return RecordFit(record.id, "unknown", f"not checked: {', '.join(unknown)} ({FROM_TABLE})", False)
    return RecordFit(record.id, "fits", f"{'; '.join(said)} ({FROM_TABLE})", False)


def _driver_floor(record: KnownGood, host: FitHost, compat: Compat, said: list[str], unknown: list[str]) -> str | None:
    """The host's driver against the record's own NVIDIA_REQUIRE_CUDA (whether the container runtime
    starts it), then the minor-version-compatibility floor of its CUDA (its runtime, else its
    base's) where that still decides: the refusal, or None with what was said or not known added
    to `said` / `unknown`."""
    runtime = _started(record, host, compat, said, unknown)
    if runtime is not None and runtime.status == "does not fit":
        return runtime.reason
    cuda = record.accelerator.cuda or record.accelerator.version or ""
    floor = drivers.floor_for(cuda, compat) if cuda else None
    if floor is None:
        unknown.append(f"the driver floor of CUDA {cuda or '?'}")
    elif host.driver is not None and _mvc_applies(runtime):
        verdict = drivers.check(host.driver, floor)
        if not verdict.fits:
            return verdict.reason
    return None


def _cudnn_refusal(cudnn: str, host: FitHost, compat: Compat) -> str | None:
    """cuDNN releases drop GPU generations (9.11: Maxwell, Pascal, Volta; compat.yaml cuda.cudnn_cc)."""
    lowest = cudnn_floor(cudnn, compat)
    if lowest is None:
        return None
    old = [cc for cc in host.gpus if cc_tuple(cc) < cc_tuple(lowest)]
    if not old:
        return None
    return f"cuDNN {cudnn} needs compute capability >= {lowest}: {Arch.cc(old[0]).named} cannot run it"


MAX_LIBRARIES = 2000  # shared libraries under one --library folder; a whole filesystem is a mistake
MAX_WALK = 200_000  # files and folders looked at under one --library folder
DEADLINE_S = 300  # reading every --library; cuobjdump has the same bound per file (fit/cuobjdump.py)


def fit_libraries(paths: Sequence[Path], host: FitHost, reader: Reader = "fatbin") -> FitReport:
    """The fit of each library from the device code it embeds, read by builder's fatbin reader or
    by NVIDIA's cuobjdump (the two agree: tests/test_fit.py), each judged by fit/rule.py as the
    image measure judges it. A folder stands for the shared libraries under it that hold device
    code (a venv's site-packages, an exported image layer): each is judged on its own, since one
    library of a wheel can lack a target another has.

    Bounded (files are input): regular files only (a FIFO given, or inside a folder, is refused or
    passed over, never waited on), fit/scan.py's caps on what one file may make it read, at most
    MAX_LIBRARIES libraries and MAX_WALK entries under a folder, and DEADLINE_S for all of it; each
    refusal is one line."""
    compat = table()
    binary = cuobjdump.find_binary() if reader == "cuobjdump" else None
    deadline = time.monotonic() + DEADLINE_S
    rows = []
    for given in paths:
        folder = given.is_dir()
        files = _shared_libraries(given) if folder else [given]
        for path in files:
            try:
                if binary is None:
                    embedded = fatbin.read(path, deadline)
                else:
                    _regular(path)
                    embedded = cuobjdump.measure(path, binary)
            except (fatbin.NotElf, OSError) as exc:
                if folder:
                    continue  # a file named like a library that is not one: not what the folder was given for
                raise UserError(f"--library {path}: {_said(exc)}; give a shared library, an executable or a folder of them") from None
            except fatbin.Bounded as exc:
                raise UserError(f"--library {path}: {exc}; give the CUDA libraries themselves") from None
            if time.monotonic() > deadline:
                raise UserError(f"--library: reading took over {DEADLINE_S} s; give fewer or smaller libraries")
            if folder and not embedded.sass and not embedded.ptx:
                continue
            name = str(path.relative_to(given)) if folder else path.name
            rows.append(judge_embedded(name, embedded, host, compat, str(path)))
    if not rows:
        raise UserError(f"no library with device code under {', '.join(map(str, paths))}: give the folder of the CUDA libraries")
    return FitReport(host, tuple(rows), catalog=False)


def _said(exc: BaseException) -> str:
    return exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)


def _regular(path: Path) -> None:
    """cuobjdump would wait on a FIFO as the fatbin reader would: the same refusal, before it runs."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise fatbin.NotElf("not a regular file")


def _shared_libraries(folder: Path) -> list[Path]:
    """The regular shared libraries under a folder (links not followed), sorted; a folder holding more
    than MAX_LIBRARIES, or more than MAX_WALK entries in all, is refused in one line."""
    found = sorted(_walk(folder))
    if len(found) > MAX_LIBRARIES:
        raise UserError(
            f"--library {folder} holds {len(found)} shared libraries (at most {MAX_LIBRARIES}): give the folder of the CUDA libraries"
        )
    return found


def _walk(folder: Path) -> Iterator[Path]:
    seen = 0
    found = 0
    for root, dirs, files in os.walk(folder):
        seen += len(dirs) + len(files)
        if seen > MAX_WALK:
            raise UserError(f"--library {folder} holds more than {MAX_WALK:,} files and folders: give the folder of the CUDA libraries")
        for name in files:
            if not (name.endswith(".so") or ".so." in name):
                continue
            path = Path(root) / name
            if stat.S_ISREG(os.lstat(path).st_mode):
                found += 1
                if found > MAX_LIBRARIES:
                    yield path  # one more than the cap: the caller refuses
                    return
                yield path


def judge_embedded(name: str, embedded: Embedded, host: FitHost, compat: Compat, path: str | None = None) -> RecordFit:
    """A measured fit of one library: fit/rule.py's verdict on every GPU of the host (`path` says
    which rule applies: NVIDIA's libraries by their floor; the name when not given)."""
    where = path or name
    nvidia = rule.nvidia_component(where) is not None
    if not embedded.sass and not embedded.ptx and not nvidia:
        return RecordFit(name, "fits", "no device code: nothing in it needs a GPU", True)
    if host.vendor != "nvidia":
        what = f"CUDA device code ({embedded.label})" if embedded.sass or embedded.ptx else "NVIDIA's CUDA library"
        return RecordFit(name, "does not fit", f"{what} needs an NVIDIA GPU; this host has {_vendor_label(host)}", True)
    if not host.gpus:
        return RecordFit(name, "unknown", f"not checked: the GPUs (none detected or given; give --gpu-cc); it has {embedded.label}", True)
    said: list[str] = []
    unknown: list[str] = []
    for cc in host.gpus:
        verdict = rule.judge_library(where, embedded, Arch.cc(cc), host.driver, compat, name)
        if verdict.status == "does not fit":
            return RecordFit(name, "does not fit", verdict.reason, True)
        (said if verdict.fits else unknown).append(verdict.reason)
    if unknown:
        return RecordFit(name, "unknown", "; ".join(dict.fromkeys(unknown)), True)
    return RecordFit(name, "fits", "; ".join(said), True)
