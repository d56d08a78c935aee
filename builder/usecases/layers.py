"""A canonical image's venv layer, made on the build host from its lock (matrix.yaml `canonical_layers`).

Each pin's wheel is the one the lock's target installs (lock/wheels.py `pick`), found on the lock's
own sources and fetched hash-checked (updates/wheelfiles.py), then kept in build/wheels/ by its
sha256, so a second build (or a second image with the same wheel) reads it from there. The layer
itself is lock/layer.py's: the same wheels give the same bytes (two layers for a lock with NVIDIA
library wheels: those below, the rest above).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Protocol

from builder.compat.rules import table
from builder.engine import staging
from builder.engine.image_build import LayerFailed
from builder.lock import children
from builder.lock.layer import (
    LAYER_NAME,
    NVIDIA_LAYER_NAME,
    SEED,
    LayerError,
    Layout,
    is_nvidia,
    line_layer,
    nvidia_layer,
    source_date_epoch,
    takes_layers,
)
from builder.lock.target import target_for
from builder.lock.wheel_tar import Layer, line_nvidia_layer, upper_layer, venv_layers
from builder.lock.wheels import IndexFile, Pin, pick, pins, target_tags
from builder.model.plan import ImageSpec
from builder.model.sources import BuildSettings
from builder.render.bake import network_file
from builder.updates.wheelfiles import FetchFailed, WheelFiles
from builder.usecases.measure import wheel_files
from builder.util.errors import UserError

NETWORK_FILE = "network.compose.yaml"  # beside the canonical contexts: bake's `-f` after the bake file


def canonical(spec: ImageSpec) -> bool:
    return spec.canonical is not None and spec.lock is not None


class WheelCache:
    """Wheels by sha256 in one folder: a local file is read where it is, a remote one downloaded once,
    also when two images of a `build -j N` need it at once (one waits for the other's download); a
    download is renamed into place from a name of this process's own (another run may fetch it too)."""

    def __init__(self, files: WheelFiles, folder: Path) -> None:
        self.files = files
        self.folder = folder
        self.fetched = 0
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, file: IndexFile, sha256: str) -> Path:
        if file.url.startswith("file:"):
            return self.files.fetch(file, sha256, self.folder)  # checked against the sha256 where it lies
        with self._guard:
            lock = self._locks.setdefault(sha256, threading.Lock())
        with lock:
            kept = self.folder / sha256 / file.filename
            if kept.is_file() and staging.sha256_of(kept) == sha256:
                return kept
            kept.parent.mkdir(parents=True, exist_ok=True)
            part = kept.with_name(f".{kept.name}.{os.getpid()}.part")
            with children.work_folder() as scratch:
                os.replace(self.files.fetch(file, sha256, scratch), part)
            os.replace(part, kept)
            self.fetched += 1
            return kept


def locked_wheels(spec: ImageSpec, cache: WheelCache, nvidia_only: bool = False) -> list[Path]:
    """The lock's wheels for its target, and the seed (pip), as local files checked against their
    sha256; with `nvidia_only`, its NVIDIA library wheels alone."""
    assert spec.lock is not None
    target = target_for(spec, table())
    tags = target_tags(target.python, target.platform)
    out = []
    chosen = [p for p in pins(spec.lock) if is_nvidia(p.name)] if nvidia_only else [*pins(spec.lock), Pin(SEED[0], SEED[1], (SEED[2],))]
    for pin in chosen:
        file = cache.files.first(pin.name, partial(pick, pin=pin, tags=tags))
        if file is None or file.sha256 is None:
            raise LayerFailed(
                f"{pin.name}=={pin.version}: no file the sources list with the lock's hashes is a wheel for {target.platform}, "
                f"Python {target.python}; check the index or re-lock"
            )
        out.append(cache.get(file, file.sha256))
    return out


class Maker(Protocol):
    """The engine's LayerMaker, whose layers are lock/wheel_tar.py's: they also write themselves to a
    file (bake's contexts, `stage_contexts`)."""

    def __call__(self, spec: ImageSpec, *, line: bool = False) -> dict[str, Layer]: ...


def layer_maker(specs: Sequence[ImageSpec], settings: BuildSettings, folder: Path) -> Maker | None:
    """What `builder build` calls for each image it builds whose context takes layer tars (`takes_layers`);
    None when the selection has none. The layers come back unwritten (lock/wheel_tar.py `Layer`):
    their bytes are made from the wheels in `folder` as the build's load copies them."""
    if not any(takes_layers(s) for s in specs):
        return None
    cache = WheelCache(wheel_files(specs, settings, takes_layers), folder)

    def make(spec: ImageSpec, *, line: bool = False) -> dict[str, Layer]:
        assert spec.lock is not None
        layout = Layout(spec.python, spec.python_bin)
        try:
            if line:
                return {NVIDIA_LAYER_NAME: line_nvidia_layer(layout, locked_wheels(spec, cache, nvidia_only=True))}
            wheels, epoch = locked_wheels(spec, cache), source_date_epoch(spec.lock)
            if line_layer(spec):  # its line's image holds the NVIDIA wheels: venv.tar is the rest
                return {LAYER_NAME: upper_layer(layout, wheels, epoch)}
            return venv_layers(layout, wheels, epoch, nvidia_layer(spec.lock))
        except (FetchFailed, LayerError) as exc:
            raise LayerFailed(str(exc)) from None

    return make


def stage_contexts(specs: Sequence[ImageSpec], files: Mapping[str, Mapping[str, bytes]], settings: BuildSettings, build_dir: Path) -> Path:
    """Complete build contexts of canonical images for bake: `folder/<id>/` holds the rendered files
    (`files[id]`: Dockerfile, requirements, the probe) and the layer tars made from the lock (venv.tar; nvidia.tar where it pins NVIDIA wheels), as `builder
    build` stages them; `folder/network.compose.yaml` builds them with the network off. Each folder
    is made aside and swapped in whole, so a failed layer leaves the previous context, never half a
    new one. Returns the folder (build/bake-canonical/)."""
    folder = build_dir / "bake-canonical"
    folder.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in specs if canonical(s)]
    make = layer_maker(chosen, settings, build_dir / "wheels")
    for spec in chosen:
        assert make is not None
        part, old, final = folder / f".{spec.id}.part", folder / f".{spec.id}.old", folder / spec.id
        for stale in (part, old):
            shutil.rmtree(stale, ignore_errors=True)
        part.mkdir()
        for name, data in files[spec.id].items():
            (part / name).write_bytes(data)
        try:
            for name, layer in make(spec).items():
                layer.write(part / name)
        except (LayerFailed, LayerError) as exc:
            shutil.rmtree(part, ignore_errors=True)
            raise UserError(f"{spec.id}: its venv layer cannot be made from images/{spec.id}/requirements.lock: {exc}") from None
        if final.exists():
            final.rename(old)
        part.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    # JSON is YAML: bake reads a compose file by its name
    (folder / NETWORK_FILE).write_text(json.dumps(network_file(chosen), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return folder
