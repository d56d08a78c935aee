"""The evidence of a published digest, as files and as registry tags.

Files (catalog/evidence/, beside catalog/manifests/): `<id>.sbom.cdx.json` (the CycloneDX SBOM),
`<id>.intoto.json` (the in-toto Statement) and `<id>.record.json` (the record's signed fields,
exported so a person can check them without this tool), each signature beside its file as `.sig`.

Registry: cosign's tag convention, a tag derived from the image digest in the image's own
repository: `REPO:sha256-<hex>.sbom` holds the SBOM, `REPO:sha256-<hex>.att` the Statement and its
signature. Each is a one-layer image `FROM scratch` holding just those files, built and pushed
through the engine like every other push of this tool (its credentials, its proxy and registry
settings, our retries and deadline, the pushed digest checked), rather than an OCI artifact, which
would need a registry client of our own with each registry's token auth. Anyone lists the files
with `docker create` + `docker cp`, or reads the layer through the registry API (docs/evidence.md)."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from builder.catalog.records import KnownGood
from builder.engine.port import BuildRequest, Engine, EngineFault
from builder.engine.session import OWNER_LABEL, OWNER_VALUE
from builder.publish.publisher import PushNames, push_verified
from builder.util.errors import RunFailure
from builder.util.fsio import dump_json

EVIDENCE = "evidence"  # catalog/evidence/
SBOM_SUFFIX = ".sbom.cdx.json"
STATEMENT_SUFFIX = ".intoto.json"
RECORD_SUFFIX = ".record.json"
SIG = ".sig"
UNSIGNED_FIELDS = ("floating", "notes")  # they change after publish (tags move to a newer record): not vouched for
SBOM_FILE = "sbom.cdx.json"  # names inside the registry's evidence images
STATEMENT_FILE = "attestation.intoto.json"


def sbom_name(image_id: str) -> str:
    return f"{image_id}{SBOM_SUFFIX}"


def statement_name(image_id: str) -> str:
    return f"{image_id}{STATEMENT_SUFFIX}"


def record_name(image_id: str) -> str:
    return f"{image_id}{RECORD_SUFFIX}"


def no_evidence(image_id: str) -> dict[str, str | None]:
    """Every evidence file name of an image, each to be removed (catalog.Catalog.add): what a new
    digest's record starts with, so no earlier digest's SBOM or signature stays beside it."""
    names = (sbom_name(image_id), statement_name(image_id), record_name(image_id))
    return {name: None for name in (*names, statement_name(image_id) + SIG, record_name(image_id) + SIG)}


def signed_fields(record: KnownGood) -> str:
    """What a record's signature covers: every field but the floating tags and the notes, which a
    later publish of the same line rewrites (the digest, lock, base, verdict, host... are all in)."""
    data = record.to_json()
    for name in UNSIGNED_FIELDS:
        data.pop(name, None)
    return dump_json(data)


def evidence_tag(digest: str, kind: str) -> str:
    """cosign's convention: sha256:<hex> -> sha256-<hex>.<kind> (sbom, att)."""
    return f"{digest.replace(':', '-')}.{kind}"


@dataclass(frozen=True)
class Pushed:
    tag: str  # repository:sha256-<hex>.<kind>
    digest: str  # its registry digest


def push_files(
    engine: Engine,
    names: PushNames,
    record: KnownGood,
    kind: str,
    files: Mapping[str, str],
    log: Callable[[str], None],
    deadline: float | None,
) -> Pushed:
    """Build a FROM-scratch image of `files` and push it as REPO:sha256-<hex>.<kind> (checked)."""
    repository, _, digest = record.digest.partition("@")
    tag = evidence_tag(digest, kind)
    local = f"builder-evidence:{digest.removeprefix('sha256:')[:16]}-{kind}-{uuid.uuid4().hex[:12]}"  # this run's own name
    try:
        with tempfile.TemporaryDirectory(prefix="builder-evidence-") as folder:
            root = Path(folder)
            for name, text in sorted(files.items()):
                (root / name).write_text(text, encoding="utf-8")
            (root / "Dockerfile").write_text(f"FROM scratch\nCOPY {' '.join(sorted(files))} /\n", encoding="utf-8")
            labels = {OWNER_LABEL: OWNER_VALUE, "io.builder.evidence-for": record.digest, "io.builder.evidence-kind": kind}
            try:
                for event in engine.build(BuildRequest(path=root, tag=local, labels=labels)):
                    if event.error:
                        raise RunFailure(f"making the {kind} image of {record.id} failed: {event.error[:200]}")
                info = engine.inspect_image(local)
            except EngineFault as exc:
                raise RunFailure(f"making the {kind} image of {record.id} failed: {exc.message[:200]}") from None
        if info is None:
            raise RunFailure(f"making the {kind} image of {record.id} failed: the engine has no {local}")
        pushed = push_verified(engine, names, info.id, repository, tag, log, deadline)
    finally:
        engine.remove_image(local)  # the push name keeps the image until `names` releases it, then it goes
    return Pushed(f"{repository}:{tag}", pushed)
