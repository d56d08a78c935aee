"""images/<id>/image.json as a record: what render writes for each planned image (the plan JSON's
entry, less its platform and end-of-life dates) and the smoke checks read back.

Render builds it from the ImageSpec (builder/render/formats.py `image_entry`), `to_json` is the
committed file's form (its bytes must not move: they are what `render --check` compares), and the
smoke runner hands the same file to the in-container checks, which read it with `from_json`
instead of walking a dict.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from builder.model import jsonfields as jf
from builder.model.plan import AMD64, VENDORS, Accelerator, Vendor
from builder.util.errors import UserError

LockState = Literal["locked", "stale", "missing", "unlocked"]
LOCK_STATES: tuple[LockState, ...] = ("locked", "stale", "missing", "unlocked")
LIMIT = 1 << 20  # an image.json is a few kilobytes


@dataclass(frozen=True)
class BaseEntry:
    """The base as image.json states it: matrix.yaml's entry and what the FROM line names."""

    name: str
    vendor: Vendor
    os: str
    from_ref: str  # "from"
    version: str | None = None
    image: str | None = None
    digest: str | None = None
    bootstrap: str | None = None

    def to_json(self) -> dict[str, Any]:
        optional = {"version": self.version, "image": self.image, "digest": self.digest, "bootstrap": self.bootstrap}
        return {
            "name": self.name,
            "vendor": self.vendor,
            "os": self.os,
            **{k: v for k, v in optional.items() if v is not None},
            "from": self.from_ref,
        }


@dataclass(frozen=True)
class RunsOnEntry:
    """What the image runs on, measured from its locked wheels: the compute capabilities and whether
    its own libraries carry PTX, or (`gpus` None) what the wheels cannot tell."""

    gpus: tuple[str, ...] | None
    ptx: bool = False
    unknown: str | None = None
    source: str = "wheels"

    def to_json(self) -> dict[str, Any]:
        if self.gpus is None:
            return {"gpus": None, "unknown": self.unknown, "source": self.source}
        return {"gpus": list(self.gpus), "ptx": self.ptx, "source": self.source}


@dataclass(frozen=True)
class ReproducibleEntry:
    """Whether the same inputs give the same image ID (docs/reproducible.md), and why: said for every
    image, so an image that is not is marked, never silently assumed to be."""

    image_id: bool
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"image_id": self.image_id, "why": self.why}


@dataclass(frozen=True)
class ImageEntry:
    id: str
    tag: str
    base: BaseEntry
    stack: str
    python: str
    frameworks: dict[str, str]  # name -> planned version
    packages: tuple[str, ...]  # requirements.txt's pins
    index_urls: tuple[str, ...]
    content_hash: str
    accelerator: Accelerator
    variants: dict[str, str | None]  # framework -> its wheel variant (cu130, rocm7.0, cpu, cuda13x)
    cudnn: dict[str, str]
    notes: tuple[str, ...]
    warnings: tuple[str, ...]
    lock: LockState
    libraries: dict[str, str]  # the CUDA libraries the lock pins (cudnn, cuda-runtime, ...)
    runs_on: RunsOnEntry | None = None  # None: not measured (not CUDA, not locked)
    cc_min: str | None = None
    variant_properties: tuple[str, ...] = ()
    platform: str = AMD64  # in the file only when it is not linux/amd64
    reproducible: ReproducibleEntry | None = None  # None only in an image.json written before it

    def to_json(self) -> dict[str, Any]:
        """The committed form: `platform` only off amd64, the measured keys only when measured."""
        return {
            "id": self.id,
            "tag": self.tag,
            "base": self.base.to_json(),
            "stack": self.stack,
            "python": self.python,
            "frameworks": dict(self.frameworks),
            "packages": list(self.packages),
            "index_urls": list(self.index_urls),
            "content_hash": self.content_hash,
            "accelerator": {k: v for k, v in vars(self.accelerator).items() if v is not None},
            "variants": dict(self.variants),
            "cudnn": dict(self.cudnn),
            "notes": list(self.notes),
            "warnings": list(self.warnings),
            "lock": self.lock,
            "libraries": dict(self.libraries),
            **({"runs_on": self.runs_on.to_json()} if self.runs_on else {}),
            **({"cc_min": self.cc_min} if self.cc_min is not None else {}),
            **({"variant_properties": list(self.variant_properties)} if self.variant_properties else {}),
            **({"platform": self.platform} if self.platform != AMD64 else {}),
            **({"reproducible": self.reproducible.to_json()} if self.reproducible else {}),
        }

    def text(self, indent: int | None = 2) -> str:
        """The file's text: sorted keys, so the bytes depend on the values only."""
        return json.dumps(self.to_json(), indent=indent, sort_keys=True) + ("\n" if indent else "")


BASE_FIELDS = (
    jf.Field("name", jf.text),
    jf.Field("vendor", jf.one_of(VENDORS)),
    jf.Field("os", jf.text),
    jf.Field("from", jf.text, attr="from_ref"),
    *(jf.Field(key, jf.optional_text, None) for key in ("version", "image", "digest", "bootstrap")),
)
ACCELERATOR_FIELDS = (
    jf.Field("kind", jf.one_of(VENDORS)),
    *(jf.Field(key, jf.optional_text, None) for key in ("version", "min_driver", "mvc_driver", "require_cuda")),
)
RUNS_ON_FIELDS = (
    jf.Field("gpus", jf.optional(jf.texts)),
    jf.Field("ptx", jf.flag, False),
    jf.Field("unknown", jf.optional_text, None),
    jf.Field("source", jf.text),
)
REPRODUCIBLE_FIELDS = (
    jf.Field("image_id", jf.flag),
    jf.Field("why", jf.text),
)
FIELDS = (
    jf.Field("id", jf.text),
    jf.Field("tag", jf.text),
    jf.Field("base", jf.nested(BASE_FIELDS, BaseEntry)),
    jf.Field("stack", jf.text),
    jf.Field("python", jf.text),
    jf.Field("frameworks", jf.text_map),
    jf.Field("packages", jf.texts),
    jf.Field("index_urls", jf.texts),
    jf.Field("content_hash", jf.text),
    jf.Field("accelerator", jf.nested(ACCELERATOR_FIELDS, Accelerator)),
    jf.Field("variants", jf.optional_text_map),
    jf.Field("cudnn", jf.text_map),
    jf.Field("notes", jf.texts),
    jf.Field("warnings", jf.texts),
    jf.Field("lock", jf.one_of(LOCK_STATES)),
    jf.Field("libraries", jf.text_map),
    jf.Field("runs_on", jf.nested(RUNS_ON_FIELDS, RunsOnEntry), None),
    jf.Field("cc_min", jf.optional_text, None),
    jf.Field("variant_properties", jf.texts, ()),
    jf.Field("platform", jf.text, AMD64),
    jf.Field("reproducible", jf.nested(REPRODUCIBLE_FIELDS, ReproducibleEntry), None),
)


def from_json(data: Any, where: str) -> ImageEntry:
    """image.json read back, or a one-line UserError naming the file and the key."""

    def fail(what: str) -> UserError:
        return UserError(f"{where}: {what}; render it again with this builder")

    found = jf.obj(data, "image.json", fail)
    absent, extra = jf.missing(found, FIELDS), jf.unknown(found, FIELDS)
    if absent or extra:
        raise fail(f"image.json lacks {', '.join(absent) or 'nothing'} and has unknown keys {', '.join(extra[:5]) or 'none'}")
    return ImageEntry(**jf.read_fields(found, FIELDS, fail))
