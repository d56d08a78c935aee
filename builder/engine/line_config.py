"""A CUDA line's image config, the one source of what the line's image adds to its base: the NVIDIA
layer's diff ID and history entry, and the builder's labels (engine/line_image.py makes the image
from it; engine/image_build.py splices the same into a member built FROM the base, so the member is
the image a build FROM the line's image gives)."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable, Iterable
from typing import Any

from builder.engine.reproducible import Splice
from builder.lock.layer import EPOCH_FLOOR, NVIDIA_LAYER_NAME
from builder.render.labels import BUILT_BY_LABEL, BUILT_BY_VALUE, LINE_LABEL
from builder.util.text import utc_stamp


def created_by(line: str) -> str:
    return f"ADD {NVIDIA_LAYER_NAME} / (builder: the NVIDIA wheels of CUDA line {line})"


def line_labels(line: str) -> dict[str, str]:
    """What the line image's config adds to its base's labels."""
    return {BUILT_BY_LABEL: BUILT_BY_VALUE, LINE_LABEL: line}


def line_config(base: dict[str, Any], line: str, diff_id: str) -> dict[str, Any]:
    """The line image's config: the base's, with the NVIDIA layer's diff ID and history entry added,
    the builder's labels, and the base's `created` (EPOCH_FLOOR's for a base that has none)."""
    stamp = base.get("created") if isinstance(base.get("created"), str) and base.get("created") else utc_stamp(EPOCH_FLOOR)
    inner = dict(base.get("config") or {})
    inner["Labels"] = {**(inner.get("Labels") or {}), **line_labels(line)}
    rootfs = dict(base.get("rootfs") or {})
    return {
        **base,
        "created": stamp,
        "config": inner,
        "rootfs": {**rootfs, "type": "layers", "diff_ids": [*(rootfs.get("diff_ids") or []), diff_id]},
        "history": [*(base.get("history") or []), {"created": stamp, "created_by": created_by(line)}],
    }


def config_bytes(config: dict[str, Any]) -> bytes:
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def line_splice(line: str, diff_id: str, layers: int, history: int, members: Callable[[], Iterable[tarfile.TarInfo]]) -> Splice:
    """The line's NVIDIA layer as `line_config` puts it on a base of `layers` layers and `history`
    history entries (its `created` is the normalization's epoch, as every entry's is)."""
    return Splice(diff_id, layers, history, {"created_by": created_by(line)}, line_labels(line), members)
