"""One known-good record: a published digest and what was measured inside it when it passed.

The JSON form is the catalog format (catalog/known-good.json, DESIGN.md "Known-good catalog");
`from_json` refuses a record it cannot trust (missing keys, a digest that is not repo@sha256:),
naming the catalog file and the record, so a hand-edited catalog fails loudly, not oddly.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

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
        each framework, verdict, digest, repository, tag."""
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


def from_json(data: Any, where: str) -> KnownGood:
    if not isinstance(data, dict):
        raise RecordError(f"{where}: a record must be an object")
    names = [f for f in KnownGood.__dataclass_fields__]
    optional = {"size_mb", "manifest", "notes"}
    missing = [n for n in names if n not in data and n not in optional]
    if missing:
        raise RecordError(f"{where}: record {data.get('id', '?')!r} lacks {', '.join(missing)}")
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise RecordError(f"{where}: record {data.get('id', '?')!r} has unknown keys {', '.join(unknown)}")
    if not DIGEST.match(str(data["digest"])):
        raise RecordError(f"{where}: record {data['id']!r} digest {data['digest']!r} is not repository@sha256:<64 hex>")
    if data["verdict"] not in VERDICTS:
        raise RecordError(f"{where}: record {data['id']!r} verdict {data['verdict']!r} is not one of {', '.join(VERDICTS)}")
    values = {n: data[n] for n in names if n in data}
    values["floating"] = tuple(values.get("floating") or ())
    values["notes"] = tuple(values.get("notes") or ())
    return KnownGood(**values)
