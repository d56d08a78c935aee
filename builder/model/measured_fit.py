"""The measured fit of a built CUDA image: what its own binaries say about the GPUs and drivers it runs on.

A foundation because two early readers hold it: a smoke result (results.py) carries it from the
test run, a known-good record (catalog/records.py) from publish on. It is data only: fit/measure.py
makes it (reading the image's libraries inside its smoke container, the rules of fit/arch.py and
fit/driver.py applied there), usecases/fit.py judges a host with it.

What it holds, per image:
- `libraries`: each shared library with device code under the venv (path relative to site-packages),
  its SASS targets (with how many cubins), PTX targets and PTX ISA versions, and the known compute
  capabilities it runs on (through SASS or PTX);
- `frameworks`: per framework, the libraries it loads (its own package folders and the shared ones,
  the nvidia/* wheels among them) and the compute capabilities ALL of them run on, a program needing
  every library it loads; for a framework that compiles its kernels at run time, its JIT compiler's too;
- `floors`: the lowest compute capability each bundled NVIDIA component (cudnn, cublas, nccl, ...) runs on;
- `jit`: the NVRTC the image bundles, its version and the architectures it compiles for;
- `driver`: the CUDA runtime the image loads, its driver floor by minor-version compatibility, the
  driver of its full toolkit, and NVIDIA's forward-compat package for data-center GPUs below the floor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from builder.model import jsonfields as jf
from builder.model.versions import cc_tuple

# The compute capabilities NVIDIA lists (its CUDA GPU compute capability list), with their
# generation for reason lines (fit/arch.py); a CC not listed is named by its number alone. A fit says
# "runs on" for these; a GPU newer than all of them is not guessed.
GENERATIONS: dict[tuple[int, int], str] = {
    (5, 0): "Maxwell",
    (5, 2): "Maxwell",
    (5, 3): "Maxwell",
    (6, 0): "Pascal",
    (6, 1): "Pascal",
    (6, 2): "Pascal",
    (7, 0): "Volta",
    (7, 2): "Volta",
    (7, 5): "Turing",
    (8, 0): "Ampere",
    (8, 6): "Ampere",
    (8, 7): "Ampere",
    (8, 9): "Ada",
    (9, 0): "Hopper",
    (10, 0): "Blackwell",
    (10, 3): "Blackwell",
    (11, 0): "Blackwell",
    (12, 0): "Blackwell",
    (12, 1): "Blackwell",
}
KNOWN_CCS: tuple[str, ...] = tuple(f"{major}.{minor}" for major, minor in sorted(GENERATIONS))
SASS = re.compile(r"^sm_\d{2,3}[af]?$")
PTX = re.compile(r"^compute_\d{2,3}[af]?$")
CC = re.compile(r"^\d{1,2}\.\d$")
VERSION = re.compile(r"^\d{1,4}(\.\d{1,4}){0,3}$")
_CONTROL = re.compile(r"[\x00-\x1f]")  # a control character: the text is not one line
MAX_LIBRARIES = 5000
MAX_ITEMS = 256  # targets of one library, CCs, folders, archs
MAX_TEXT = 1024


def target_key(target: str) -> tuple[int, int, str]:
    """sm_75 < sm_90 < sm_90a < sm_100 (numeric, not by text)."""
    digits = re.sub(r"\D", "", target)
    return int(digits[:-1] or 0), int(digits[-1:] or 0), target


@dataclass(frozen=True)
class LibraryCode:
    path: str  # relative to site-packages, e.g. torch/lib/libtorch_cuda.so
    sass: tuple[tuple[str, int], ...]  # (sm_86, how many cubins), sorted by target
    ptx: tuple[str, ...]  # compute_90, ...
    ptx_isa: tuple[str, ...]  # the PTX ISA versions of that PTX ("9.0")
    runs_on: tuple[str, ...]  # the known compute capabilities it runs on, through SASS or PTX

    @property
    def label(self) -> str:
        return " ".join([t for t, _ in self.sass] + list(self.ptx)) or "no device code"

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "sass": {target: count for target, count in self.sass},
            "ptx": list(self.ptx),
            "ptx_isa": list(self.ptx_isa),
            "runs_on": list(self.runs_on),
        }


@dataclass(frozen=True)
class FrameworkFit:
    name: str
    libraries: tuple[str, ...]  # paths of the LibraryCode entries it loads
    runs_on: tuple[str, ...]  # the known compute capabilities every one of them (and its JIT compiler) runs on
    jit: bool = False  # it compiles kernels at run time, through `MeasuredFit.jit`

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "libraries": list(self.libraries), "runs_on": list(self.runs_on), "jit": self.jit}


@dataclass(frozen=True)
class ComponentFloor:
    component: str  # a bundled NVIDIA component, named by its library: cudnn, cublasLt, nccl
    cc: str  # the lowest known compute capability all its libraries run on
    libraries: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"component": self.component, "cc": self.cc, "libraries": list(self.libraries)}


@dataclass(frozen=True)
class JitCompiler:
    library: str  # nvidia/cu13/lib/libnvrtc.so.13
    version: str  # 13.0
    archs: tuple[str, ...]  # sm_75, ... the architectures it compiles for (nvrtcGetSupportedArchs)

    @property
    def lowest(self) -> str | None:
        """The lowest compute capability it compiles for: a newer device gets the newest target's PTX, JIT-compiled by the driver."""
        ccs = [_sm_cc(a) for a in self.archs]
        return min(ccs, key=cc_tuple) if ccs else None

    def to_json(self) -> dict[str, Any]:
        return {"library": self.library, "version": self.version, "archs": list(self.archs)}


