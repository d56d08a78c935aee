"""The labels `builder build` adds to every image at build time (the render-time ones are in the
Dockerfile): one definition for the engine's build and the bake file's targets."""

from __future__ import annotations

from collections.abc import Iterable

from builder.model.plan import ImageSpec
from builder.spec import grammar

# On every image a build makes, from the Dockerfile's first step on (templates/Dockerfile.j2), so
# the untagged intermediate images of a failed or interrupted build can be found and removed.
BUILT_BY_LABEL = "io.builder.built-by"
BUILT_BY_VALUE = "builder"
LINE_LABEL = "io.builder.line"  # a CUDA line's NVIDIA image (engine/line_image.py): the line it holds the NVIDIA wheels of
HASH_LABEL = "io.builder.content-hash"  # what incremental builds, publish and the smoke checks compare
WORKSPACE_LABEL = "io.builder.workspace"  # which checkout built it (engine/ownership.py): what `builder clean` may remove
OCI_PREFIX = "org.opencontainers.image."
REVISION_LABEL = f"{OCI_PREFIX}revision"
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
# The OCI annotations the Dockerfile sets (with REVISION_LABEL, which the build adds); the smoke checks
# require each on every image.
TITLE_LABEL = f"{OCI_PREFIX}title"
VERSION_LABEL = f"{OCI_PREFIX}version"  # the frameworks label's value
SOURCE_LABEL = f"{OCI_PREFIX}source"
BASE_NAME_LABEL = f"{OCI_PREFIX}base.name"
OCI_LABELS = (TITLE_LABEL, VERSION_LABEL, SOURCE_LABEL, REVISION_LABEL)


def frameworks_label(frameworks: Iterable[tuple[str, str]]) -> str:
    """FRAMEWORKS_LABEL's value: `torch=2.14.1,numpy=2.4.6`."""
    return ",".join(f"{name}={version}" for name, version in frameworks)


def parse_frameworks_label(value: str, limit: int) -> tuple[tuple[str, str], ...] | None:
    """FRAMEWORKS_LABEL's value as (name, version) pairs, in its order; None when it is not
    name=version,... with names and versions this builder writes, or lists more than `limit`."""
    pairs = []
    for item in value.split(",")[: limit + 1]:
        name, eq, version = item.partition("=")
        if not eq or not grammar.NAME.fullmatch(name) or not grammar.is_version(version):
            return None
        pairs.append((name, version))
    return tuple(pairs) if len(pairs) <= limit else None


def library_label(library: str) -> str:
    """The label of a CUDA library the lock pins (builder.lock.files.LIBRARIES: cudnn, cuda-runtime, ...)."""
    return f"io.builder.{library}"


def build_labels(spec: ImageSpec, revision: str, workspace: str = "") -> dict[str, str]:
    """`workspace`: the building checkout's identity (engine/ownership.py), when it is known."""
    return {HASH_LABEL: spec.content_hash, REVISION_LABEL: revision, **({WORKSPACE_LABEL: workspace} if workspace else {})}
