"""One known-good record: a published digest and what was measured inside it when it passed.

The JSON form is the catalog format (catalog/known-good.json; the README's "publish" section);
`from_json` refuses a record it cannot trust (missing keys, a digest that is not repo@sha256:),
naming the catalog file and the record, so a hand-edited catalog fails loudly, not oddly.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from builder.spec import grammar

SCHEMA = 1
DIGEST = re.compile(r"^[a-z0-9][a-z0-9._:/-]*@sha256:[0-9a-f]{64}$")
VERDICTS = ("passed", "gpu-skipped")  # what may be published; gpu-skipped only when accepted


@dataclass(frozen=True)
class KnownGood:
    id: str
    tag: str  # the immutable full tag it was pushed as (repository:id)
    digest: str  # repository@sha256:..., as the registry reports it
    floating: tuple[str, ...]  # the moving tags pushed with it (e.g. repository:torch2.14-cu130)
    content_hash: str
    stack: str
    os: str
    base: dict[str, Any]  # name, ref (FROM), id (the engine's id of the base image), digest (a pulled base's)
    lock_sha256: str | None  # sha256 of requirements.lock; None for an unlocked image
    frameworks: dict[str, str]  # as measured inside the image (public versions)
    accelerator: dict[str, Any]  # kind, version (planned), cuda / cudnn / rocm as measured
    python: str  # as measured inside the image
    libraries: dict[str, str]  # CUDA libraries as loaded inside the image (cudart, cudnn, ...)
    verdict: str  # passed | gpu-skipped
    gpu_skipped_accepted: bool  # published with --accept-gpu-skipped: no GPU ran it
    tests: dict[str, int]
    host: dict[str, Any]  # gpu (model or "no GPU"), driver, engine
    tested: str  # when the smoke tests ran (UTC, ISO 8601)
    published: str
    builder_version: str
    size_mb: float | None = None
    manifest: str = ""  # catalog-relative path of the package manifest
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def repository(self) -> str:
        return self.digest.split("@", 1)[0]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["floating"] = list(self.floating)
        data["notes"] = list(self.notes)
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
            "base": str(self.base.get("name", "")),
            "python": self.python,
            "vendor": str(self.accelerator.get("kind", "")),
            "verdict": self.verdict,
            "digest": self.digest,
            "repository": self.repository,
            "tag": self.tag,
        }
        for key in ("cuda", "cudnn", "rocm"):
            if self.accelerator.get(key):
                out[key] = str(self.accelerator[key])
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
    optional = {"size_mb", "manifest", "notes"}
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
    for key in ("floating", "notes"):
        if key in data and not (isinstance(data[key], list) and len(data[key]) <= MAX_ITEMS and all(_text(v, MAX_TEXT) for v in data[key])):
            raise bad(key, f"a list of at most {MAX_ITEMS} strings of at most {MAX_TEXT} characters")
    for key, limit, nullable in (
        ("frameworks", MAX_VERSION, False),
        ("libraries", MAX_VERSION, False),
        ("accelerator", MAX_VERSION, True),
        ("base", MAX_TEXT, True),
        ("host", MAX_TEXT, True),
    ):
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
    if not DIGEST.match(data["digest"]):
        raise RecordError(f"{where}: record {name} digest {_reference(data['digest'])!r} is not repository@sha256:<64 hex>")
    repository, colon, tag = data["tag"].rpartition(":")
    if not colon or repository != data["digest"].split("@", 1)[0] or not grammar.DOCKER_TAG.match(tag):
        # as publish writes it; pull retags by it, so a tag in another repository would move a name not ours
        raise RecordError(
            f"{where}: record {name} tag {_reference(data['tag'])!r} is not {data['digest'].split('@', 1)[0]}:<tag> (the repository of its digest)"
        )
    if data["verdict"] not in VERDICTS:
        raise RecordError(f"{where}: record {name} verdict {data['verdict']!r} is not one of {', '.join(VERDICTS)}")
    values = {n: data[n] for n in names if n in data}
    values["floating"] = tuple(values.get("floating") or ())
    values["notes"] = tuple(values.get("notes") or ())
    return KnownGood(**values)


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
