"""The driver a CUDA runtime needs, and whether a host's driver has it (pure).

Whether the container runtime starts an image at all is its NVIDIA_REQUIRE_CUDA's to say
(compat/require.py `started`, judged first); this module says what the CUDA runtime inside needs once
it runs:

Minor-version compatibility: a CUDA X.y runtime runs on any driver of the X.x floor (Table 2 of
the toolkit release notes, compat.yaml `cuda.mvc_floor`), never below the driver CUDA X.0 shipped
with (Table 3, `cuda.toolkits`: a driver older than the major's first release cannot know it). So
CUDA 12.x runs on >= 525.60.13 and 13.x on >= 580.65.06. Under that rule PTX of a newer ISA than
the driver knows is refused, so JIT needs the driver of the CUDA release that introduced the PTX
ISA (compat/ptx_isa.py). Below the floor, data-center GPUs have a way out: NVIDIA's forward-compat
package (cuda-compat-X-Y) in the image or on the host; consumer GPUs do not.
"""

from __future__ import annotations

from dataclasses import dataclass

from builder.compat import ptx_isa
from builder.compat.facts import Compat
from builder.compat.rules.cuda import mvc_driver, toolkit_driver
from builder.model.versions import mm, release_tuple


@dataclass(frozen=True)
class DriverFloor:
    cuda: str  # the runtime's major.minor, e.g. "13.0"
    floor: str  # the oldest driver that runs it (minor-version compatibility)
    full: str | None  # the driver its toolkit shipped with (every feature, JIT of its own PTX); None when unknown


@dataclass(frozen=True)
class DriverFit:
    fits: bool
    reason: str


def floor_for(cuda: str, compat: Compat) -> DriverFloor | None:
    """The driver floor of a CUDA runtime version; None when the tables know neither number."""
    major, minor = mm(cuda)
    candidates = [d for d in (mvc_driver(cuda, compat), toolkit_driver(f"{major}.0.0", compat)) if d is not None]
    if not candidates:
        return None
    return DriverFloor(f"{major}.{minor}", max(candidates, key=release_tuple), toolkit_driver(f"{major}.{minor}.0", compat))


def forward_compat(cuda: str) -> str:
    major, minor = mm(cuda)
    return f"cuda-compat-{major}-{minor}"


def check(driver: str, floor: DriverFloor) -> DriverFit:
    """Is `driver` (as nvidia-smi reports it) new enough for the runtime? One line either way."""
    if release_tuple(driver) < release_tuple(floor.floor):
        return DriverFit(
            False,
            f"driver {driver} < {floor.floor} needed by CUDA {floor.cuda}: update the driver, or on a data-center GPU "
            f"install NVIDIA's forward-compat package {forward_compat(floor.cuda)} (not on GeForce)",
        )
    if floor.full is not None and release_tuple(driver) < release_tuple(floor.full):
        return DriverFit(
            True,
            f"driver {driver} >= {floor.floor} needed by CUDA {floor.cuda} (minor-version compatibility; "
            f"{floor.full} for every feature and newer PTX)",
        )
    return DriverFit(True, f"driver {driver} >= {floor.floor} needed by CUDA {floor.cuda}")


def ptx_driver(isa: str, compat: Compat) -> tuple[str, str] | None:
    """(CUDA release, its driver) the JIT of PTX ISA `isa` needs; None when either table lacks it.

    The driver is that of the first toolkit release at or after the ISA's CUDA (PTX ISA 8.6 came
    with CUDA 12.7, which was never released: 12.8.0's driver is the first that has it)."""
    cuda = ptx_isa.cuda_for(isa)
    if cuda is None:
        return None
    wanted = release_tuple(cuda)
    for patch, driver in compat.cuda_toolkits:
        if release_tuple(patch) >= wanted:
            return cuda, driver
    return None


def check_ptx(driver: str, isa: str, compat: Compat) -> DriverFit:
    """Can `driver` JIT-compile PTX of ISA `isa`? Unknown ISA versions are said to be unchecked, not refused."""
    needed = ptx_driver(isa, compat)
    if needed is None:
        return DriverFit(True, f"PTX ISA {isa} is not in the PTX table: its driver floor is not checked")
    cuda, floor = needed
    if release_tuple(driver) < release_tuple(floor):
        return DriverFit(False, f"driver {driver} < {floor} needed to JIT PTX ISA {isa} (CUDA {cuda}): update the driver")
    return DriverFit(True, f"driver {driver} JIT-compiles PTX ISA {isa} (>= {floor})")
