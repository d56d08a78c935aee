"""The exact rules for which GPU runs which embedded device code (pure).

A library built for CUDA carries SASS (cubins, machine code for one architecture) and may carry PTX
(an intermediate form the driver JIT-compiles). What runs where:

- SASS for sm_XY runs on compute capability X.Z with Z >= Y, same major only (binary compatibility
  within a major: an sm_86 cubin runs on 8.9, never on 9.0).
- Arch-specific cubins (sm_90a, sm_100a, sm_120a) run only on their exact target; family-specific
  ones (sm_100f) follow the same-major rule like plain cubins.
- PTX for compute_XY is JIT-compiled for any device >= X.Y, by a driver that knows its PTX ISA
  version (driver.py); arch-specific PTX only on its exact target, family PTX (compute_120f) within its major.

SASS is preferred over PTX: a device with usable SASS never JITs, so the decision names the SASS
target that carries most of the cubins the device can run.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from builder.model.measured_fit import GENERATIONS as GENERATIONS  # re-exported: the rules of this stage name generations from here
from builder.model.versions import ComputeCapability, release_tuple
from builder.util.errors import UserError
from builder.util.text import printable

# ASCII digits only: \d also takes fullwidth (８.６) and Arabic-Indic digits, which int() reads as 8.6
_ARCH = re.compile(r"^(?:sm_|compute_)?([0-9]{2,3})([af]?)$")
_CC = re.compile(r"^([0-9]{1,2})\.([0-9])$")

# Generation names for the reason lines: builder/model/measured_fit.py (a foundation, so the stages before
# this one name the known compute capabilities too).


class Arch(ComputeCapability):
    """A GPU architecture: a compute capability (major.minor) and the `a`/`f` suffix of a target
    (the fields, order and hash are model/versions.py's ComputeCapability's), read as cuobjdump and
    nvcc spell targets and as nvidia-smi reports a device, and named for reason lines."""

    @staticmethod
    def parse(text: str) -> Arch:
        """`sm_86`, `sm_90a`, `compute_120`, `100f` as cuobjdump and nvcc spell them; the last digit is the minor."""
        match = _ARCH.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"not a GPU architecture: {text!r} (expected e.g. sm_86, sm_90a, compute_120)")
        digits, suffix = match.groups()
        return Arch(int(digits[:-1]), int(digits[-1]), "a" if suffix == "a" else "f" if suffix == "f" else "")

    @staticmethod
    def cc(text: str) -> Arch:
        """A device's compute capability as nvidia-smi reports it (`8.6`, `12.0`)."""
        match = _CC.fullmatch(text.strip())
        if match is None:
            raise UserError(
                f"compute capability {printable(text, 40)!r} is not MAJOR.MINOR: give it as nvidia-smi reports it, e.g. 8.6 or 12.0"
            )
        return Arch(int(match.group(1)), int(match.group(2)))

    @property
    def sm(self) -> str:
        return f"sm_{self.major}{self.minor}{self.suffix}"

    @property
    def compute(self) -> str:
        return f"compute_{self.major}{self.minor}{self.suffix}"

    @property
    def number(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def generation(self) -> str:
        return GENERATIONS.get((self.major, self.minor), f"compute capability {self.number}")

    @property
    def named(self) -> str:
        """`Ampere 8.6` for a reason line; `compute capability 3.0` where no generation is listed
        (not the number twice, as `generation` followed by the number would say)."""
        name = GENERATIONS.get((self.major, self.minor))
        return f"{name} {self.number}" if name else self.generation


@dataclass(frozen=True)
class Embedded:
    """The device code in a set of libraries: the SASS targets and the PTX targets, each sorted.

    `cubins` counts the cubins per SASS target: a library is many compilation units, and a target
    with one cubin (torch 2.14.1's single sm_89 kernel) is not the way most of its kernels reach a
    GPU, so the reason names the target that carries most of them."""

    sass: tuple[Arch, ...]
    ptx: tuple[Arch, ...]
    ptx_isa: tuple[str, ...] = ()  # the PTX ISA versions of that PTX ("9.0"), when read
    cubins: tuple[tuple[Arch, int], ...] = ()  # (SASS target, how many cubins), when counted

    @staticmethod
    def of(sass: Iterable[Arch], ptx: Iterable[Arch], ptx_isa: Iterable[str] = ()) -> Embedded:
        """From every entry as listed (repeats counted)."""
        return Embedded.counted(Counter(sass), ptx, ptx_isa)

    @staticmethod
    def counted(cubins: Mapping[Arch, int], ptx: Iterable[Arch], ptx_isa: Iterable[str] = ()) -> Embedded:
        """From each SASS target with its cubin count (a record's), which is never expanded into entries."""
        return Embedded(
            tuple(sorted(cubins)), tuple(sorted(set(ptx))), tuple(sorted(set(ptx_isa), key=_isa_key)), tuple(sorted(cubins.items()))
        )

    def count(self, arch: Arch) -> int:
        return dict(self.cubins).get(arch, 0)

    @property
    def label(self) -> str:
        """`sm_75 sm_80 ... compute_120`: the listing in one line."""
        return " ".join([a.sm for a in self.sass] + [a.compute for a in self.ptx]) or "no device code"


def _isa_key(version: str) -> tuple[int, ...]:
    return release_tuple(version)


def sass_runs(cubin: Arch, device: Arch) -> bool:
    if cubin.suffix == "a":
        return (cubin.major, cubin.minor) == (device.major, device.minor)
    return cubin.major == device.major and device.minor >= cubin.minor


def ptx_runs(ptx: Arch, device: Arch) -> bool:
    if ptx.suffix == "a":
        return (ptx.major, ptx.minor) == (device.major, device.minor)
    if ptx.suffix == "f":  # family PTX: JIT-compiled within its family only (compute_120f for 12.x, x >= 0)
        return ptx.major == device.major and device.minor >= ptx.minor
    return (device.major, device.minor) >= (ptx.major, ptx.minor)


@dataclass(frozen=True)
class ArchFit:
    """How a device runs the device code: through a cubin, through PTX JIT, or not at all."""

    device: Arch
    how: Literal["sass", "ptx", "none"]
    via: Arch | None
    reason: str

    @property
    def fits(self) -> bool:
        return self.how != "none"


def decide(embedded: Embedded, device: Arch, what: str) -> ArchFit:
    """The device's fit with one-line reason; `what` names the software (`torch 2.14.1+cu130`)."""
    cubins = [a for a in embedded.sass if sass_runs(a, device)]
    if cubins:
        best = max(cubins, key=lambda a: (embedded.count(a), a))
        return ArchFit(device, "sass", best, f"{device.number} ({device.generation}) runs {what} through its {best.sm} SASS")
    ptx = [a for a in embedded.ptx if ptx_runs(a, device)]
    if ptx:
        best = max(ptx)
        return ArchFit(
            device,
            "ptx",
            best,
            f"{device.number} ({device.generation}) has no SASS in {what}: the driver JIT-compiles its {best.compute} PTX (slow first start)",
        )
    no_ptx = "no PTX" if not embedded.ptx else f"no PTX at or below {device.compute}"
    return ArchFit(device, "none", None, f"no {device.sm} SASS and {no_ptx}: {device.generation} cannot run {what}")
