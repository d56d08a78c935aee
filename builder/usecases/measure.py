"""Each locked CUDA image's fit, measured from its locked wheels (images/<id>/fit.json): part of
`builder lock`, so every claim about an image is offline and reproducible before anything is built.

For each pin of the lock, the file the image installs on its platform (lock/wheels.py: the lock's
hashes, the target's tags) is found on the lock's own sources, fetched and checked against its
sha256 (updates/wheelfiles.py), and read (fit/wheels.py: every shared library's fatbin entries,
libcudart's version, libnvrtc's architectures). A reading is kept by the file's sha256 in
build/wheel-fit/ and in every committed fit.json, so a wheel many images share (NVIDIA's) is read
once, and a lock that changes one pin fetches one wheel. Two readings come from other files:
- an aarch64 wheel's libcudart and libnvrtc cannot be loaded on an x86_64 machine (and the reverse):
  their versions and NVRTC's architectures are read from the same project and release built for this
  machine (its `twin`; NVIDIA builds both from one release, so the lists are the same);
- an image on an nvidia/cuda base whose wheels bring no NVRTC or libcudart uses the base's: they are
  read from the PyPI wheel of that CUDA minor (`base`), the same NVIDIA build of the same release.
The image's fit is then made by fit/measure.py's `parse` from those readings exactly as from the
scan of a built image, with each framework's rule for what it compiles at run time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.version import InvalidVersion, Version

from builder.compat import rocm
from builder.compat.facts import Compat
from builder.compat.rules import framework, table
from builder.engine import staging
from builder.fit import measure, wheels
from builder.lock import children
from builder.lock.resolve import sources
from builder.lock.target import target_for
from builder.lock.wheels import IndexFile, pick, pins, target_tags, twin_of
from builder.model.amd_fit import AmdFit, AmdFramework, AmdLibrary
from builder.model.locked_fit import LockedFit, WheelCode, WheelRead, lock_digest, reading_from_json, scan_output
from builder.model.measured_fit import MeasuredFit
from builder.model.plan import ImageSpec
from builder.model.sources import BuildSettings
from builder.model.versions import mm
from builder.render.tree import write_tree
from builder.updates.wheelfiles import FetchFailed, WheelFiles
from builder.util.errors import UserError
from builder.util.fsio import read_json
from builder.workspace import Workspace

READER = "wheels"  # MeasuredFit.reader of a fit measured from the locked wheels
OFFLOAD_READER = "wheels"  # AmdFit.reader of one measured from the locked wheels (fit/offload.py on their members)
BASE_PROJECTS = {"cudart": "nvidia-cuda-runtime", "nvrtc": "nvidia-cuda-nvrtc"}  # -cuNN up to CUDA 12


class MeasureFailed(Exception):
    """An image's wheels could not be read (one line: which pin, and why)."""


@dataclass(frozen=True)
class MeasureResult:
    id: str
    status: str  # measured | current | failed
    detail: str = ""
    seconds: float = 0.0
    fetched: int = 0  # wheels downloaded for it (the rest came from readings kept by sha256)


Done = Callable[[MeasureResult], None]


def measured(spec: ImageSpec) -> bool:
    """Whether an image has a fit to measure from its lock: a CUDA or ROCm image with a lock."""
    return spec.base.vendor in ("cuda", "rocm") and spec.lock is not None


def stale(spec: ImageSpec, compat: Compat) -> str | None:
    """Why the image's committed fit is not what its lock and today's rules give; None when it is current."""
    if not measured(spec):
        return None
    found = spec.locked_fit
    if found is None:
        return "no fit.json (its fit measured from the locked wheels)"
    assert spec.lock is not None
    if found.lock != lock_digest(spec.lock.text):
        return "fit.json was measured from another lock"
    again = derive(spec, found.wheels, found.folders, compat)
    if (again.fit, again.unknown, again.amd) != (found.fit, found.unknown, found.amd):
        return "fit.json is not what its wheels' readings give by today's rules"
    return None