@dataclass(frozen=True)
class DriverNeed:
    cuda: str  # the CUDA runtime the image loads (cudaRuntimeGetVersion), major.minor
    floor: str  # the oldest driver that runs it (minor-version compatibility)
    full: str | None  # the driver its toolkit shipped with; None when unknown
    forward_compat: str  # NVIDIA's forward-compat package, the way out below the floor on data-center GPUs
    library: str = ""  # the libcudart it was read from

    def to_json(self) -> dict[str, Any]:
        return {"cuda": self.cuda, "floor": self.floor, "full": self.full, "forward_compat": self.forward_compat, "library": self.library}


@dataclass(frozen=True)
class MeasuredFit:
    reader: str  # how the device code was read: "fatbin" (fit/scan.py, equal to cuobjdump)
    seconds: float  # what measuring it took
    libraries: tuple[LibraryCode, ...]
    frameworks: tuple[FrameworkFit, ...]
    floors: tuple[ComponentFloor, ...] = ()
    jit: JitCompiler | None = None
    driver: DriverNeed | None = None

    @property
    def runs_on(self) -> tuple[str, ...]:
        """The known compute capabilities every framework of the image runs on."""
        sets = [set(f.runs_on) for f in self.frameworks]
        common = set.intersection(*sets) if sets else set()
        return tuple(sorted(common, key=cc_tuple))

    def cc_label(self) -> str:
        """`7.5 8.0 8.6 8.9 9.0 10.0 12.0`: the compute capabilities it runs on, for a "runs on" column."""
        return " ".join(self.runs_on) or "none"

    def driver_floor(self) -> str | None:
        """The oldest NVIDIA driver that runs its CUDA runtime; None when no runtime was read."""
        return self.driver.floor if self.driver else None

    def framework(self, name: str) -> FrameworkFit | None:
        return next((f for f in self.frameworks if f.name == name), None)

    def library(self, path: str) -> LibraryCode | None:
        return next((lib for lib in self.libraries if lib.path == path), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "reader": self.reader,
            "seconds": self.seconds,
            "libraries": [lib.to_json() for lib in self.libraries],
            "frameworks": [f.to_json() for f in self.frameworks],
            "floors": [f.to_json() for f in self.floors],
            "jit": self.jit.to_json() if self.jit else None,
            "driver": self.driver.to_json() if self.driver else None,
        }


