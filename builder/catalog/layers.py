"""A published image's layers above its base: each one's diff ID and size, as measured at publish.

A known-good record's `layers` (records.py) is a fact of the image alone: the layers the engine
lists above the base's (base first, the empty layers of steps that wrote nothing left out), each
with the bytes its history entry says it wrote (uncompressed, as `size_mb` counts them;
engine/sizes.py `layers_of`). What of them is shared with another image is not a fact of one
image: catalog/shares.py computes it when the catalog is shown, among the records of its line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from builder.model import jsonfields as jf

DIFF_ID = re.compile(r"^sha256:[0-9a-f]{64}$")
MAX_LAYERS = 64  # a canonical image has three above its base, a RUN-built one a handful
MAX_BYTES = 2**53  # what a JSON number holds exactly (8 PB): far beyond any layer


@dataclass(frozen=True)
class ImageLayer:
    """One layer above the base: its diff ID (sha256 of the uncompressed tar) and its bytes."""

    diff_id: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"diff_id": self.diff_id, "size": self.size}


FIELDS = (
    jf.Field("diff_id", jf.checked(lambda v: isinstance(v, str) and bool(DIFF_ID.fullmatch(v)), "sha256:<64 hex>")),
    jf.Field("size", jf.checked(lambda v: type(v) is int and 0 <= v < MAX_BYTES, "a whole number of bytes")),
)


def read_layers(value: Any, key: str, fail: jf.Fail) -> tuple[ImageLayer, ...]:
    """A record's `layers`: a list of at most MAX_LAYERS {diff_id, size} objects, each checked."""
    if isinstance(value, list) and len(value) > MAX_LAYERS:
        raise fail(f"{key!r} must be a list of at most {MAX_LAYERS} layers; got {len(value)}")
    read: tuple[ImageLayer, ...] = jf.each(jf.nested(FIELDS, ImageLayer))(value, key, fail)
    return read


def above_base(sized: tuple[tuple[str, int], ...], base: int) -> tuple[ImageLayer, ...]:
    """engine/sizes.py Layers (every layer with its bytes, base first; how many are the base's) as a record's layers."""
    return tuple(ImageLayer(diff_id, size) for diff_id, size in sized[base:])
