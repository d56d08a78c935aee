"""A built CUDA image's measured fit, read in its own smoke container.

fit/scan.py runs there with the image's Python (`python -I -c`, read-only root, no network,
non-root): it lists the device code of every shared library under the venv, each framework's
package folders, the CUDA runtime's version and NVRTC's architectures. `parse` applies the rules
here (fit/arch.py, fit/driver.py) and returns the typed record (builder/model/measured_fit.py).

Which libraries a framework loads: those in its own package folders and every shared one (the
nvidia/* wheels, jaxlib, ...), never another framework's. A program needs every library it loads,
so a framework runs on the compute capabilities ALL of them run on; one that compiles its kernels
at run time (`Framework.jit`: NVRTC/NVVM) also needs its compiler to know the device, or an older
target whose PTX the driver JIT-compiles.

Which GPU runs a library is fit/rule.py's one rule, the one `fit --library` judges by: NVIDIA's own
libraries (the nvidia/* wheels) impose a floor, their lowest target, not the exact list (cuFFT 12's
`.nv_fatbin` holds a single sm_75 cubin for a library that runs on Hopper); any other runs on
exactly what its SASS and PTX allow.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from builder.compat.facts import Compat
from builder.compat.rules import Nvrtc, below_lowest, framework
from builder.engine.port import Container
from builder.fit import driver as drivers
from builder.fit import fatbin, rule, scan
from builder.fit.arch import Arch, Embedded
from builder.model import jsonfields as jf
from builder.model.measured_fit import (
    ComponentFloor,
    DriverNeed,
    FrameworkFit,
    JitCompiler,
    LibraryCode,
    MeasuredFit,
    target_key,
)
from builder.model.versions import cc_tuple, release_tuple
from builder.util.errors import RunFailure

JitRule = Callable[[Arch, JitCompiler], str | None]  # a GPU, the NVRTC -> why the kernels compiled at run time cannot run, or None
SCRIPT = Path(scan.__file__).read_text(encoding="utf-8")
TIMEOUT_S = 120  # a torch image's ~3 GB of libraries take about a second; a bound, not an estimate
KNOWN = rule.KNOWN
READER = "fatbin"


def command(frameworks: Sequence[str]) -> list[str]:
    """The scan, run by the image's own Python (first on PATH: the venv), killed at the bound."""
    return ["timeout", "-s", "KILL", str(TIMEOUT_S), "python", "-I", "-c", SCRIPT, *frameworks]


def measure(container: Container, frameworks: Mapping[str, str] | Sequence[str], compat: Compat) -> MeasuredFit:
    """Run the scan in a started container and read its answer; a RunFailure in one line when it fails.
    `frameworks`: name -> release (each framework's own rule for what it compiles at run time is the release's)."""
    releases = dict(frameworks) if isinstance(frameworks, Mapping) else dict.fromkeys(frameworks, "")
    started = time.monotonic()
    done = container.exec(command(sorted(releases)))
    seconds = round(time.monotonic() - started, 2)
    if done.returncode != 0:
        last = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise RunFailure(f"measuring the fit in the container exited {done.returncode}: {last[:300]}")
    return parse(done.stdout.decode(errors="replace"), jit_rules(releases, compat), compat, seconds)


def nvrtc_of(compiler: JitCompiler) -> Nvrtc:
    return Nvrtc(compiler.version, tuple(int(a.removeprefix("sm_").rstrip("af")) for a in compiler.archs))


def jit_rules(releases: Mapping[str, str], compat: Compat) -> dict[str, JitRule | None]:
    """Each framework's rule for the kernels it compiles at run time (compat/rules: numba-cuda's
    arch-specific targets, CuPy's capped cubins), for its release; None for one that compiles none."""

    def rule(name: str, release: str) -> JitRule:
        found = framework(name)
        return lambda device, compiler: found.jit_refusal((device.major, device.minor), nvrtc_of(compiler), release, compat)

    return {name: rule(name, release) if framework(name).jit else None for name, release in releases.items()}


def _below_lowest(device: Arch, compiler: JitCompiler) -> str | None:
    return below_lowest((device.major, device.minor), nvrtc_of(compiler))


def parse(output: str, frameworks: Mapping[str, bool | JitRule | None], compat: Compat, seconds: float) -> MeasuredFit:
    """The record from the scan's JSON; `frameworks` maps each framework to its rule for what it
    compiles at run time (`jit_rules`), True for the shared one, False or None when it compiles nothing."""

    def fail(what: str) -> RunFailure:
        return RunFailure(f"the fit scan's output is not what fit/scan.py prints: {what}")

    try:
        doc = jf.obj(json.loads(output), "the output", fail)
    except json.JSONDecodeError as exc:
        raise fail(f"not JSON ({exc.msg} at line {exc.lineno})") from None
    libraries = tuple(_library(item, fail) for item in jf.objs(doc.get("libraries"), "libraries", fail))
    folders = {
        name: jf.texts(paths, f"frameworks.{name}", fail) for name, paths in jf.obj(doc.get("frameworks"), "frameworks", fail).items()
    }
    jit = _compiler(jf.obj(doc.get("nvrtc"), "nvrtc", fail), fail)
    return MeasuredFit(
        reader=READER,
        seconds=seconds,
        libraries=libraries,
        frameworks=tuple(_framework(name, frameworks[name], libraries, folders, jit) for name in sorted(frameworks)),
        floors=floors(libraries),
        jit=jit,
        driver=_driver(jf.obj(doc.get("cudart"), "cudart", fail), compat, fail),
    )


