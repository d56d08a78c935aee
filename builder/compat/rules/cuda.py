"""CUDA driver facts for a base: minimum drivers and the NVIDIA_REQUIRE_CUDA value."""

from __future__ import annotations

from packaging.version import Version

from builder.compat.facts import Compat
from builder.compat.versions import mm
from builder.records import Accelerator, Base


def toolkit_driver(cuda: str, compat: Compat) -> str | None:
    """Driver a CUDA release ships with (Table 3); x.y without a patch means x.y.0."""
    wanted = Version(cuda)
    for patch, driver in compat.cuda_toolkits:
        if Version(patch) == wanted:
            return driver
    return None


def mvc_driver(cuda: str, compat: Compat) -> str | None:
    """Minor-version-compatibility floor of the CUDA major."""
    return dict(compat.mvc_floor).get(str(mm(cuda)[0]))


def require_cuda(cuda: str, compat: Compat) -> str:
    """`cuda>=X.Y` plus the brand/branch clauses the official image carries, when known."""
    major, minor = mm(cuda)
    clauses = [f"cuda>={major}.{minor}"]
    branches = dict(compat.require_branches).get(str(Version(cuda)))
    if branches:
        brands = next(names for until, names in compat.brands if Version(cuda) <= Version(until))
        for branch in branches:
            clauses += [f"brand={brand},driver>={branch},driver<{branch + 1}" for brand in brands]
    return " ".join(clauses)


def accelerator(base: Base, compat: Compat, version: str | None = None) -> Accelerator:
    """What a CUDA image declares: driver floors and NVIDIA_REQUIRE_CUDA of `version` (the CUDA its
    lock loads, builder.lock.claims), else of the base's CUDA."""
    if base.vendor != "cuda" or base.version is None:
        return Accelerator(kind=base.vendor, version=base.version)
    cuda = version or base.version
    return Accelerator(
        kind="cuda",
        version=cuda,
        min_driver=toolkit_driver(cuda, compat),
        mvc_driver=mvc_driver(cuda, compat),
        require_cuda=require_cuda(cuda, compat),
    )
