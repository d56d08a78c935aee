"""CUDA driver facts for a base: minimum drivers and the NVIDIA_REQUIRE_CUDA value.

One number per fact: `min_driver` is the driver NVIDIA's Table 3 gives the CUDA release the image
carries, and that release is the lock's (its cudart wheel names the update: 13.0.96 is 13.0 Update 2),
not the minor's first one; `require_cuda` is what the container runtime enforces (compat/require.py).
"""

from __future__ import annotations

from packaging.version import Version

from builder.compat.facts import Compat
from builder.model.plan import Accelerator, Base
from builder.model.versions import mm


def toolkit_driver(cuda: str, compat: Compat) -> str | None:
    """Driver a CUDA release ships with (Table 3); x.y without a patch means x.y.0."""
    wanted = Version(cuda)
    for patch, driver in compat.cuda_toolkits:
        if Version(patch) == wanted:
            return driver
    return None


def update_release(cudart: str, compat: Compat) -> str | None:
    """The CUDA release that ships this cudart (compat.yaml cuda.toolkits `cudart`): 13.0.96 -> 13.0.2;
    None when the table does not list it (a newer update than it knows)."""
    wanted = Version(cudart)
    return next((release for release, shipped in compat.cuda_cudart if Version(shipped) == wanted), None)


def release_driver(cuda: str, compat: Compat, cudart: str | None = None) -> str | None:
    """The driver NVIDIA gives the release an image carries: the lock's cudart's update release when it
    has one; else `cuda` itself (an nvidia/cuda base's 12.8.1), read as X.Y.0 when it has no patch. None:
    the lock's runtime is an update the table does not list (no older release's driver stands in for it)."""
    if cudart is not None and len(Version(cudart).release) > 2 and mm(cudart) == mm(cuda):
        release = update_release(cudart, compat)
        return toolkit_driver(release, compat) if release is not None else None
    return toolkit_driver(cuda, compat)


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


def accelerator(base: Base, compat: Compat, version: str | None = None, cudart: str | None = None) -> Accelerator:
    """What a CUDA image declares: driver floors and NVIDIA_REQUIRE_CUDA of `version` (the CUDA its
    lock loads, builder.lock.claims), else of the base's CUDA; `cudart`, the runtime its lock pins,
    names the update release whose driver `min_driver` is."""
    if base.vendor != "cuda" or base.version is None:
        return Accelerator(kind=base.vendor, version=base.version)
    cuda = version or base.version
    return Accelerator(
        kind="cuda",
        version=cuda,
        min_driver=release_driver(cuda, compat, cudart),
        mvc_driver=mvc_driver(cuda, compat),
        require_cuda=require_cuda(cuda, compat),
    )