def _library(item: dict[str, Any], fail: jf.Fail) -> LibraryCode:
    path = jf.text(item.get("path"), "libraries.path", fail)
    rows = item.get("entries")
    if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == 5 and all(type(v) is int for v in r) for r in rows):
        raise fail(f"the entries of {path[:80]} are not [kind, sm, flags, code, count] rows")
    embedded = fatbin.embedded(((kind, sm, flags, code), count) for kind, sm, flags, code, count in rows)
    return LibraryCode(
        path=path,
        sass=tuple(sorted(((a.sm, n) for a, n in embedded.cubins), key=lambda item: target_key(item[0]))),
        ptx=tuple(a.compute for a in embedded.ptx),
        ptx_isa=embedded.ptx_isa,
        runs_on=rule.runs_on(path, embedded),
    )


def embedded_of(library: LibraryCode) -> Embedded:
    """The `Embedded` a record's library stands for (for fit/rule.py's verdicts on any device). The
    cubin counts are kept as counts, never expanded: a record is input, and a count is any number."""
    counted: dict[Arch, int] = {}
    for target, count in library.sass:
        arch = Arch.parse(target)
        counted[arch] = counted.get(arch, 0) + count
    return Embedded.counted(counted, (Arch.parse(p) for p in library.ptx), library.ptx_isa)


def _owned(path: str, folders: Sequence[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _framework(
    name: str,
    jit: bool | JitRule | None,
    libraries: Sequence[LibraryCode],
    folders: Mapping[str, Sequence[str]],
    compiler: JitCompiler | None,
) -> FrameworkFit:
    others = [f for other, found in folders.items() if other != name for f in found]
    loads = [lib for lib in libraries if _owned(lib.path, folders.get(name, ())) or not _owned(lib.path, others)]
    ccs = {cc.number for cc in KNOWN}
    for lib in loads:
        ccs &= set(lib.runs_on)  # fit/rule.py's answer per library, NVIDIA's floor included
    if jit:
        refusal = jit if callable(jit) else _below_lowest
        ccs = {cc for cc in ccs if compiler is not None and refusal(Arch.cc(cc), compiler) is None}
    return FrameworkFit(name, tuple(lib.path for lib in loads), tuple(sorted(ccs, key=cc_tuple)), bool(jit))


def floors(libraries: Sequence[LibraryCode]) -> tuple[ComponentFloor, ...]:
    """The lowest known compute capability every library of each bundled NVIDIA component runs on."""
    groups: dict[str, list[LibraryCode]] = {}
    for lib in libraries:
        name = rule.nvidia_component(lib.path)
        if name:
            groups.setdefault(name, []).append(lib)
    out = []
    for name, libs in sorted(groups.items()):
        common = set.intersection(*(set(lib.runs_on) for lib in libs))
        if common:
            out.append(ComponentFloor(name, min(common, key=cc_tuple), tuple(lib.path for lib in libs)))
    return tuple(out)


def _compiler(found: dict[str, Any], fail: jf.Fail) -> JitCompiler | None:
    """The newest NVRTC the image bundles (nvrtcVersion, nvrtcGetSupportedArchs)."""
    compilers = []
    for path, value in sorted(found.items()):
        entry = jf.obj(value, f"nvrtc.{path}", fail)
        version = jf.text(entry.get("version"), "nvrtc.version", fail)
        archs = entry.get("archs")
        if not isinstance(archs, list) or not all(type(a) is int and 10 <= a < 10000 for a in archs):
            raise fail(f"nvrtc {path[:80]}: archs must be numbers like 75")
        compilers.append(JitCompiler(path, version, tuple(f"sm_{a}" for a in sorted(archs))))
    return max(compilers, key=lambda c: release_tuple(c.version), default=None)


def _driver(found: dict[str, Any], compat: Compat, fail: jf.Fail) -> DriverNeed | None:
    """The driver floor of the newest CUDA runtime the image loads."""
    runtimes = sorted(((jf.text(v, f"cudart.{p}", fail), p) for p, v in found.items()), key=lambda vp: release_tuple(vp[0]))
    if not runtimes:
        return None
    cuda, library = runtimes[-1]
    floor = drivers.floor_for(cuda, compat)
    if floor is None:
        return None
    return DriverNeed(floor.cuda, floor.floor, floor.full, drivers.forward_compat(floor.cuda), library)