def derive(
    spec: ImageSpec, wheels_read: tuple[WheelRead, ...], folders: tuple[tuple[str, tuple[str, ...]], ...], compat: Compat
) -> LockedFit:
    """The image's fit from its wheels' readings (pure): fit/measure.py's `parse` on them, with each
    framework's rule for what it compiles at run time; None with the reason where a framework's
    wheels cannot tell how it compiles."""
    assert spec.lock is not None
    if spec.base.vendor == "rocm":
        return LockedFit(spec.id, lock_digest(spec.lock.text), wheels_read, folders, None, None, amd_of(spec, wheels_read, folders))
    pinned = dict(spec.lock.pins)
    doc = scan_output(wheels_read, folders)
    unknown = next((why for name in sorted(spec.versions) if framework(name).jit and (why := framework(name).jit_unknown(pinned))), None)
    if unknown is None:
        missing = [name for name in sorted(spec.versions) if framework(name).jit and not doc["nvrtc"]]
        if missing:
            unknown = f"{missing[0]} compiles its kernels at run time, and neither its wheels nor its base bring an NVRTC to read"
    fit: MeasuredFit | None = None
    if unknown is None:
        fit = replace(measure.parse(json.dumps(doc), measure.jit_rules(spec.versions, compat), compat, 0.0), reader=READER)
    return LockedFit(spec.id, lock_digest(spec.lock.text), wheels_read, folders, fit, unknown)


def amd_of(spec: ImageSpec, wheels_read: tuple[WheelRead, ...], folders: tuple[tuple[str, tuple[str, ...]], ...]) -> AmdFit:
    """A ROCm image's AMD fit from its locked wheels' code objects (pure): each framework loads its own
    package folders' libraries and every shared one (never another framework's), as fit/measure.py
    decides for CUDA; one that compiles at run time (CuPy: hiprtc) depends on the base's ROCm too."""
    libraries = sorted(
        (AmdLibrary(path, targets) for w in wheels_read if w.role == "locked" for path, targets in w.code.offload), key=lambda lib: lib.path
    )
    owned = {name: paths for name, paths in folders}

    def mine(path: str, roots: Sequence[str]) -> bool:
        return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)

    frameworks = []
    for name in sorted(spec.versions):
        others = [r for other, roots in owned.items() if other != name for r in roots]
        loads = tuple(lib.path for lib in libraries if mine(lib.path, owned.get(name, ())) or not mine(lib.path, others))
        frameworks.append(AmdFramework(name, loads, framework(name).jit))
    return AmdFit(OFFLOAD_READER, spec.base.version, tuple(libraries), tuple(frameworks))


def needs_problem(spec: ImageSpec, wheels_read: Sequence[WheelRead], compat: Compat) -> str | None:
    """Why a ROCm image's locked wheels cannot run on its base, read from the wheels themselves: a
    soname their libraries load (ELF NEEDED) that neither the base (compat.yaml rocm.sonames), the OS
    nor another locked wheel provides, or a wheel whose NEEDED differs from its compat.yaml
    rocm.wheels row (the row the plan decided by is out of date). None when all hold."""
    facts = compat.rocm
    have = set(rocm.provided(spec.base, facts) or ()) | set(facts.os_sonames)
    for wheel in (w for w in wheels_read if w.role == "locked" and w.code.needs):
        needs = {n for n in wheel.code.needs if n not in facts.os_sonames}
        row = facts.wheel(wheel.name, wheel.version)
        if row is not None and needs != set(row.needs):
            return (
                f"{wheel.name}=={wheel.version}: its ELF NEEDED ({', '.join(sorted(needs))}) is not what compat.yaml rocm.wheels "
                f"says ({', '.join(row.needs)}); correct the row from the wheel"
            )
        absent = sorted(needs - have)
        if absent:
            return f"{wheel.name}=={wheel.version} loads {', '.join(absent)} (its ELF NEEDED), which base {spec.base.name} does not provide"
    return None