def _sm_cc(target: str) -> str:
    digits = re.sub(r"\D", "", target)
    return f"{digits[:-1]}.{digits[-1]}"


# -- the typed reader ---------------------------------------------------------------------------


def from_json(data: Any, where: str, fail: jf.Fail) -> MeasuredFit:
    """A MeasuredFit from its JSON, every field checked; `fail` makes the caller's one-line refusal
    (it names the file), `where` the key the fit sits under ("fit")."""

    def bad(what: str) -> Exception:
        return fail(f"{where}: {what}")

    doc = _keys(data, where, {"reader", "seconds", "libraries", "frameworks", "floors", "jit", "driver"}, bad)
    libraries = tuple(
        _library(item, f"libraries[{i}]", bad) for i, item in enumerate(_list(doc["libraries"], "libraries", MAX_LIBRARIES, bad))
    )
    paths = {lib.path for lib in libraries}
    frameworks = tuple(
        _framework(item, f"frameworks[{i}]", paths, bad) for i, item in enumerate(_list(doc["frameworks"], "frameworks", 64, bad))
    )
    floors = tuple(_floor(item, f"floors[{i}]", bad) for i, item in enumerate(_list(doc["floors"], "floors", MAX_ITEMS, bad)))
    seconds = jf.number(doc["seconds"], "seconds", bad)
    if seconds < 0:
        raise bad(f"'seconds' must be >= 0; got {seconds}")
    return MeasuredFit(
        reader=_text(doc["reader"], "reader", bad),
        seconds=seconds,
        libraries=libraries,
        frameworks=frameworks,
        floors=floors,
        jit=None if doc["jit"] is None else _jit(doc["jit"], bad),
        driver=None if doc["driver"] is None else _driver(doc["driver"], bad),
    )


def _keys(value: Any, key: str, names: set[str], bad: jf.Fail, optional: frozenset[str] = frozenset()) -> dict[str, Any]:
    doc = jf.obj(value, key, bad)
    missing = sorted(names - set(doc) - optional)
    if missing:
        raise bad(f"{key!r} lacks {', '.join(missing)}")
    unknown = sorted(set(doc) - names)
    if unknown:
        raise bad(f"{key!r} has unknown keys {', '.join(str(k)[:40] for k in unknown[:5])}")
    return doc


def _list(value: Any, key: str, limit: int, bad: jf.Fail) -> list[Any]:
    if not isinstance(value, list) or len(value) > limit:
        raise bad(f"{key!r} must be a list of at most {limit} entries")
    return value


def _text(value: Any, key: str, bad: jf.Fail) -> str:
    found = jf.text(value, key, bad)
    if len(found) > MAX_TEXT or not found or _CONTROL.search(found):
        raise bad(f"{key!r} must be one line of 1 to {MAX_TEXT} characters")
    return found


def _matching(value: Any, key: str, pattern: re.Pattern[str], want: str, bad: jf.Fail) -> tuple[str, ...]:
    items = _list(value, key, MAX_ITEMS, bad)
    for item in items:
        if not isinstance(item, str) or not pattern.fullmatch(item):
            raise bad(f"{key!r} holds {str(item)[:40]!r}, not {want}")
    return tuple(items)


def _ccs(value: Any, key: str, bad: jf.Fail) -> tuple[str, ...]:
    found = _matching(value, key, CC, "a compute capability like 8.6", bad)
    return tuple(sorted(set(found), key=cc_tuple))


