"""`builder fit QUERY`: does each known-good record the query matches run on this host, and why;
`builder fit --library FILE`: the same for libraries, measured from their device code.

A record with a measured fit (builder/measured_fit.py: read from the image's own libraries in its
smoke container, fit/measure.py) is judged from it: the driver floor of the CUDA runtime it loads,
and for every GPU each library of each framework through its SASS or PTX (fit/arch.py), a framework
that compiles at run time through its NVRTC's targets. Those reasons say "measured". A record
without one (published before fits were measured) is judged from what it says (its CUDA version,
cuDNN and framework releases) against the compat tables, and says "from the compat table, not measured".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from builder.catalog.records import KnownGood
from builder.catalog.store import Catalog
from builder.compat.facts import Compat, table
from builder.compat.rules import framework, names
from builder.compat.versions import cc_tuple
from builder.errors import RunFailure, UserError
from builder.fit import cuobjdump, fatbin
from builder.fit import driver as drivers
from builder.fit.arch import Arch, Embedded, decide
from builder.fit.host import FitHost
from builder.fit.measure import embedded_of, library_floor
from builder.fit.runs_on import cudnn_floor, record_arch
from builder.fit.runs_on import framework_row as _row
from builder.measured_fit import MeasuredFit, cc_key
from builder.usecases.catalog import find, no_match_message

Status = Literal["fits", "does not fit", "unknown"]
Reader = Literal["fatbin", "cuobjdump"]
FROM_TABLE = "from the compat table, not measured"
MEASURED = "measured from the image's binaries"


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
        return {"host": self.host.to_json(), "records": [r.to_json() for r in self.records], "newest_fit": self.newest_fit}


def fit(catalog: Catalog, query: str, host: FitHost) -> FitReport:
    """The fit of every record the query matches (all records for an empty query); none matching is a RunFailure."""
    records = find(catalog, query)
    if not records:
        raise RunFailure(no_match_message(catalog, query))
    compat = table()
    return FitReport(host, tuple(judge(record, host, compat) for record in records))


def judge(record: KnownGood, host: FitHost, compat: Compat) -> RecordFit:
    kind = record.accelerator.kind
    arch = record_arch(record)
    if host.arch != arch:
        return _no(record, f"an {arch} image; this host is {host.arch}")
    if kind == "cpu":
        return RecordFit(record.id, "fits", f"a CPU image: runs on any {arch} host", False)
    if kind == "rocm":
        if host.vendor != "amd":
            return _no(record, f"a ROCm image needs an AMD GPU; this host has {_vendor_label(host)}")
        return RecordFit(record.id, "unknown", "a ROCm image: its gfx targets are not in the compat tables yet, not checked", False)
    if host.vendor != "nvidia":
        return _no(record, f"a CUDA image needs an NVIDIA GPU; this host has {_vendor_label(host)}")
    if record.fit is not None:
        return _measured(record, record.fit, host, compat)
    return _cuda(record, host, compat)


def _measured(record: KnownGood, fit: MeasuredFit, host: FitHost, compat: Compat) -> RecordFit:
    """The record's measured fit: driver floor of the runtime it loads, then every GPU against every
    library each framework loads (a program needs them all) and, for a framework that compiles at
    run time, its NVRTC's targets. The first refusal wins, naming the library."""

    def no(reason: str) -> RecordFit:
        return RecordFit(record.id, "does not fit", f"{reason} ({MEASURED})", True)

    said: list[str] = []
    unknown: list[str] = []
    need = fit.driver
    if need is None:
        unknown.append("the driver floor (no CUDA runtime was read in the image)")
    elif host.driver is None:
        said.append(f"driver not checked (CUDA {need.cuda} needs >= {need.floor}; give --driver)")
    else:
        verdict = drivers.check(host.driver, drivers.DriverFloor(need.cuda, need.floor, need.full))
        if not verdict.fits:
            return no(verdict.reason)
        said.append(verdict.reason)
    if not host.gpus:
        unknown.append("the GPUs (none detected or given; give --gpu-cc)")
    for entry in fit.frameworks:
        label = f"{entry.name} {record.frameworks.get(entry.name, '')}".strip()
        jitted: list[str] = []
        for cc in host.gpus:
            device = Arch.cc(cc)
            for path in entry.libraries:
                library = fit.library(path)
                if library is None:
                    continue
                lowest = library_floor(library)
                if lowest is not None:
                    if cc_key(cc) < cc_key(lowest):
                        return no(
                            f"{Path(path).name} (NVIDIA's) has no SASS below sm_{lowest.replace('.', '')}: {device.named} cannot run {label}"
                        )
                    continue
                decision = decide(embedded_of(library), device, f"{label} ({Path(path).name})")
                if not decision.fits:
                    return no(decision.reason)
                if decision.how == "ptx":
                    jitted.append(f"{cc}: {Path(path).name}")
                    if host.driver is not None and library.ptx_isa:
                        ptx = drivers.check_ptx(host.driver, library.ptx_isa[-1], compat)
                        if not ptx.fits:
                            return no(ptx.reason)
            if entry.jit:
                refused = _jit_refusal(fit, device, label)
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
        return RecordFit(record.id, "unknown", f"not checked: {', '.join(unknown)} ({MEASURED})", True)
    return RecordFit(record.id, "fits", f"{'; '.join(said)} ({MEASURED})", True)


