"""One known-good record: a published digest and what was measured inside it when it passed.

The JSON form is the catalog format (catalog/known-good.json; docs/commands.md, "publish, pull, catalog");
`from_json` refuses a record it cannot trust (missing keys, a digest that is not repo@sha256:),
naming the catalog file and the record, so a hand-edited catalog fails loudly, not oddly.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from builder.catalog.layers import ImageLayer, read_layers
from builder.model import amd_fit, measured_fit
from builder.model import jsonfields as jf
from builder.model.amd_fit import AmdFit
from builder.model.measured_fit import MeasuredFit
from builder.model.plan import AMD64, PLATFORMS, VENDORS, Accelerator, TagLine, Vendor, recorded_tag_line
from builder.model.results import GOOD, TestedOn, Verdict, tested_on
from builder.spec import grammar

SCHEMA = 1
DIGEST = re.compile(r"^[a-z0-9][a-z0-9._:/-]*@sha256:[0-9a-f]{64}$")
# A record's id names files (catalog/evidence/<id>.*, images/<id>/) and its manifest is read from the
# catalog: an id is an image id (a Docker tag: no `/`, never `.` or `..`), a manifest a plain file
# name in catalog/manifests/, so no record reads or names anything outside catalog/ (`../`, `/etc`).
MANIFEST = re.compile(r"^manifests/[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}$")
VERDICTS = GOOD  # what may be published (gpu-skipped only when accepted): a record holds one of these


@dataclass(frozen=True)
class BaseIdentity:
    """The base image a published image was built FROM, as the engine knew it at publish time."""

    name: str  # matrix.yaml's base name
    ref: str  # what the FROM line names
    id: str  # the engine's id of the base image
    digest: str | None = None  # a pulled base's repo@sha256:...; None for a bootstrapped one


@dataclass(frozen=True)
class MeasuredAccelerator:
    """The accelerator a record was planned for (kind, version) and what was measured inside it."""

    kind: Vendor
    version: str | None  # the base's CUDA / ROCm (planned)
    cuda: str | None = None  # as loaded inside the image
    cudnn: str | None = None
    rocm: str | None = None

    @property
    def planned(self) -> Accelerator:
        return Accelerator(self.kind, self.version)


@dataclass(frozen=True)
class KnownGood:
    id: str
    tag: str  # the immutable full tag it was pushed as (repository:id)
    digest: str  # repository@sha256:..., as the registry reports it
    floating: tuple[str, ...]  # the moving tags pushed with it (e.g. repository:torch2.14-cu130)
    content_hash: str
    stack: str
    os: str
    base: BaseIdentity
    lock_sha256: str | None  # sha256 of requirements.lock; None for an unlocked image
    frameworks: dict[str, str]  # as measured inside the image (public versions)
    accelerator: MeasuredAccelerator
    python: str  # as measured inside the image
    libraries: dict[str, str]  # CUDA libraries as loaded inside the image (cudart, cudnn, ...)
    verdict: Verdict  # one of VERDICTS
    gpu_skipped_accepted: bool  # published with --accept-gpu-skipped: no GPU ran it
    tests: dict[str, int]
    host: TestedOn
    tested: str  # when the smoke tests ran (UTC, ISO 8601)
    published: str
    builder_version: str
    size_mb: float | None = None
    manifest: str = ""  # catalog-relative path of the package manifest
    notes: tuple[str, ...] = field(default_factory=tuple)
    fit: MeasuredFit | None = None  # a CUDA image's measured fit (from its smoke result); None: not measured
    amd: AmdFit | None = None  # a ROCm image's gfx targets, measured from its code objects (model/amd_fit.py); None: not measured
    platform: str = AMD64  # the image's platform (linux/arm64)
    emulated: bool = False  # its smoke tests ran under qemu-user emulation (an arm64 image tested on an amd64 host)
    # its measured fit as wheel-variant properties (builder/model/locked_fit.py `variant_properties`:
    # "nvidia :: sm_arch :: 90_real", ...), so tools that read variants can read the record
    variant_properties: tuple[str, ...] = ()
    # the line its floating tags name, as planned (ImageSpec.tag_line); None: not recorded (a record
    # written before records carried it, or an image of no line): see `line`
    tag_line: TagLine | None = None
    # its layers above its base, each diff ID with its bytes, as measured at publish (catalog/layers.py);
    # None: not measured (a record written before records carried them). What of them another record
    # shares is computed across the catalog's records of its line (catalog/shares.py), not stored
    layers: tuple[ImageLayer, ...] | None = None

    @property
    def repository(self) -> str:
        return self.digest.split("@", 1)[0]

    @property
    def line(self) -> TagLine | None:
        """The line its floating tags name: the recorded one, else (a record written before records
        carried it) the one its id spells; an image of no line has neither."""
        return self.tag_line if self.tag_line is not None else recorded_tag_line(self.id, self.platform)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["floating"] = list(self.floating)
        data["notes"] = list(self.notes)
        data["variant_properties"] = list(self.variant_properties)
        if not self.variant_properties:  # records published before variants keep their form (their signatures cover it)
            del data["variant_properties"]
        del data["fit"]
        if self.fit is not None:  # records without a measured fit keep their old form
            data["fit"] = self.fit.to_json()
        del data["amd"]
        if self.amd is not None:  # and records without an AMD fit theirs
            data["amd"] = self.amd.to_json()
        if self.platform == AMD64 and not self.emulated:  # and amd64 records theirs (their signatures cover this form)
            del data["platform"], data["emulated"]
        if self.tag_line is None:  # and records written before tag lines theirs
            del data["tag_line"]
        del data["layers"]
        if self.layers is not None:  # and records written before layers theirs
            data["layers"] = [layer.to_json() for layer in self.layers]
        return data

    def fields(self) -> dict[str, str]:
        """Every key a query can name, as text: id, stack, os, base, python, vendor, cuda, cudnn, rocm,
        each framework, verdict, digest, repository, tag. Built once per record: a query asks it
        for every term (do not mutate the returned mapping)."""
        return self._fields

    @functools.cached_property
    def _fields(self) -> dict[str, str]:
        out = {
            "id": self.id,
            "stack": self.stack,
            "os": self.os,
            "base": self.base.name,
            "python": self.python,
            "vendor": self.accelerator.kind,
            "verdict": self.verdict,
            "digest": self.digest,
            "repository": self.repository,
            "tag": self.tag,
            "platform": self.platform,
        }
        for key, value in (("cuda", self.accelerator.cuda), ("cudnn", self.accelerator.cudnn), ("rocm", self.accelerator.rocm)):
            if value:
                out[key] = value
        out.update(self.frameworks)
        return out


class RecordError(ValueError):
    """A catalog record that cannot be read; the message names the record."""


# Caps on what a record may hold. Real values are far below them (an id is ~40 characters, a
# version ~10, a host line ~100); the caps exist so a hand-edited or hostile catalog cannot make
# `catalog` lay out a megabyte cell, or a 5,000-digit version overflow the version parser.
MAX_TEXT = 1024  # any string field
MAX_VERSION = 64  # versions: frameworks, python, libraries, accelerator values
MAX_ITEMS = 64  # entries of any list or mapping field


def _text_field(limit: int, want: str = "") -> jf.Reader:
    return jf.checked(lambda v: _text(v, limit), want or f"text of at most {limit} characters")


def _text_list(value: Any) -> bool:
    return isinstance(value, list) and len(value) <= MAX_ITEMS and all(_text(v, MAX_TEXT) for v in value)


def _version_map() -> jf.Reader:
    return jf.checked(
        lambda v: _mapping(v, functools.partial(_text_or_null, limit=MAX_VERSION, nullable=False)),
        f"an object of at most {MAX_ITEMS} short keys with string values of at most {MAX_VERSION} characters",
    )


def _size(value: Any) -> bool:
    return value is None or (type(value) in (int, float) and 0 <= value < 1e9)


TEXT = _text_field(MAX_TEXT)
TEXTS = jf.listed(jf.checked(_text_list, f"a list of at most {MAX_ITEMS} strings of at most {MAX_TEXT} characters"))
FLAG = jf.checked(lambda v: type(v) is bool, "true or false")

# Each key of a record, in KnownGood's order: how it is read and checked (type and size), and what an
# absent optional key stands for. What ties fields together (the tag's repository is the digest's) is
# `_references`'.
FIELDS = (
    jf.Field("id", TEXT),
    jf.Field("tag", TEXT),
    jf.Field("digest", TEXT),
    jf.Field("floating", TEXTS),
    jf.Field("content_hash", TEXT),
    jf.Field("stack", TEXT),
    jf.Field("os", TEXT),
    jf.Field("base", lambda value, key, fail: _base(value, fail)),
    jf.Field("lock_sha256", jf.optional(_text_field(MAX_VERSION + 1, "a sha256 hex string or null"))),
    jf.Field("frameworks", _version_map()),
    jf.Field("accelerator", lambda value, key, fail: _accelerator(value, fail)),
    jf.Field("python", _text_field(MAX_VERSION, f"a version of at most {MAX_VERSION} characters")),
    jf.Field("libraries", _version_map()),
    jf.Field("verdict", TEXT),
    jf.Field("gpu_skipped_accepted", FLAG),
    jf.Field(
        "tests", jf.checked(lambda v: _mapping(v, lambda n: type(n) is int and 0 <= n < 2**31), "an object of counts (whole numbers)")
    ),
    jf.Field("host", lambda value, key, fail: tested_on(_capped(value, key, MAX_TEXT, fail), key, fail)),
    jf.Field("tested", TEXT),
    jf.Field("published", TEXT),
    jf.Field("builder_version", TEXT),
    jf.Field("size_mb", jf.checked(_size, "a number of megabytes or null"), None),
    jf.Field("manifest", TEXT, ""),
    jf.Field("notes", TEXTS, ()),
    jf.Field("fit", jf.optional(measured_fit.from_json), None),
    jf.Field("amd", jf.optional(amd_fit.from_json), None),
    jf.Field("platform", jf.one_of(PLATFORMS), AMD64),
    jf.Field("emulated", FLAG, False),
    jf.Field("variant_properties", TEXTS, ()),
    jf.Field("tag_line", jf.optional(lambda value, key, fail: _tag_line(value, fail)), None),
    jf.Field("layers", jf.optional(read_layers), None),
)


def from_json(data: Any, where: str) -> KnownGood:
    """A record checked field by field (type, size), or a RecordError naming the record and field."""
    if not isinstance(data, dict):
        raise RecordError(f"{where}: a record must be an object")
    raw_id = data.get("id")
    name = repr(_short(raw_id)) if isinstance(raw_id, str) else "?"
    missing = jf.missing(data, FIELDS)
    if missing:
        raise RecordError(f"{where}: record {name} lacks {', '.join(missing)}")
    unknown = jf.unknown(data, FIELDS)
    if unknown:
        raise RecordError(
            f"{where}: record {name} has unknown keys {', '.join(_short(k) for k in unknown[:5])}{' ...' if len(unknown) > 5 else ''}"
        )

    def fail(what: str) -> RecordError:
        return RecordError(f"{where}: record {name} field {what}")

    values = jf.read_fields(data, FIELDS, fail)
    _references(values, f"{where}: record {name}")
    return KnownGood(**values)


def _references(values: dict[str, Any], record: str) -> None:
    """What names files and images: an id that is an image id, a manifest inside the catalog, a digest
    and a tag in the digest's repository (pull retags by it, so a tag in another repository would move
    a name not ours), and a verdict that may be published."""
    if not grammar.DOCKER_TAG.fullmatch(values["id"]):
        raise RecordError(f"{record} id is not an image id (letters, digits, `_.-`, no `/`)")
    if values["manifest"] and not MANIFEST.fullmatch(values["manifest"]):
        raise RecordError(f"{record} manifest {_short(repr(values['manifest']))} is not manifests/<file> inside the catalog")
    digest = values["digest"]
    if not DIGEST.match(digest):
        raise RecordError(f"{record} digest {_reference(digest)!r} is not repository@sha256:<64 hex>")
    repository, colon, tag = values["tag"].rpartition(":")
    if not colon or repository != digest.split("@", 1)[0] or not grammar.DOCKER_TAG.match(tag):
        raise RecordError(
            f"{record} tag {_reference(values['tag'])!r} is not {digest.split('@', 1)[0]}:<tag> (the repository of its digest)"
        )
    line = values["tag_line"]
    if line is not None and line.platform != values["platform"]:
        raise RecordError(f"{record} tag_line platform {_short(line.platform)!r} is not its platform {values['platform']!r}")
    if values["verdict"] not in VERDICTS:
        raise RecordError(f"{record} verdict {values['verdict']!r} is not one of {', '.join(VERDICTS)}")


def _capped(value: Any, key: str, limit: int, fail: jf.Fail) -> dict[str, Any]:
    """An object of at most MAX_ITEMS short keys whose values are text of at most `limit` characters, or null."""
    if not _mapping(value, functools.partial(_text_or_null, limit=limit, nullable=True)):
        raise fail(f"{key!r} must be an object of at most {MAX_ITEMS} short keys with string or null values of at most {limit} characters")
    found: dict[str, Any] = value
    return found


BASE_FIELDS = (
    *(jf.Field(key, jf.text) for key in ("name", "ref", "id")),
    jf.Field("digest", jf.optional_text, None),
)
TAG_LINE_FIELDS = (
    *(jf.Field(key, jf.text) for key in ("name", "line", "accelerator", "python", "os")),
    jf.Field("platform", jf.one_of(PLATFORMS), AMD64),
    jf.Field("wheel", jf.optional_text, None),
)
ACCELERATOR_FIELDS = (
    jf.Field("kind", jf.one_of(VENDORS)),
    *(jf.Field(key, jf.optional_text, None) for key in ("version", "cuda", "cudnn", "rocm")),
)


def _base(value: Any, fail: jf.Fail) -> BaseIdentity:
    read: BaseIdentity = jf.nested(BASE_FIELDS, BaseIdentity)(_capped(value, "base", MAX_TEXT, fail), "base", fail)
    return read


def _tag_line(value: Any, fail: jf.Fail) -> TagLine:
    read: TagLine = jf.nested(TAG_LINE_FIELDS, TagLine)(_capped(value, "tag_line", MAX_VERSION, fail), "tag_line", fail)
    return read


def _accelerator(value: Any, fail: jf.Fail) -> MeasuredAccelerator:
    read: MeasuredAccelerator = jf.nested(ACCELERATOR_FIELDS, MeasuredAccelerator)(
        _capped(value, "accelerator", MAX_VERSION, fail), "accelerator", fail
    )
    return read


def _text(value: Any, limit: int) -> bool:
    return isinstance(value, str) and len(value) <= limit


def _text_or_null(value: Any, limit: int, nullable: bool) -> bool:
    return (nullable and value is None) or _text(value, limit)


def _mapping(value: Any, ok: Callable[[Any], bool]) -> bool:
    return isinstance(value, dict) and len(value) <= MAX_ITEMS and all(_text(k, MAX_VERSION) and ok(v) for k, v in value.items())


_USERINFO = re.compile(r"^(?:[a-z][a-z0-9+.-]*://)?[^/@]*@(?=[^/]*/)", re.IGNORECASE)


def _reference(value: str) -> str:
    """An image reference a refusal may quote: `user:password@` before its registry masked (no
    reference has an `@` before its first `/`; redact only sees it after a `scheme://`), and short."""
    return _short(_USERINFO.sub("****@", value))


def _short(value: Any, limit: int = 60) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