class Readings:
    """Wheel readings by the file's sha256: build/wheel-fit/<sha256>.json, and those the committed
    fit.json files hold (`known`), so a file is fetched and read once."""

    def __init__(self, folder: Path, known: Iterable[WheelCode] = ()) -> None:
        self.folder = folder
        self._known = {code.sha256: code for code in known}

    def get(self, sha256: str) -> WheelCode | None:
        if sha256 in self._known:
            return self._known[sha256]
        path = self.folder / f"{sha256}.json"
        if not path.is_file():
            return None
        try:
            code = reading_from_json(read_json(path, 2**24, "wheel reading"), lambda what: UserError(what, str(path)))
        except UserError:
            return None  # another schema, or damaged: read the wheel again
        if code.sha256 != sha256:
            return None
        self._known[sha256] = code
        return code

    def put(self, code: WheelCode) -> None:
        self._known[code.sha256] = code
        self.folder.mkdir(parents=True, exist_ok=True)
        temp = self.folder / f".{code.sha256}.tmp"
        temp.write_text(json.dumps(code.to_json(), sort_keys=True), encoding="utf-8")
        temp.replace(self.folder / f"{code.sha256}.json")


@dataclass
class _Run:
    files: WheelFiles
    readings: Readings
    fetched: int = 0

    def read(self, file: IndexFile, sha256: str) -> WheelCode:
        found = self.readings.get(sha256)
        if found is not None:
            return found
        with children.work_folder() as folder:  # a killed run's folder is swept by the next
            try:
                path = self.files.fetch(file, sha256, Path(folder))
            except FetchFailed as exc:
                raise MeasureFailed(str(exc)) from None
            self.fetched += not file.url.startswith("file:")
            try:
                code = wheels.read_wheel(path, sha256, file.filename, Path(folder))
            except wheels.BadWheel as exc:
                raise MeasureFailed(str(exc)) from None
        self.readings.put(code)
        return code


def measure_images(
    specs: Sequence[ImageSpec], files: WheelFiles, readings: Readings, done: Done, *, force: bool = False
) -> tuple[list[MeasureResult], dict[str, LockedFit]]:
    """Measure every locked CUDA image of `specs` whose fit.json is missing or stale (all of them with
    `force`); the new fits by image id, and a result per image (failures say why, one line)."""
    compat = table()
    run = _Run(files, readings)
    results: list[MeasureResult] = []
    made: dict[str, LockedFit] = {}
    for spec in specs:
        if not measured(spec):
            continue
        if not force and stale(spec, compat) is None:
            results.append(MeasureResult(spec.id, "current"))
            done(results[-1])
            continue
        started, before = time.monotonic(), run.fetched
        try:
            made[spec.id] = measure_one(spec, run, compat)
            result = MeasureResult(spec.id, "measured", made[spec.id].unknown or "", time.monotonic() - started, run.fetched - before)
        except (MeasureFailed, FetchFailed) as exc:  # an index that cannot be reached or read: this image, in one line
            result = MeasureResult(spec.id, "failed", str(exc), time.monotonic() - started, run.fetched - before)
        results.append(result)
        done(result)
    return results, made


def measure_one(spec: ImageSpec, run: _Run, compat: Compat) -> LockedFit:
    assert spec.lock is not None
    target = target_for(spec, compat)
    tags = target_tags(target.python, target.platform)
    found: list[WheelRead] = []
    for pin in pins(spec.lock):
        file = pick(run.files.files(pin.name), pin, tags)
        if file is None:
            raise MeasureFailed(
                f"{pin.name}=={pin.version}: no file the index lists with the lock's hashes is a wheel for {target.platform}, "
                f"Python {target.python}; check the index or re-lock"
            )
        assert file.sha256 is not None
        found.append(WheelRead(pin.name, pin.version, "locked", run.read(file, file.sha256)))
    machine = wheels.this_machine()
    for wheel in list(found):
        if wheel.code.foreign:
            twin = twin_of(run.files.files(wheel.name), wheel.code.filename, machine)
            if twin is None or twin.sha256 is None:
                raise MeasureFailed(
                    f"{wheel.name}=={wheel.version}: its {', '.join(wheel.code.foreign)} cannot be loaded on this {machine} machine, "
                    f"and the index lists no {machine} wheel of the same release to read them from"
                )
            found.append(WheelRead(wheel.name, wheel.version, "twin", run.read(twin, twin.sha256)))
    found += _base_readings(spec, found, run, machine)
    if spec.base.vendor == "rocm":
        problem = needs_problem(spec, found, compat)
        if problem is not None:
            raise MeasureFailed(problem)
    tops = {top for wheel in found if wheel.role == "locked" for top in wheel.code.tops}
    folders = tuple((name, (name,) if name in tops else ()) for name in sorted(spec.versions))
    return derive(spec, tuple(found), folders, compat)


