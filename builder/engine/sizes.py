"""What an image weighs, and whether anything in it is there twice.

An image is its base, its venv (the layer of the one RUN step that creates /opt/venv and installs
into it; `COPY --from=build /opt/venv` in images of older versions' two-stage Dockerfiles) and a
few kilobytes of glue (the user, the probe, the requirements files). `ratio` = image / (venv + base): 1.0 means nothing is duplicated,
such as a second copy of CUDA next to the one the wheels bring. Read from the engine's layer
history, so measuring costs one API call and runs no container.

Across a line (the images of one base, Python and platform: `line_shares`), an image's bytes above
its base are `shared` (layers whose diff ID another image of the line holds too: a canonical CUDA
image's NVIDIA layer, lock/layer.py) or its `own` (pulled for it alone). Each layer's size is read
from the history: its entries that wrote bytes, oldest first, pair with the diff IDs that are not
the empty layer's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from builder.engine.port import ContainerSpec, Engine, EngineFault, Layer

VENV_LAYER = re.compile(
    r"-m venv /opt/venv(?=[;\s]|$)"  # the install step (templates/Dockerfile.j2)
    r"|COPY .*(?: in |\s)/opt/venv\s*(?:# buildkit)?\s*$"  # older versions' final COPY, classic builder and BuildKit
    r"|ADD (?:file:[0-9a-f]+ in /|(?:venv|nvidia)\.tar /)\s*(?:# buildkit)?\s*$"  # a canonical image's venv.tar and nvidia.tar (docs/reproducible.md)
    r"|^ADD nvidia\.tar / \(builder: the NVIDIA wheels of CUDA line \S+\)$"  # a CUDA line's NVIDIA layer (engine/line_image.py)
)
MB = 1e6
# the diff ID of a layer that holds nothing (1024 zero bytes): a step that wrote no file
EMPTY_LAYER = "sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"


@dataclass(frozen=True)
class Sizes:
    """Bytes, as the engine counts them (uncompressed layers)."""

    image: int
    venv: int
    base: int

    @property
    def ratio(self) -> float:
        return round(self.image / (self.venv + self.base), 4) if self.venv + self.base else 0.0

    def to_json(self) -> dict[str, float]:
        return {
            "image_mb": round(self.image / MB, 1),
            "venv_mb": round(self.venv / MB, 1),
            "base_mb": round(self.base / MB, 1),
            "ratio": self.ratio,
        }


def venv_bytes(history: Sequence[Layer]) -> int:
    """The size of the layer that wrote /opt/venv (0 when the image has none)."""
    return sum(layer.size for layer in history if VENV_LAYER.search(layer.created_by))


def measure(engine: Engine, tag: str, base_tag: str) -> Sizes | None:
    """Sizes of a built image and of the base it was built FROM; None when either is gone."""
    try:
        image = engine.inspect_image(tag)
        base = engine.inspect_image(base_tag)
        history = engine.history(tag)
    except EngineFault:  # an image removed meanwhile has no size; the build result says so
        return None
    if image is None or base is None:
        return None
    return Sizes(image=image.size, venv=venv_bytes(history), base=base.size)


@dataclass(frozen=True)
class Layers:
    """An image's layers as (diff ID, bytes), base first, and how many of them are its base's."""

    sized: tuple[tuple[str, int], ...]
    base: int


def sized_layers(diff_ids: Sequence[str], history: Sequence[Layer]) -> tuple[tuple[str, int], ...] | None:
    """Each non-empty layer's diff ID with its size, base first: the history's entries that wrote
    bytes (newest first, as the engine lists them) paired in order with the diff IDs that are not
    EMPTY_LAYER; None when they do not pair up (a history that does not say)."""
    written = [layer.size for layer in reversed(history) if layer.size > 0]
    ids = [d for d in diff_ids if d != EMPTY_LAYER]
    if len(written) != len(ids):
        return None
    return tuple(zip(ids, written, strict=True))


def line_shares(images: Mapping[str, Layers]) -> dict[str, tuple[int, int]]:
    """For each image of one line: (shared, own) bytes above its base, `shared` being the layers
    whose diff ID another image of the line holds too (above its own base or in it)."""
    holders: dict[str, set[str]] = {}
    for name, layers in images.items():
        for diff_id, _ in layers.sized:
            holders.setdefault(diff_id, set()).add(name)
    out = {}
    for name, layers in images.items():
        above = layers.sized[layers.base :]
        shared = sum(size for diff_id, size in above if holders[diff_id] - {name})
        out[name] = (shared, sum(size for _, size in above) - shared)
    return out


def layers_of(engine: Engine, tag: str, base_tag: str) -> Layers | None:
    """The image's sized layers and its base's count; None when either is gone or the history does not pair up."""
    try:
        image, base = engine.inspect_image(tag), engine.inspect_image(base_tag)
        history = engine.history(tag) if image is not None else []
    except EngineFault:
        return None
    if image is None or base is None or tuple(image.diff_ids[: len(base.diff_ids)]) != tuple(base.diff_ids):
        return None
    sized = sized_layers(image.diff_ids, history)
    if sized is None:
        return None
    return Layers(sized, len([d for d in base.diff_ids if d != EMPTY_LAYER]))


# Sums what each installed distribution's RECORD lists, as found on disk (run inside the image).
_PER_DISTRIBUTION = r"""
import importlib.metadata as m, json, os
out = {}
for d in m.distributions():
    total = 0
    for f in d.files or []:
        try:
            total += os.lstat(d.locate_file(f)).st_size
        except OSError:
            pass
    name = d.metadata["Name"].lower().replace("_", "-")
    out[name] = out.get(name, 0) + total
print(json.dumps(out))
"""


def per_distribution(engine: Engine, tag: str, timeout_s: int = 120) -> dict[str, int]:
    """Installed bytes per distribution in the image's venv, read in a locked-down container."""
    command = ("timeout", "-s", "KILL", str(timeout_s), "python", "-c", _PER_DISTRIBUTION)
    with engine.container(ContainerSpec(image=tag, command=command, tmpfs={"/tmp": "size=16m"})) as container:
        container.start()
        status = container.wait(timeout=timeout_s + 30)
        output = container.logs().decode(errors="replace")
    if status != 0:
        raise RuntimeError(f"measuring {tag} failed (exit {status}): {output[-300:]}")
    data: dict[str, int] = json.loads(output)
    return data


CUDA_DISTRIBUTION = re.compile(r"^(nvidia-|cuda-)|-cuda\d+")  # nvidia-cudnn-cu13, cuda-bindings, jax-cuda13-plugin, cupy-cuda13x


def explain_difference(cpu: dict[str, int], gpu: dict[str, int], framework: str) -> dict[str, int]:
    """Where the CUDA image's extra bytes are: the CUDA wheels, the framework's own distributions
    (its GPU kernels; tensorflow-cpu in the CPU image counts as tensorflow), the rest."""
    names = set(cpu) | set(gpu)
    delta = {name: gpu.get(name, 0) - cpu.get(name, 0) for name in names}
    cuda = sum(v for n, v in delta.items() if CUDA_DISTRIBUTION.search(n))
    own = sum(v for n, v in delta.items() if (n == framework or n.startswith(f"{framework}-")) and not CUDA_DISTRIBUTION.search(n))
    return {"cuda_wheels": cuda, "framework": own, "other": sum(delta.values()) - cuda - own}
