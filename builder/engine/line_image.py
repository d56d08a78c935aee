"""A CUDA line's NVIDIA image: the line's base plus one layer of the line's NVIDIA wheels (lock/line.py).

Every member of a line (matrix.yaml `line_layers`) names it in its FROM (`builder-line/<line>:<16 hex of
the line lock>`), so every member is on the same layer by construction, and an engine, a registry
or a `docker pull` holds it once for the whole line. `builder build` makes it before the members,
once per line lock. A member then sends no NVIDIA bytes in its context and extracts none: its RUN
installs the rest of its lock and finds the NVIDIA wheels installed.

The image is loaded, not built: a build (`ADD nvidia.tar /`) uploaded the 3.6 GB tar as a context,
extracted it, and had the engine tar the layer again to commit it (38-43 s here, against 33-34 s
loaded: docs/reproducible.md), and its config carried the build's clock, so its image ID changed with
every build. Here the layer is the tar the host makes
from the wheels (lock/wheel_tar.py `line_nvidia_layer`: sorted, mtimes EPOCH_FLOOR, 0:0; its bytes
made from the wheels as the archive copies them, never a file), and the image is a `docker load` archive of the base's own
layers (from a `docker save` of the base: the archive is whole on its own) and that tar, with a
config made here from the base's (engine/line_config.py): one more diff ID, the sha256 of the tar, one more
history entry, the builder's labels, and the base's own `created` for both dates (the base's is a
fixed date: the mirror state of a bootstrapped base; EPOCH_FLOOR, 2000-01-01, would date the image
and its history before its own base). Written as sorted compact JSON, the config's sha256 is the image
ID: the same line lock on the same base gives the same image ID on any engine, and the layer's diff
ID is computable from the lock's wheels without Docker. The archive is streamed into the load as it
is written (engine port `load_stream`: never a file) and tagged only once whole (an engine tags a load
when it is complete; a cut archive loads nothing); an engine that names the image otherwise is
refused and the tag taken off it.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from builder.engine.image_build import BuildFailed, Run, tag_lock
from builder.engine.line_config import config_bytes, line_config
from builder.engine.port import Engine, EngineFault
from builder.engine.reproducible import LayerSource, NotAnArchive, add_layer, archive_json, writing
from builder.lock.layer import EPOCH_FLOOR, NVIDIA_LAYER_NAME
from builder.model.plan import ImageSpec

if TYPE_CHECKING:
    from _typeshed import SupportsRead

BASE_ARCHIVE = "base.tar"  # the base as `docker save` wrote it, in the staging folder
SAVED_BASE = "the saved base"  # how its errors name the base's archive


@dataclass(frozen=True)
class SavedImage:
    """The one image of a `docker save` archive: its config as saved and its layer files, base first."""

    config: dict[str, Any]
    layers: tuple[str, ...]  # member names of the archive, in the order of the config's diff IDs


def read_saved(src: tarfile.TarFile) -> SavedImage:
    """The image of a `docker save` archive (docker-archive, or the OCI layout with its manifest.json)."""
    manifest = archive_json(src, "manifest.json", SAVED_BASE)
    if not isinstance(manifest, list) or len(manifest) != 1 or not isinstance(manifest[0], dict):
        raise NotAnArchive(f"the saved base's manifest.json names {len(manifest) if isinstance(manifest, list) else 'no'} images, not one")
    config = archive_json(src, str(manifest[0].get("Config")), SAVED_BASE)
    layers = manifest[0].get("Layers")
    diff_ids = config.get("rootfs", {}).get("diff_ids") if isinstance(config, dict) else None
    if not isinstance(layers, list) or not isinstance(diff_ids, list) or len(layers) != len(diff_ids) or not layers:
        raise NotAnArchive("the saved base's manifest.json and config do not name the same layers")
    return SavedImage(config, tuple(str(name) for name in layers))


def line_archive(saved_base: Path, layer: LayerSource, out: Path | IO[bytes], tag: str, line: str) -> str:
    """`out` (a file, or a load's stream): a `docker load` archive of the base's layers, `layer` on
    top and the line's config, named `tag`; returns the image ID it loads as (the sha256 of the
    config bytes). The layer is hashed as it is copied (its bytes made from the wheels as they go):
    its diff ID costs no second read of its gigabytes."""
    with tarfile.open(saved_base) as src, writing(out, tarfile.GNU_FORMAT) as dst:
        base = read_saved(src)
        if NVIDIA_LAYER_NAME in base.layers:
            raise NotAnArchive(f"the saved base has a file {NVIDIA_LAYER_NAME} among its layers")
        for name in dict.fromkeys(base.layers):  # a layer listed twice is one file
            _copy(src, dst, name)
        diff_id = add_layer(dst, layer, NVIDIA_LAYER_NAME, EPOCH_FLOOR)
        body = config_bytes(line_config(base.config, line, diff_id))
        image_id = hashlib.sha256(body).hexdigest()
        _add(dst, f"{image_id}.json", io.BytesIO(body), len(body))
        manifest = [{"Config": f"{image_id}.json", "RepoTags": [tag], "Layers": [*base.layers, NVIDIA_LAYER_NAME]}]
        entry = json.dumps(manifest, separators=(",", ":")).encode()
        _add(dst, "manifest.json", io.BytesIO(entry), len(entry))
    return f"sha256:{image_id}"


def ensure(run: Run, engine: Engine, spec: ImageSpec) -> None:
    """The line image `spec` (a member) builds FROM, made unless the engine has it; BuildFailed says why not."""
    tag = spec.line_image
    if tag is None or spec.line is None:
        raise BuildFailed(f"{spec.id} is not on a CUDA line with a current lock")
    with tag_lock(run.lock_dir, tag, run.stop):
        if engine.inspect_image(tag) is not None:
            return
        if run.layers is None:
            raise BuildFailed(f"{spec.id}: this build cannot make the NVIDIA layer of its line {spec.line}")
        folder = run.staging_root / f"line-{spec.line}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        run.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = run.log_dir / f"line-{spec.line}.log"
        error = None
        try:
            with log_path.open("w", encoding="utf-8", buffering=1) as log:

                def say(text: str) -> None:
                    log.write(text + "\n")
                    if run.on_line:
                        run.on_line(f"line {spec.line}", text)

                _make(run, engine, spec, folder, say)
        except BuildFailed as exc:
            error = exc.message
        except Exception as exc:  # noqa: BLE001 - a wheel that cannot be fetched or installed: the members cannot build
            error = " ".join(str(exc).split()) or type(exc).__name__
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if error is not None:
            raise BuildFailed(f"the NVIDIA image of its line {spec.line}: {error} (log: {log_path})")


def _make(run: Run, engine: Engine, spec: ImageSpec, folder: Path, say: Callable[[str], None]) -> None:
    """The base saved in `folder`, the archive streamed into the load as the line image, its ID checked; BuildFailed says why not."""
    assert run.layers is not None and spec.line_image is not None and spec.line is not None  # ensure checked them
    tag = spec.line_image

    def step(what: str) -> float:
        if run.stop.is_set():
            raise BuildFailed(f"interrupted before {what}")
        return time.monotonic()

    started = step("the NVIDIA layer")
    layer = run.layers(spec, line=True)[NVIDIA_LAYER_NAME]
    say(f"the NVIDIA layer: {layer.size / 1e6:.0f} MB, made as it is loaded ({time.monotonic() - started:.1f}s)")
    started = step("saving the base")
    saved = folder / BASE_ARCHIVE
    try:
        engine.save_image(spec.base.from_ref, saved)
    except EngineFault as exc:
        raise BuildFailed(f"saving its base {spec.base.from_ref} failed: {exc.message}") from None
    say(f"saved the base {spec.base.from_ref}: {saved.stat().st_size / 1e6:.0f} MB ({time.monotonic() - started:.1f}s)")
    started = step("loading the image")
    made: list[str] = []
    line = spec.line
    try:
        engine.load_stream(lambda out: made.append(line_archive(saved, layer, out, tag, line)))
    except NotAnArchive as exc:
        raise BuildFailed(f"its base {spec.base.from_ref}: {exc}") from None
    except EngineFault as exc:
        raise BuildFailed(f"loading it into the engine failed: {exc.message}") from None
    finally:
        saved.unlink()
    (expected,) = made
    info = engine.inspect_image(tag)
    if info is None or info.id != expected:
        engine.remove_image(tag)  # the tag names only an image of the config made here
        loaded = "no image" if info is None else info.id
        raise BuildFailed(f"the engine loaded {loaded} as {tag}, not the {expected} its config names: the engine rewrote it")
    say(f"loaded {tag} as {expected} ({time.monotonic() - started:.1f}s)")


def _copy(src: tarfile.TarFile, dst: tarfile.TarFile, name: str) -> None:
    """A layer file of the saved base as a plain file (a save may link a layer to another's file)."""
    try:
        handle = src.extractfile(name)  # follows a link to its target
    except KeyError:
        handle = None
    if handle is None:
        raise NotAnArchive(f"the saved base has no layer file {name}")
    size = handle.seek(0, io.SEEK_END)
    handle.seek(0)
    _add(dst, name, handle, size)


def _add(dst: tarfile.TarFile, name: str, data: SupportsRead[bytes], size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, EPOCH_FLOOR
    dst.addfile(info, data)
