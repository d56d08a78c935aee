"""A ROCm image's fit, measured from its binaries: the AMD GPU targets of every library's code objects.

The AMD counterpart of measured_fit.py, written by `builder lock` into images/<id>/fit.json (from the
locked wheels, fit/wheels.py with fit/offload.py) and by the ROCm base smoke test (from the image's
own libraries). A foundation because the locked fit (locked_fit.py) and the smoke result hold it.

What it holds:
- `libraries`: each library with AMD code objects (path relative to site-packages, or absolute for a
  base's system library), its target IDs (`gfx90a`, `gfx90a:xnack-`, `gfx11-generic`) with how many
  code objects each; `compressed:zstd` counts bundles the reader could not inflate;
- `frameworks`: per framework, the libraries it loads (its own package folders and every shared one)
  and whether it compiles kernels at run time (CuPy's hiprtc: its targets are the ROCm runtime's);
- `rocm`: the ROCm release of the base those run-time compilers come from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from builder.model import jsonfields as jf

TARGET = re.compile(r"^(gfx[0-9a-z-]{2,20}|gfx-mach-0x[0-9a-f]{2})(:(sramecc|xnack)[+-]){0,2}$|^compressed:[a-z0-9 ]{1,20}$")
MAX_LIBRARIES = 5000
MAX_TARGETS = 256


@dataclass(frozen=True)
class AmdLibrary:
    path: str
    targets: tuple[tuple[str, int], ...]  # target ID -> code objects, sorted

    @property
    def label(self) -> str:
        return " ".join(t for t, _ in self.targets) or "no code objects"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "targets": {t: n for t, n in self.targets}}


@dataclass(frozen=True)
class AmdFramework:
    name: str
    libraries: tuple[str, ...]
    jit: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "libraries": list(self.libraries), "jit": self.jit}


@dataclass(frozen=True)
class AmdFit:
    reader: str  # "offload" (fit/offload.py)
    rocm: str | None  # the base's ROCm release
    libraries: tuple[AmdLibrary, ...]
    frameworks: tuple[AmdFramework, ...] = ()

    @property
    def targets(self) -> tuple[str, ...]:
        """Every processor some library has code for, sorted by generation (gfx906 < gfx1100)."""
        found = {t.split(":")[0] for lib in self.libraries for t, _ in lib.targets if not t.startswith("compressed:")}
        return tuple(sorted(found, key=lambda t: (len(t), t)))

    def library(self, path: str) -> AmdLibrary | None:
        return next((lib for lib in self.libraries if lib.path == path), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "reader": self.reader,
            "rocm": self.rocm,
            "libraries": [lib.to_json() for lib in self.libraries],
            "frameworks": [f.to_json() for f in self.frameworks],
        }


def _targets(value: Any, key: str, fail: jf.Fail) -> tuple[tuple[str, int], ...]:
    targets = jf.obj(value, key, fail)
    if len(targets) > MAX_TARGETS or not all(
        isinstance(t, str) and TARGET.fullmatch(t) and type(n) is int and n >= 1 for t, n in targets.items()
    ):
        raise fail(f"{key!r} must map target IDs like gfx90a:xnack- to code object counts >= 1")
    return tuple(sorted(targets.items()))


def _libraries(value: Any, key: str, fail: jf.Fail) -> tuple[AmdLibrary, ...]:
    if not isinstance(value, list) or len(value) > MAX_LIBRARIES:
        raise fail(f"{key!r} must be a list of at most {MAX_LIBRARIES}")
    return tuple(_LIBRARY(item, key, fail) for item in value)


# A library's and a framework's keys beyond these are ignored (as they always were); the fit's are refused.
_LIBRARY = jf.nested((jf.Field("path", jf.text), jf.Field("targets", _targets)), AmdLibrary, closed=False)
FRAMEWORK_FIELDS = (jf.Field("name", jf.text), jf.Field("libraries", jf.texts), jf.Field("jit", jf.flag))
FIELDS = (
    jf.Field("libraries", _libraries),
    jf.Field("frameworks", jf.each(jf.nested(FRAMEWORK_FIELDS, AmdFramework, closed=False))),
    jf.Field("reader", jf.text),
    jf.Field("rocm", jf.optional_text, None),
)


def from_json(data: Any, where: str, fail: jf.Fail) -> AmdFit:
    """An AmdFit as `to_json` writes it, every field checked; `fail` makes the caller's one-line refusal."""

    def bad(what: str) -> Exception:
        return fail(f"{where}: {what}")

    doc = jf.obj(data, where, bad)
    unknown = jf.unknown(doc, FIELDS)
    if unknown:
        raise bad(f"unknown keys {', '.join(str(k)[:40] for k in unknown[:3])}")
    fit = AmdFit(**jf.read_fields({**dict.fromkeys(jf.missing(doc, FIELDS)), **doc}, FIELDS, bad))
    paths = {lib.path for lib in fit.libraries}
    if any(p not in paths for f in fit.frameworks for p in f.libraries):
        raise bad("'frameworks.libraries' names a library that is not in 'libraries'")
    return fit
