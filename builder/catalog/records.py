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

from builder.model import jsonfields as jf
from builder.model import measured_fit
from builder.model.measured_fit import MeasuredFit
from builder.model.plan import AMD64, PLATFORMS, VENDORS, Accelerator, Vendor
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
    platform: str = AMD64  # the image's platform (linux/arm64)
    emulated: bool = False  # its smoke tests ran under qemu-user emulation (an arm64 image tested on an amd64 host)
    # its measured fit as wheel-variant properties (builder/model/locked_fit.py `variant_properties`:
    # "nvidia :: sm_arch :: 90_real", ...), so tools that read variants can read the record
    variant_properties: tuple[str, ...] = ()

    @property
    def repository(self) -> str:
        return self.digest.split("@", 1)[0]

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
        if self.platform == AMD64 and not self.emulated:  # and amd64 records theirs (their signatures cover this form)
            del data["platform"], data["emulated"]
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
_TEXT = ("id", "tag", "digest", "content_hash", "stack", "os", "verdict", "tested", "published", "builder_version", "manifest")


def from_json(data: Any, where: str) -> KnownGood:
    """A record checked field by field (type, size), or a RecordError naming the record and field."""
    if not isinstance(data, dict):
        raise RecordError(f"{where}: a record must be an object")
    raw_id = data.get("id")
    name = repr(_short(raw_id)) if isinstance(raw_id, str) else "?"
    names = [f for f in KnownGood.__dataclass_fields__]
    optional = {"size_mb", "manifest", "notes", "fit", "platform", "emulated", "variant_properties"}
    missing = [n for n in names if n not in data and n not in optional]
    if missing:
        raise RecordError(f"{where}: record {name} lacks {', '.join(missing)}")
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise RecordError(
            f"{where}: record {name} has unknown keys {', '.join(_short(k) for k in unknown[:5])}{' ...' if len(unknown) > 5 else ''}"
        )

    def bad(field_name: str, want: str) -> RecordError:
        return RecordError(f"{where}: record {name} field {field_name!r} must be {want}; got {_short(repr(data[field_name]))}")

    for key in _TEXT:
        if key in data and not _text(data[key], MAX_TEXT):
            raise bad(key, f"text of at most {MAX_TEXT} characters")
    if not _text(data["python"], MAX_VERSION):
        raise bad("python", f"a version of at most {MAX_VERSION} characters")
    if data["lock_sha256"] is not None and not _text(data["lock_sha256"], MAX_VERSION + 1):
        raise bad("lock_sha256", "a sha256 hex string or null")
    for key in ("floating", "notes", "variant_properties"):
        if key in data and not (isinstance(data[key], list) and len(data[key]) <= MAX_ITEMS and all(_text(v, MAX_TEXT) for v in data[key])):
            raise bad(key, f"a list of at most {MAX_ITEMS} strings of at most {MAX_TEXT} characters")
    for key, limit, nullable in (("frameworks", MAX_VERSION, False), ("libraries", MAX_VERSION, False)):
        if not _mapping(data[key], functools.partial(_text_or_null, limit=limit, nullable=nullable)):
            raise bad(
                key,
                f"an object of at most {MAX_ITEMS} short keys with {'string or null' if nullable else 'string'} values of at most {limit} characters",
            )
    if not _mapping(data["tests"], lambda v: type(v) is int and 0 <= v < 2**31):
        raise bad("tests", "an object of counts (whole numbers)")
    if type(data["gpu_skipped_accepted"]) is not bool:
        raise bad("gpu_skipped_accepted", "true or false")
    size = data.get("size_mb")
    if size is not None and not (type(size) in (int, float) and 0 <= size < 1e9):
        raise bad("size_mb", "a number of megabytes or null")
    if not grammar.DOCKER_TAG.fullmatch(data["id"]):
        raise RecordError(f"{where}: record {name} id is not an image id (letters, digits, `_.-`, no `/`)")
    if "manifest" in data and data["manifest"] and not MANIFEST.fullmatch(data["manifest"]):
        raise RecordError(f"{where}: record {name} manifest {_short(repr(data['manifest']))} is not manifests/<file> inside the catalog")
    if not DIGEST.match(data["digest"]):
        raise RecordError(f"{where}: record {name} digest {_reference(data['digest'])!r} is not repository@sha256:<64 hex>")
    repository, colon, tag = data["tag"].rpartition(":")
    if not colon or repository != data["digest"].split("@", 1)[0] or not grammar.DOCKER_TAG.match(tag):
        # as publish writes it; pull retags by it, so a tag in another repository would move a name not ours
        raise RecordError(
            f"{where}: record {name} tag {_reference(data['tag'])!r} is not {data['digest'].split('@', 1)[0]}:<tag> (the repository of its digest)"
        )
    if data.get("platform", AMD64) not in PLATFORMS:
        raise bad("platform", f"one of {', '.join(PLATFORMS)}")
    if type(data.get("emulated", False)) is not bool:
        raise bad("emulated", "true or false")
    if data["verdict"] not in VERDICTS:
        raise RecordError(f"{where}: record {name} verdict {data['verdict']!r} is not one of {', '.join(VERDICTS)}")
    values = {n: data[n] for n in names if n in data}
    values["floating"] = tuple(values.get("floating") or ())
    values["notes"] = tuple(values.get("notes") or ())
    values["variant_properties"] = tuple(values.get("variant_properties") or ())

    def fail(what: str) -> RecordError:
        return RecordError(f"{where}: record {name} field {what}")

    values["base"] = _base(data["base"], fail)
    values["accelerator"] = _accelerator(data["accelerator"], fail)
    values["host"] = tested_on(_capped(data["host"], "host", MAX_TEXT, fail), "host", fail)
    values["fit"] = None if data.get("fit") is None else measured_fit.from_json(data["fit"], "fit", fail)
    return KnownGood(**values)


