"""The in-toto Statement (v1) of a published digest: its subject is the image digest, its
predicate the evidence the publish rests on (the smoke verdict per framework, the GPU model and
driver or "no GPU", the CPU-side CUDA checks, the fit where the result has one, the lock's and the
SBOM's sha256, the base, the builder version and the dates).

Pure: a record and a smoke result in, the statement's JSON text out (sorted keys, so the same
evidence gives the same bytes, which is what a signature covers); `read` takes one back and refuses
a statement that is not one of ours in one line."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from builder.catalog.records import KnownGood
from builder.model.results import SmokeResult
from builder.util.errors import RunFailure, UserError
from builder.util.fsio import dump_json, parse_json

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://github.com/example/gpu-image-builder/docs/evidence.md#smoke-evidence-v1"


@dataclass(frozen=True)
class Subject:
    name: str  # the repository
    sha256: str  # the manifest digest's hex


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class BuiltImage:
    """The tested image as the engine holds it: a rebuild of the same lock and base compares these
    (a canonical image's are the same on any engine: docs/reproducible.md)."""

    image_id: str  # sha256:... of its config
    diff_ids: tuple[str, ...]  # its layers, base first
    canonical: bool  # its venv is a canonical layer made from the lock (matrix.yaml canonical_layers)


def statement(record: KnownGood, result: SmokeResult, sbom: str, built: BuiltImage | None = None) -> str:
    """The Statement's JSON text for `record` (pushed as record.digest), tested as `result`;
    `built`: the tested image's ID and layers (None: not read, the predicate says null)."""
    repository, _, digest = record.digest.partition("@")
    probe = result.probe
    frameworks: dict[str, Any] = {}
    for name, found in sorted((probe.frameworks if probe else {}).items()):
        frameworks[name] = {
            "status": found.status,
            "version": found.version,
            "reason": found.reason,
            "cpu_check": None if found.cpu_check is None else {"ok": found.cpu_check.ok, "detail": found.cpu_check.detail},
            "gpu_check": None
            if found.gpu_check is None
            else {"ok": found.gpu_check.ok, "detail": found.gpu_check.detail, "max_abs_err": found.gpu_check.max_abs_err},
            "devices": [d.name for d in found.devices if d.name],
        }
    host = result.host
    predicate = {
        "image": {"id": record.id, "tag": record.tag, "content_hash": record.content_hash, "stack": record.stack, "os": record.os},
        "verdict": result.verdict,
        "gpu_skipped_accepted": record.gpu_skipped_accepted,
        "frameworks": frameworks,
        "gpu": {
            "model": host.gpu if host else "no GPU",
            "driver": host.driver if host else None,
            "attached": result.gpu.attached,
            "reason": result.gpu.reason,
        },
        "cuda_checks": [{"framework": c.framework, "name": c.name, "ok": c.ok, "detail": c.detail} for c in result.cuda_checks],
        "cuda_libraries": dict(sorted(record.libraries.items())),
        "accelerator": {
            "kind": record.accelerator.kind,
            "version": record.accelerator.version,
            "cuda": record.accelerator.cuda,
            "cudnn": record.accelerator.cudnn,
            "rocm": record.accelerator.rocm,
        },
        "fit": None if result.fit is None else result.fit.to_json(),  # measured in the smoke container (CUDA images)
        "tests": result.tests.to_json(),
        "lock": {"sha256": record.lock_sha256},
        "sbom": {"sha256": sha256_text(sbom), "format": "CycloneDX 1.6 JSON"},
        "base": {"name": record.base.name, "ref": record.base.ref, "id": record.base.id, "digest": record.base.digest},
        "builder": {"version": record.builder_version},
        "built": None if built is None else {"image_id": built.image_id, "diff_ids": list(built.diff_ids), "canonical": built.canonical},
        "dates": {"tested": record.tested, "published": record.published},
    }
    doc = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": repository, "digest": {"sha256": digest.removeprefix("sha256:")}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }
    return dump_json(doc)


def read(text: str, where: str) -> Subject:
    """The subject of one of our Statements; RunFailure naming `where` when the text is not one."""
    try:
        doc = parse_json(text, where)
    except UserError as exc:  # parse_json's own one-line error
        raise RunFailure(f"{where}: not JSON: {str(exc)[:120]}") from None
    if not isinstance(doc, dict) or doc.get("_type") != STATEMENT_TYPE or doc.get("predicateType") != PREDICATE_TYPE:
        raise RunFailure(f"{where}: not an in-toto Statement v1 of type {PREDICATE_TYPE}")
    subjects = doc.get("subject")
    if not isinstance(subjects, list) or len(subjects) != 1 or not isinstance(subjects[0], dict):
        raise RunFailure(f"{where}: the Statement must have exactly one subject")
    name, digest = subjects[0].get("name"), subjects[0].get("digest")
    hexdigest = digest.get("sha256") if isinstance(digest, dict) else None
    if not isinstance(name, str) or not isinstance(hexdigest, str) or len(hexdigest) != 64:
        raise RunFailure(f"{where}: the Statement's subject must be {{name, digest: {{sha256: <64 hex>}}}}")
    if not isinstance(doc.get("predicate"), dict):
        raise RunFailure(f"{where}: the Statement has no predicate object")
    return Subject(name, hexdigest)


def built_image(text: str, where: str) -> BuiltImage | None:
    """The tested image a Statement (already `read`) names (`predicate.built`); None when it names
    none (published before the attestation recorded it); RunFailure when it is not of that shape."""
    doc = parse_json(text, where)
    built = doc.get("predicate", {}).get("built") if isinstance(doc, dict) and isinstance(doc.get("predicate"), dict) else None
    if built is None:
        return None
    image_id = built.get("image_id") if isinstance(built, dict) else None
    diff_ids = built.get("diff_ids") if isinstance(built, dict) else None
    canonical = built.get("canonical") if isinstance(built, dict) else None
    if (
        not isinstance(image_id, str)
        or not isinstance(diff_ids, list)
        or not all(isinstance(d, str) for d in diff_ids)
        or not isinstance(canonical, bool)
    ):
        raise RunFailure(f"{where}: predicate.built must be {{image_id, diff_ids: [...], canonical: true|false}}")
    return BuiltImage(image_id, tuple(diff_ids), canonical)


def sbom_sha256(text: str) -> str | None:
    """The SBOM sha256 a Statement (already `read`) names, or None."""
    doc = parse_json(text, "statement")
    sbom = doc.get("predicate", {}).get("sbom") if isinstance(doc, dict) and isinstance(doc.get("predicate"), dict) else None
    value = sbom.get("sha256") if isinstance(sbom, dict) else None
    return value if isinstance(value, str) else None