def _jit_refusal(fit: MeasuredFit, device: Arch, label: str) -> str | None:
    """A framework that compiles its kernels at run time needs its NVRTC to target the device, or an
    older target whose PTX the driver JIT-compiles for it: a device below the lowest target cannot."""
    compiler = fit.jit
    if compiler is None:
        return f"{label} compiles its kernels at run time, but no NVRTC was found in the image"
    lowest = compiler.lowest
    if lowest is None or cc_key(device.number) < cc_key(lowest):
        return f"{label} compiles its kernels with NVRTC {compiler.version}, which targets {lowest or 'nothing'} and newer: {device.named} cannot run it"
    return None


def _vendor_label(host: FitHost) -> str:
    return {"nvidia": "an NVIDIA GPU", "amd": "an AMD GPU", "none": "no GPU"}[host.vendor]


def _no(record: KnownGood, reason: str) -> RecordFit:
    return RecordFit(record.id, "does not fit", reason, False)


def _cuda(record: KnownGood, host: FitHost, compat: Compat) -> RecordFit:
    """Driver floor, each framework's compute capabilities, cuDNN's GPU floor: the first refusal wins.
    Not knowing the driver is only noted (the person asked about GPUs); not knowing whether a GPU
    runs the kernels makes the answer `unknown`, never a guessed yes."""
    cuda = record.accelerator.cuda or record.accelerator.version or ""
    said: list[str] = []
    unknown: list[str] = []
    floor = drivers.floor_for(cuda, compat) if cuda else None
    if floor is None:
        unknown.append(f"the driver floor of CUDA {cuda or '?'}")
    elif host.driver is None:
        said.append(f"driver not checked (CUDA {floor.cuda} needs >= {floor.floor}; give --driver)")
    else:
        verdict = drivers.check(host.driver, floor)
        if not verdict.fits:
            return _no(record, f"{verdict.reason} ({FROM_TABLE})")
        said.append(verdict.reason)
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


def fit_libraries(paths: Sequence[Path], host: FitHost, reader: Reader = "fatbin") -> FitReport:
    """The fit of each library from the device code it embeds, read by builder's fatbin reader or
    by NVIDIA's cuobjdump (the two agree: tests/test_fit.py). A folder stands for the shared
    libraries under it that hold device code (a venv's site-packages, an exported image layer):
    each is judged on its own, since one library of a wheel can lack a target another has."""
    compat = table()
    binary = cuobjdump.find_binary() if reader == "cuobjdump" else None
    rows = []
    for given in paths:
        files = _shared_libraries(given) if given.is_dir() else [given]
        for path in files:
            try:
                embedded = cuobjdump.measure(path, binary) if binary is not None else fatbin.read(path)
            except (fatbin.NotElf, OSError) as exc:
                if given.is_dir():
                    continue  # a file named like a library that is not one: not what the folder was given for
                raise UserError(f"--library {path}: {exc}; give a shared library, an executable or a folder of them") from None
            if given.is_dir() and not embedded.sass and not embedded.ptx:
                continue
            rows.append(judge_embedded(str(path.relative_to(given)) if given.is_dir() else path.name, embedded, host, compat))
    if not rows:
        raise UserError(f"no library with device code under {', '.join(map(str, paths))}: give the folder of the CUDA libraries")
    return FitReport(host, tuple(rows), catalog=False)


def _shared_libraries(folder: Path) -> list[Path]:
    found = sorted(p for p in folder.rglob("*.so*") if p.is_file() and not p.is_symlink() and (p.suffix == ".so" or ".so." in p.name))
    if len(found) > MAX_LIBRARIES:
        raise UserError(
            f"--library {folder} holds {len(found)} shared libraries (at most {MAX_LIBRARIES}): give the folder of the CUDA libraries"
        )
    return found


def judge_embedded(name: str, embedded: Embedded, host: FitHost, compat: Compat) -> RecordFit:
    """A measured fit: every GPU through a cubin or PTX (arch.py), the PTX's driver when it is JIT-compiled."""
    if not embedded.sass and not embedded.ptx:
        return RecordFit(name, "fits", "no device code: nothing in it needs a GPU", True)
    if host.vendor != "nvidia":
        return RecordFit(
            name, "does not fit", f"CUDA device code ({embedded.label}) needs an NVIDIA GPU; this host has {_vendor_label(host)}", True
        )
    if not host.gpus:
        return RecordFit(name, "unknown", f"not checked: the GPUs (none detected or given; give --gpu-cc); it has {embedded.label}", True)
    said = []
    for cc in host.gpus:
        decision = decide(embedded, Arch.cc(cc), name)
        if not decision.fits:
            return RecordFit(name, "does not fit", decision.reason, True)
        said.append(decision.reason)
        if decision.how == "ptx" and host.driver is not None and embedded.ptx_isa:
            jit = drivers.check_ptx(host.driver, embedded.ptx_isa[-1], compat)
            if not jit.fits:
                return RecordFit(name, "does not fit", jit.reason, True)
    return RecordFit(name, "fits", "; ".join(said), True)
