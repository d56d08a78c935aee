"""The labels `builder build` adds to every image at build time (the render-time ones are in the
Dockerfile): one definition for the engine's build and the bake file's targets."""

from __future__ import annotations

from builder.model.plan import ImageSpec

# On every image a build makes, from the Dockerfile's first step on (templates/Dockerfile.j2), so
# the untagged intermediate images of a failed or interrupted build can be found and removed.
BUILT_BY_LABEL = "io.builder.built-by"
BUILT_BY_VALUE = "builder"
HASH_LABEL = "io.builder.content-hash"  # what incremental builds, publish and the smoke checks compare
WORKSPACE_LABEL = "io.builder.workspace"  # which checkout built it (engine/ownership.py): what `builder clean` may remove
REVISION_LABEL = "org.opencontainers.image.revision"
BUILD_LABELS = (HASH_LABEL, REVISION_LABEL, WORKSPACE_LABEL)  # build_labels' keys: the engine appends a LABEL step for each

# What the Dockerfile's LABEL step says of the image (templates.labels); `builder doctor --image`
# reads them back (builder/fit/labelled.py).
ID_LABEL = "io.builder.id"
STACK_LABEL = "io.builder.stack"
FRAMEWORKS_LABEL = "io.builder.frameworks"  # name=version,name=version
PYTHON_LABEL = "io.builder.python"
ACCELERATOR_LABEL = "io.builder.accelerator"  # cuda | rocm | cpu
ACCELERATOR_VERSION_LABEL = "io.builder.accelerator-version"  # the base's CUDA / ROCm
CC_MIN_LABEL = "io.builder.cc-min"  # the lowest compute capability it runs on, measured from its locked wheels
RUNS_ON_LABEL = "io.builder.runs-on"  # every known compute capability it runs on (a set: "7.5 8.0 ... 12.0"), measured
VARIANTS_LABEL = "io.builder.variants"  # the same facts as wheel-variant properties ("nvidia :: sm_arch :: 90_real, ...")


def library_label(library: str) -> str:
    """The label of a CUDA library the lock pins (builder.lock.files.LIBRARIES: cudnn, cuda-runtime, ...)."""
    return f"io.builder.{library}"


def build_labels(spec: ImageSpec, revision: str, workspace: str = "") -> dict[str, str]:
    """`workspace`: the building checkout's identity (engine/ownership.py), when it is known."""
    return {HASH_LABEL: spec.content_hash, REVISION_LABEL: revision, **({WORKSPACE_LABEL: workspace} if workspace else {})}
