"""What an image says about its CUDA, read from its lock (pure).

The rules decide an image from tables; once `builder lock` has pinned its wheels, the lock knows
better. Every claim an image makes (NVIDIA_REQUIRE_CUDA and the driver floors, the cuDNN of the
plan JSON and labels) is computed here from the versions the lock pins, with the table facts only
for what a lock cannot say (the driver of a CUDA release); which GPUs it runs on is measured from
the lock's wheels themselves (images/<id>/fit.json, builder/model/locked_fit.py). And a lock whose CUDA wheels
leave the image's CUDA minor is refused here, unless matrix.yaml's `cuda_exceptions` names it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from builder.compat import cuda_components, gpu_arch
from builder.compat.facts import Compat
from builder.compat.rules import table
from builder.compat.rules.cuda import accelerator
from builder.lock.files import libraries
from builder.model.plan import ImageSpec, Lock
from builder.model.versions import cc_tuple
from builder.util.errors import UserError


def base_minor(spec: ImageSpec) -> str | None:
    if spec.base.vendor != "cuda" or spec.base.version is None:
        return None
    return cuda_components.minor_of(spec.base.version)


def declared_cuda(spec: ImageSpec, lock: Lock | None) -> str | None:
    """The CUDA the image declares: the base's, unless its lock's runtime wheels load another minor
    (an image matrix.yaml's `cuda_exceptions` lets do so); then that minor. An exception's image
    without a lock (its index cannot be reached) declares the CUDA its wheel variant was built for,
    the one table fact that says what it will load."""
    minor = base_minor(spec)
    if minor is None:
        return spec.base.version
    loaded = cuda_components.lock_cuda(lock.pins) if lock is not None else None
    if loaded is None and lock is None and spec.cuda_exception is not None:
        loaded = next((i.built_cuda for i in spec.installs if i.built_cuda and "." in i.built_cuda), None)
    return spec.base.version if loaded is None or loaded == minor else loaded


def refusals(spec: ImageSpec, lock: Lock, compat: Compat) -> list[str]:
    """Why `builder lock` must not write this lock (empty when its CUDA wheels are the image's)."""
    minor = base_minor(spec)
    if minor is None or spec.cuda_exception is not None:
        return []
    return cuda_components.problems(lock.pins, minor, compat.toolkit_components)


def cc_floor(spec: ImageSpec, compat: Compat) -> str | None:
    """The lowest compute capability the image runs on: the highest of its wheels' kernel floors
    (gpu_arch.yaml) and of what its locked cuDNN still supports (cuda.cudnn_cc)."""
    floors = []
    for install in spec.installs:
        row = gpu_arch.lookup(install.framework, install.variant, install.version)
        if row is not None:
            floors.append(row.cc_min)
    cudnn = libraries(spec.lock).get("cudnn") if spec.lock else None
    if cudnn is not None:
        dropped = cuda_components.cudnn_floor(cudnn, compat.cudnn_cc)
        if dropped is not None:
            floors.append(dropped)
    return max(floors, key=cc_tuple) if floors else None


def keep_older_gpus(spec: ImageSpec, compat: Compat) -> ImageSpec:
    """matrix.yaml's `keep_older_gpus` choice for a CUDA image: its cuDNN is held below the release
    that dropped GPU generations (the other choice, the default, is the newest cuDNN with the
    compute-capability floor following it)."""
    minor = base_minor(spec)
    line = cuda_components.older_gpus_cudnn(minor, compat.cudnn_cc) if minor else None
    if line is None or line in spec.constraints:
        return spec
    return replace(spec, constraints=(*spec.constraints, line))


def with_lock_claims(spec: ImageSpec, compat: Compat) -> ImageSpec:
    """The spec whose claims follow its lock: the accelerator of the CUDA it loads, each
    framework's cuDNN as locked, and a warning when the lock's CUDA is not the base's."""
    if spec.base.vendor != "cuda" or (spec.lock is None and spec.cuda_exception is None):
        return spec
    cuda = declared_cuda(spec, spec.lock)
    pinned = libraries(spec.lock) if spec.lock else {}
    cudnn = pinned.get("cudnn")
    installs = tuple(replace(i, cudnn=cudnn) if i.cudnn and cudnn else i for i in spec.installs)
    warnings = spec.warnings
    if cuda != spec.base.version:
        warnings += (
            f"{spec.id}: its wheels load CUDA {cuda} on base {spec.base.name} (CUDA {spec.base.version}), two CUDA user spaces: "
            f"matrix.yaml cuda_exceptions: {spec.cuda_exception}",
        )
    return replace(spec, accelerator=accelerator(spec.base, compat, cuda, pinned.get("cuda-runtime")), installs=installs, warnings=warnings)


def refuse_other_cuda(matrix_path: str, specs: Sequence[ImageSpec], locks: Mapping[str, Lock]) -> None:
    """Stop `builder lock` before it writes anything when a new lock's CUDA wheels leave its
    image's CUDA minor: one line naming the image, the first wheel and the two ways out."""
    for spec in specs:
        found = refusals(spec, locks[spec.id], table())
        if found:
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise UserError(
                f"{spec.id}: its lock would carry a second CUDA: {found[0]}{more}; nothing written. Keep its wheels on "
                f"CUDA {base_minor(spec)} (builder/compat/data/compat.yaml cuda.toolkit_components) or name the image under "
                "cuda_exceptions: with a reason",
                matrix_path,
                spec.base.line,
            )