def _library(value: Any, key: str, bad: jf.Fail) -> LibraryCode:
    doc = _keys(value, key, {"path", "sass", "ptx", "ptx_isa", "runs_on"}, bad)
    sass = jf.obj(doc["sass"], f"{key}.sass", bad)
    if len(sass) > MAX_ITEMS:
        raise bad(f"{key}.sass has more than {MAX_ITEMS} targets")
    for target, count in sass.items():
        if not SASS.fullmatch(target) or type(count) is not int or count < 1:
            raise bad(f"{key}.sass entry {str(target)[:40]!r}: {str(count)[:20]!r} is not an SASS target (sm_86) with a cubin count >= 1")
    return LibraryCode(
        path=_text(doc["path"], f"{key}.path", bad),
        sass=tuple(sorted(sass.items(), key=lambda item: target_key(item[0]))),
        ptx=_matching(doc["ptx"], f"{key}.ptx", PTX, "a PTX target like compute_90", bad),
        ptx_isa=_matching(doc["ptx_isa"], f"{key}.ptx_isa", VERSION, "a PTX ISA version like 9.0", bad),
        runs_on=_ccs(doc["runs_on"], f"{key}.runs_on", bad),
    )


def _framework(value: Any, key: str, paths: set[str], bad: jf.Fail) -> FrameworkFit:
    doc = _keys(value, key, {"name", "libraries", "runs_on", "jit"}, bad)
    libraries = tuple(_text(p, f"{key}.libraries", bad) for p in _list(doc["libraries"], f"{key}.libraries", MAX_LIBRARIES, bad))
    unknown = [p for p in libraries if p not in paths]
    if unknown:
        raise bad(f"{key}.libraries names {unknown[0][:80]!r}, which is not in 'libraries'")
    return FrameworkFit(
        name=_text(doc["name"], f"{key}.name", bad),
        libraries=libraries,
        runs_on=_ccs(doc["runs_on"], f"{key}.runs_on", bad),
        jit=jf.flag(doc["jit"], f"{key}.jit", bad),
    )


def _floor(value: Any, key: str, bad: jf.Fail) -> ComponentFloor:
    doc = _keys(value, key, {"component", "cc", "libraries"}, bad)
    cc = _text(doc["cc"], f"{key}.cc", bad)
    if not CC.fullmatch(cc):
        raise bad(f"{key}.cc {cc[:40]!r} is not a compute capability like 7.5")
    libraries = tuple(_text(p, f"{key}.libraries", bad) for p in _list(doc["libraries"], f"{key}.libraries", MAX_LIBRARIES, bad))
    return ComponentFloor(_text(doc["component"], f"{key}.component", bad), cc, libraries)


def _jit(value: Any, bad: jf.Fail) -> JitCompiler:
    doc = _keys(value, "jit", {"library", "version", "archs"}, bad)
    version = _text(doc["version"], "jit.version", bad)
    if not VERSION.fullmatch(version):
        raise bad(f"'jit.version' {version[:40]!r} is not a version like 13.0")
    archs = _matching(doc["archs"], "jit.archs", SASS, "an architecture like sm_75", bad)
    return JitCompiler(_text(doc["library"], "jit.library", bad), version, archs)


def _driver(value: Any, bad: jf.Fail) -> DriverNeed:
    doc = _keys(value, "driver", {"cuda", "floor", "full", "forward_compat", "library"}, bad, frozenset({"library"}))
    values = {}
    for name in ("cuda", "floor"):
        values[name] = _text(doc[name], f"driver.{name}", bad)
        if not VERSION.fullmatch(values[name]):
            raise bad(f"'driver.{name}' {values[name][:40]!r} is not a version like 580.65.06")
    full = jf.optional_text(doc["full"], "driver.full", bad)
    if full is not None and not VERSION.fullmatch(full):
        raise bad(f"'driver.full' {full[:40]!r} is not a version like 580.65.06")
    return DriverNeed(
        values["cuda"],
        values["floor"],
        full,
        _text(doc["forward_compat"], "driver.forward_compat", bad),
        jf.text(doc.get("library", ""), "driver.library", bad),
    )