def _base_readings(spec: ImageSpec, found: Sequence[WheelRead], run: _Run, machine: str) -> list[WheelRead]:
    """The libcudart and libnvrtc of an nvidia/cuda base, for an image whose wheels bring none: read
    from the PyPI wheel of the base's CUDA minor (its newest release of that minor for this machine)."""
    if spec.base.vendor != "cuda" or spec.base.bootstrap is not None or not spec.base.image or not spec.base.version:
        return []
    locked = [w.code for w in found if w.role == "locked"]
    has = {
        "cudart": any(code.cudart or any("libcudart.so" in p for p in code.foreign) for code in locked),
        "nvrtc": any(code.nvrtc or any("libnvrtc.so" in p for p in code.foreign) for code in locked),
    }
    major, minor = mm(spec.base.version)
    out = []
    for kind, project in sorted(BASE_PROJECTS.items()):
        if has[kind]:
            continue
        name = project if major >= 13 else f"{project}-cu{major}"
        file = _newest_of_minor(run.files.files(name), f"{major}.{minor}", machine)
        if file is None or file.sha256 is None:
            raise MeasureFailed(
                f"its base {spec.base.image} brings the {kind} of CUDA {major}.{minor}, and the index lists no {machine} wheel of "
                f"{name} {major}.{minor}.* to read it from"
            )
        version = file.filename.split("-")[1]
        out.append(WheelRead(name, version, "base", run.read(file, file.sha256)))
    return out


def _newest_of_minor(files: Iterable[IndexFile], minor: str, machine: str) -> IndexFile | None:
    best: tuple[Version, IndexFile] | None = None
    for file in files:
        parts = file.filename.split("-")
        if (
            len(parts) < 5
            or not file.filename.endswith(".whl")
            or wheels.wheel_machine(file.filename) != machine
            or "manylinux" not in parts[-1]
        ):
            continue
        try:
            version = Version(parts[1])
        except InvalidVersion:
            continue
        if f"{version.release[0]}.{version.release[1] if len(version.release) > 1 else 0}" == minor and (best is None or version > best[0]):
            best = (version, file)
    return None if best is None else best[1]


def known_readings(fits: Iterable[LockedFit | None]) -> list[WheelCode]:
    """The readings committed fit.json files hold: each is a wheel's, by its sha256."""
    return [wheel.code for fit in fits if fit is not None for wheel in fit.wheels]


def wheel_files(specs: Sequence[ImageSpec], settings: BuildSettings, wanted: Callable[[ImageSpec], bool] = measured) -> WheelFiles:
    """The sources the `wanted` images were locked from (lock/resolve.py `sources`): local folders and
    file:// trees first (nothing to download), then the default index and the plan's indexes."""
    indexes: list[str] = []
    folders: list[Path] = []
    for spec in specs:
        if not wanted(spec):
            continue
        where = sources(staging.needed_indexes(spec, set()), settings)
        indexes += [i for i in where.indexes if i not in indexes]
        folders += [Path(f) for f in where.find_links if Path(f) not in folders]
    local = [i for i in indexes if i.startswith("file:")]
    proxies = {key.split("_")[0].lower(): value for key, value in settings.proxies if key.upper() in ("HTTP_PROXY", "HTTPS_PROXY")}
    return WheelFiles([*local, *(i for i in indexes if i not in local)], folders, settings.ca_bundle, proxies or None)


def measure_workspace(
    ws: Workspace, ids: Iterable[str], settings: BuildSettings, done: Done, *, force: bool = False
) -> list[MeasureResult]:
    """`builder lock`'s second half: measure the chosen images' fits from their locks as they are on
    disk now, and write the new fit.json files into images/ (through render, with the labels and
    plan entries that follow from them) once all are measured; a failed image keeps none."""
    wanted = set(ids)
    images = ws.decided.images
    specs = [spec for spec in images if spec.id in wanted]
    if not any(measured(spec) for spec in specs):
        return []
    readings = Readings(ws.store.wheel_readings, known_readings(spec.locked_fit for spec in images))
    results, made = measure_images(specs, wheel_files(specs, settings), readings, done, force=force)
    if made:
        write_tree(ws.images_dir, ws.with_fits(made).rendered_tree())
    return results
