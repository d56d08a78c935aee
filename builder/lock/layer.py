"""A locked image's venv as one canonical layer, made on the build host from the lock's wheels.

The same lock gives the same bytes, on any host, in any folder, under any umask: the wheels are
installed by PyPA's `installer` (what pip does, without running the image's Python) into the
image's venv layout, kept in memory, and written as a tar straight from the wheels, entries sorted,
whose mtimes are the lock's SOURCE_DATE_EPOCH, owned by 0:0 with no user or group names, and whose
modes are normalized (0755 for directories and anything executable, 0644 otherwise). No file is
byte-compiled: the image runs with PYTHONDONTWRITEBYTECODE and a read-only root, so the first
import of each module compiles it in memory (docs/reproducible.md says what that costs).

A CUDA image's venv is two such layers: the NVIDIA library wheels (`nvidia_layer`: the lock's
`nvidia-*` pins, each checked to install nothing outside `site-packages/nvidia/` and its own
.dist-info) in NVIDIA_LAYER_NAME, right on the base, and the rest (the framework, its Python
dependencies, the skeleton, the seed) in LAYER_NAME above it. The NVIDIA layer names nothing of the
image or its lock: the same NVIDIA wheels on the same Python give the same bytes (its mtimes are
EPOCH_FLOOR), so the images of a CUDA line whose NVIDIA pins agree share it.

This module says what goes in which layer and what the layers are called; lock/wheel_tar.py makes
them (PyPA's installer and the tar writer, imported only by a build that makes layers: every other
command starts without them).
"""

from __future__ import annotations

import functools
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name

from builder.model.plan import ImageSpec, Lock

VENV = PurePosixPath("/opt/venv")  # the venv every image's Dockerfile puts on PATH (templates/Dockerfile.j2)
LAYER_NAME = "venv.tar"  # in the build context, added by the Dockerfile: never committed in images/
NVIDIA_LAYER_NAME = "nvidia.tar"  # a CUDA image's NVIDIA library wheels, added below LAYER_NAME
NVIDIA_PREFIX = "nvidia-"  # NVIDIA's library wheels (nvidia-cublas, nvidia-cudnn-cu13, ...): all install under nvidia/
# 2000-01-01T00:00:00Z: the floor of every lock's SOURCE_DATE_EPOCH (see source_date_epoch)
EPOCH_FLOOR = 946_684_800
# pip, for the smoke test's `python -m pip check`: a lock pins what the image needs, not the tool,
# so the venv is seeded with this one wheel, by its sha256 (PyPI's pip 25.0.1, py3-none-any)
SEED = ("pip", "25.0.1", "c46efd13b6aa8279f33f2864459c8ce587ea6a1a59ee20de055868d8f7688f7f")


class LayerError(Exception):
    """A wheel that cannot be installed, or a layer that would carry a host path (one line)."""


@dataclass(frozen=True)
class Layout:
    """Where the venv lives in the image and which interpreter it runs on."""

    python: str  # "3.11"
    python_bin: str  # the base's interpreter, e.g. python3.11 (in /usr/bin)
    venv: PurePosixPath = VENV

    @property
    def site_packages(self) -> PurePosixPath:
        return self.venv / "lib" / f"python{self.python}" / "site-packages"

    def scheme(self) -> dict[str, str]:
        """installer's scheme: the image's own paths (nothing is installed on the host: lock/wheel_tar.py)."""
        site = str(self.site_packages)
        return {
            "purelib": site,
            "platlib": site,
            "headers": str(self.venv / "include" / "site" / f"python{self.python}"),
            "scripts": str(self.venv / "bin"),
            "data": str(self.venv),
        }


def source_date_epoch(lock: Lock) -> int:
    """The lock's SOURCE_DATE_EPOCH: EPOCH_FLOOR plus the first 28 bits of the sha256 of the lock's
    text (a date between 2000 and 2008). It names the lock, not a moment: the same lock always gives
    the same epoch, and a changed lock another one."""
    return EPOCH_FLOOR + int(hashlib.sha256(lock.text.encode()).hexdigest()[:7], 16)


@functools.lru_cache(maxsize=4096)  # pure: asked of every pin of every lock, each time a plan is decided
def is_nvidia(name: str) -> bool:
    """Whether a lock's package goes in the NVIDIA layer: NVIDIA's library wheels, by their name
    (`nvidia-*`). cuda-toolkit (a metapackage with no files), cuda-bindings, cuda-core and
    cuda-pathfinder (NVIDIA's Python packages, pinned by the framework) stay in the venv layer."""
    return str(canonicalize_name(name)).startswith(NVIDIA_PREFIX)


def nvidia_layer(lock: Lock) -> bool:
    """Whether the lock's venv is two layers (it pins NVIDIA library wheels): the Dockerfile and the
    layer maker both ask this, so the context holds exactly the tars the Dockerfile adds."""
    return any(is_nvidia(name) for name, _ in lock.pins)


def line_layer(spec: ImageSpec) -> bool:
    """Whether an image builds FROM its CUDA line's NVIDIA image (matrix.yaml `line_layers`,
    lock/line.py, engine/line_image.py): a member whose line has a current lock and that pins NVIDIA
    wheels. The rest of its lock is then a RUN install, or, when it is canonical too, venv.tar alone
    (the line image holds its nvidia.tar). Render, build and the layer maker ask this one question."""
    return spec.line_image is not None and spec.lock is not None and nvidia_layer(spec.lock)


def own_nvidia_layer(spec: ImageSpec) -> bool:
    """Whether a canonical image adds its own nvidia.tar below its venv.tar: it pins NVIDIA wheels and
    is on no CUDA line (a line's member finds them in its FROM)."""
    return spec.canonical is not None and spec.lock is not None and nvidia_layer(spec.lock) and not line_layer(spec)


def from_ref(spec: ImageSpec) -> str:
    """What the image's FROM names: its CUDA line's NVIDIA image, else its base."""
    return spec.line_image if line_layer(spec) and spec.line_image else spec.base.from_ref


def takes_layers(spec: ImageSpec) -> bool:
    """Whether the layer maker makes tars for it: a canonical image (venv.tar, and nvidia.tar where it
    pins NVIDIA wheels and is on no line, in its context) or a CUDA line's member (nvidia.tar, for its
    line's image)."""
    return (spec.canonical is not None and spec.lock is not None) or line_layer(spec)


def layer_sha256(data: bytes | Path) -> str:
    digest = hashlib.sha256()
    if isinstance(data, Path):
        with data.open("rb") as handle:
            while chunk := handle.read(1 << 22):
                digest.update(chunk)
    else:
        digest.update(io.BytesIO(data).getvalue())
    return digest.hexdigest()
