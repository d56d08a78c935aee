"""Which AMD GPU runs which code object (pure): the AMD counterpart of fit/arch.py and fit/rule.py.

AMD code objects have no binary compatibility across processors: a code object for gfx90a runs on
gfx90a only (LLVM AMDGPUUsage, target IDs). What widens it:
- a generic target (gfx11-generic) runs on each processor compat.yaml rocm.generic lists for it;
- a feature left unspecified (`gfx90a`, not `gfx90a:xnack-`) runs with either setting; a `+`/`-`
  code object runs only where the GPU runs in that mode. A GPU described without a mode
  (`--gfx gfx90a`) may run in either: a library fits it when some code object runs in every mode it
  may be in, and is `unknown` (naming the mode it needs) when only one mode is covered.

`judge_library` is the verdict of one library on one GPU; `parse_device` checks a `--gfx` value.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from builder.compat.rocm import RocmFacts
from builder.util.errors import UserError

Status = Literal["fits", "does not fit", "unknown"]
DEVICE = re.compile(r"^(gfx[0-9]{1,2}[0-9a-f]{2})((?::(?:sramecc|xnack)[+-]){0,2})$")
FEATURES = ("sramecc", "xnack")


@dataclass(frozen=True)
class Target:
    processor: str  # gfx90a, gfx11-generic
    features: tuple[tuple[str, str], ...] = ()  # (sramecc|xnack, + or -), sorted

    @staticmethod
    def parse(text: str) -> Target:
        name, *rest = text.split(":")
        features = tuple(sorted((f[:-1], f[-1]) for f in rest if f[-1:] in "+-" and f[:-1] in FEATURES))
        return Target(name, features)

    def setting(self, feature: str) -> str | None:
        return dict(self.features).get(feature)

    def __str__(self) -> str:
        return ":".join([self.processor, *(f"{name}{value}" for name, value in self.features)])


@dataclass(frozen=True)
class GfxFit:
    status: Status
    via: str | None  # the code object target that runs it
    reason: str


def parse_device(text: str) -> str:
    """A `--gfx` value as rocminfo names the GPU (gfx90a, optionally gfx90a:xnack-); one line when it is not one."""
    value = text.strip()
    if not DEVICE.fullmatch(value):
        raise UserError(f"--gfx {text!r} is not an AMD GPU target: give it as rocminfo names it, e.g. gfx90a, gfx1100 or gfx942:xnack-")
    return value


def _processor_runs(code: str, device: str, facts: RocmFacts) -> bool:
    return code == device or (code.endswith("-generic") and device in facts.runs_on(code))


def _modes(device: Target, codes: Sequence[Target]) -> list[dict[str, str]]:
    """The modes the GPU may run in: its stated settings, every setting of a feature it leaves open
    that some code object restricts."""
    open_features = [f for f in FEATURES if device.setting(f) is None and any(c.setting(f) for c in codes)]
    stated = dict(device.features)
    return [{**stated, **dict(zip(open_features, values, strict=True))} for values in itertools.product("+-", repeat=len(open_features))]


def _runs_in(code: Target, mode: dict[str, str]) -> bool:
    return all(mode.get(name) in (None, value) for name, value in code.features)


def judge_library(name: str, targets: Sequence[str], device_text: str, facts: RocmFacts) -> GfxFit:
    """One library's code objects (`targets`: their target IDs) on one GPU."""
    device = Target.parse(device_text)
    unreadable = [t for t in targets if t.startswith("compressed:")]
    codes = [Target.parse(t) for t in targets if not t.startswith("compressed:")]
    matching = [c for c in codes if _processor_runs(c.processor, device.processor, facts)]
    if not matching:
        if unreadable:
            return GfxFit(
                "unknown",
                None,
                f"{name} holds {len(unreadable)} compressed bundle(s) this Python cannot inflate ({unreadable[0]}) and no "
                f"code object for {device.processor} besides",
            )
        have = " ".join(sorted({c.processor for c in codes}, key=lambda p: (len(p), p))) or "none"
        return GfxFit("does not fit", None, f"{name} has code objects for {have}, none for {device.processor}")
    uncovered = [mode for mode in _modes(device, matching) if not any(_runs_in(c, mode) for c in matching)]
    if uncovered:
        need = sorted({str(c) for c in matching})
        if device.features and len(uncovered) == len(_modes(device, matching)):
            return GfxFit("does not fit", None, f"{name} has {', '.join(need)} only: {device_text} cannot run it")
        return GfxFit(
            "unknown",
            None,
            f"{name} has {', '.join(need)} only: it runs on {device.processor} in that mode "
            f"(give --gfx {need[0]} if the GPU runs so, e.g. HSA_XNACK=1 for xnack+)",
        )
    via = str(matching[0])
    generic = " (a generic code object)" if matching[0].processor.endswith("-generic") else ""
    return GfxFit("fits", via, f"{name} has code for {via}{generic}")
