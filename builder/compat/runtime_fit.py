"""The container runtime's verdict on an image's NVIDIA_REQUIRE_CUDA for a host, with its reason
(pure): the one driver rule `builder fit` (records, `--planned` images), `pull`, `doctor` and
`doctor --image` share, so none of them calls a fit what `docker run --gpus all` refuses.

compat/require.py judges the grammar; this module says what the judgement means for a person: the
clause that lets the image start (its `cuda>=` one, or a forward-compat brand/branch clause), the
driver to get when it is refused, and what to give when it depends on facts not given (--brand).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from builder.compat.facts import Compat
from builder.compat.require import Device, Host, Requirement, RequirementError, brands_for, driver_cuda, judge, parse
from builder.model.versions import release_tuple

Started = Literal["fits", "does not fit", "unknown"]


@dataclass(frozen=True)
class RuntimeFit:
    """Whether `docker run --gpus all` starts the image on the host: its NVIDIA_REQUIRE_CUDA judged."""

    status: Started
    reason: str
    forward_compat: bool = False  # started through a brand/branch clause, not the `cuda>=` one


def devices_of(gpus: Sequence[str | None], brands: Sequence[str | None]) -> tuple[Device, ...] | None:
    """The GPUs as the runtime judges them: compute capabilities with their brands (one brand for all
    when one is given); None when neither is known, one GPU of unknown arch when only a brand is."""
    if not gpus:
        return (Device(None, brands[0]),) if len(brands) == 1 and brands[0] else None
    if len(brands) == 1:
        return tuple(Device(cc, brands[0]) for cc in gpus)
    return tuple(Device(cc, brands[i] if i < len(brands) else None) for i, cc in enumerate(gpus))


def started(requirement: str, driver: str | None, devices: tuple[Device, ...] | None, compat: Compat) -> RuntimeFit:
    """The image's requirement judged for the host as the container runtime judges it: every GPU (its
    compute capability and brand) must satisfy one clause; what is not known makes it `unknown`."""
    try:
        parsed = parse(requirement)
    except RequirementError as exc:
        return RuntimeFit("does not fit", f"its NVIDIA_REQUIRE_CUDA is not valid ({exc}): the container runtime refuses it")
    brand = next(iter({d.brand for d in devices}), None) if devices and len({d.brand for d in devices}) == 1 else None
    judged = judge(parsed, Host(driver, devices), compat)
    wanted = parsed.cuda
    if judged.holds is True:
        reports = driver_cuda(driver, compat) if driver else None
        if judged.clause.startswith("cuda") or not parsed.forward_compat:
            return RuntimeFit("fits", f"driver {driver} reports CUDA {reports}, which meets NVIDIA_REQUIRE_CUDA {judged.clause}")
        return RuntimeFit(
            "fits",
            f"driver {driver} (CUDA {reports}) is below cuda>={wanted}, but the container runtime starts it on {brand or 'this'} GPUs "
            f"through its clause {judged.clause} (the nvidia/cuda base's forward-compat package)",
            forward_compat=True,
        )
    if judged.holds is False:
        reports = driver_cuda(driver, compat) if driver else None
        fix = f"update the driver to {_needed(wanted, compat)}" if wanted else "update the driver"
        others = f"; none of its {len(parsed.forward_compat)} brand/branch clauses matches" if parsed.forward_compat else ""
        return RuntimeFit(
            "does not fit",
            f"`docker run --gpus all` refuses it: driver {driver} reports CUDA {reports}, NVIDIA_REQUIRE_CUDA asks {judged.clause}{others}: {fix}",
        )
    if not driver:
        return RuntimeFit("unknown", f"driver not checked (NVIDIA_REQUIRE_CUDA asks {_summary(parsed)}; give --driver)")
    if "the GPU's product brand" in judged.unknown:
        brands = brands_for(parsed, driver)
        return RuntimeFit(
            "unknown",
            f"driver {driver} is below cuda>={wanted}; the container runtime starts it there only on GPUs of brand {', '.join(brands)} "
            "(forward compatibility): give --brand (nvidia-smi -q: Product Brand)",
        )
    return RuntimeFit("unknown", f"not checked: {', '.join(judged.unknown)} (NVIDIA_REQUIRE_CUDA {_summary(parsed)})")


def first_driver(requirement: str, compat: Compat) -> str | None:
    """The oldest driver the requirement starts on for any GPU: the one its `cuda>=X.Y` clause's CUDA
    shipped with (X.Y.0's, Table 3), as every driver of that branch reports X.Y; None when not known."""
    try:
        cuda = parse(requirement).cuda
    except RequirementError:
        return None
    return dict(compat.cuda_toolkits).get(f"{cuda}.0") if cuda and cuda.count(".") == 1 else None


def _needed(cuda: str, compat: Compat) -> str:
    """`R595 or newer (>= 595.45.04, the driver CUDA 13.2 shipped with)`: the first driver that reports `cuda`."""
    first = dict(compat.cuda_toolkits).get(f"{cuda}.0") if cuda.count(".") == 1 else None
    if first is None:
        return f"one that reports CUDA {cuda} or newer"
    return f"R{release_tuple(first)[0]} or newer (>= {first}, the driver CUDA {cuda} shipped with)"


def _summary(parsed: Requirement) -> str:
    first = ",".join(map(str, parsed.clauses[0])) if parsed.clauses else "nothing"
    more = len(parsed.clauses) - 1
    return first + (f" or one of {more} brand/branch clauses" if more else "")


def full_features(driver: str, release: str | None, release_driver: str | None) -> str:
    """What a started image still misses below the driver its CUDA release shipped with (one clause, or "")."""
    if release_driver is None or release_tuple(driver) >= release_tuple(release_driver):
        return ""
    return (
        f"; below {release_driver}, the driver of CUDA {release or 'its release'}, it runs by minor-version compatibility "
        "(PTX newer than the driver is not JIT-compiled)"
    )