def _capped(value: Any, key: str, limit: int, fail: Callable[[str], RecordError]) -> dict[str, Any]:
    """An object of at most MAX_ITEMS short keys whose values are text of at most `limit` characters, or null."""
    if not _mapping(value, functools.partial(_text_or_null, limit=limit, nullable=True)):
        raise fail(f"{key!r} must be an object of at most {MAX_ITEMS} short keys with string or null values of at most {limit} characters")
    found: dict[str, Any] = value
    return found


def _base(value: Any, fail: Callable[[str], RecordError]) -> BaseIdentity:
    base = _capped(value, "base", MAX_TEXT, fail)
    unknown = sorted(set(base) - set(BaseIdentity.__dataclass_fields__))
    if unknown:
        raise fail(f"'base' has unknown keys {', '.join(unknown[:5])}")
    return BaseIdentity(
        name=jf.text(base.get("name"), "base.name", fail),
        ref=jf.text(base.get("ref"), "base.ref", fail),
        id=jf.text(base.get("id"), "base.id", fail),
        digest=jf.optional_text(base.get("digest"), "base.digest", fail),
    )


def _accelerator(value: Any, fail: Callable[[str], RecordError]) -> MeasuredAccelerator:
    accelerator = _capped(value, "accelerator", MAX_VERSION, fail)
    unknown = sorted(set(accelerator) - set(MeasuredAccelerator.__dataclass_fields__))
    if unknown:
        raise fail(f"'accelerator' has unknown keys {', '.join(unknown[:5])}")
    kind = accelerator.get("kind")
    if kind not in VENDORS:
        raise fail(f"'accelerator.kind' must be one of {', '.join(VENDORS)}; got {_short(repr(kind))}")
    return MeasuredAccelerator(
        kind=kind,
        version=jf.optional_text(accelerator.get("version"), "accelerator.version", fail),
        cuda=jf.optional_text(accelerator.get("cuda"), "accelerator.cuda", fail),
        cudnn=jf.optional_text(accelerator.get("cudnn"), "accelerator.cudnn", fail),
        rocm=jf.optional_text(accelerator.get("rocm"), "accelerator.rocm", fail),
    )


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
