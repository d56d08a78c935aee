"""Check a record's evidence, failing closed: in catalog/evidence/ against the allowed signers (the
record's signed fields as catalog/known-good.json holds them now under their signature, the in-toto
Statement under its own, its subject being the record's digest, the SBOM being the one it names),
and in the registry (the record's immutable and floating tags pointing at its digest, the
`sha256-<hex>.sbom` / `.att` tags holding those same evidence bytes). Any failure is one line
naming the record, or the tag, and what is wrong.

Who decides whether signatures are checked is `signers`, the one policy pull, catalog --verify and
every `env` command share: a signers file that is named (or present) but unusable is an error
(exit 2), a signed catalog without one is refused, and only `--no-verify` turns the check off."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import zlib
from collections.abc import Mapping
from pathlib import Path

from builder.catalog.indexes import DOCKER_LIST, OCI_INDEX
from builder.catalog.records import KnownGood
from builder.catalog.store import Catalog
from builder.engine.port import EngineFault
from builder.engine.registry import Manifest, Registry
from builder.publish import attestation, evidence, signing
from builder.publish.signing import Signers, Unverified
from builder.util.errors import RunFailure, UserError
from builder.util.fsio import MiB, read_bytes

MAX_BYTES = 64 * MiB  # one evidence file (a CUDA image's SBOM, with every dpkg package, is a few MB)
MAX_LAYER = 64 * MiB  # an evidence image's layer, compressed and unpacked alike
NOT_VERIFIED = "not verified"
INDEXES = (OCI_INDEX, DOCKER_LIST)


# -- who signs ---------------------------------------------------------------------------------------


def signers(catalog: Catalog, given: Path | None, check: bool) -> Signers:
    """The allowed signers to check against (pull, catalog --verify and the env commands alike).
    `check` False (--no-verify): none, said so. Else the file signing.allowed_signers finds (a bad
    one is exit 2); none found is refused when any record of the catalog carries a signature
    (deleting catalog/allowed_signers must not switch verification off), and said when none does."""
    if not check:
        return Signers(None, f"{NOT_VERIFIED} (--no-verify)")
    path = signing.allowed_signers(catalog.root, given)
    if path is not None:
        return Signers(path)
    if _signed(catalog.evidence):
        raise UserError(
            "records are signed; give --allowed-signers or --no-verify "
            f"(or restore {signing.ALLOWED_SIGNERS} from git; ${signing.ALLOWED_SIGNERS_ENV} names one too)",
            str(catalog.root / signing.ALLOWED_SIGNERS),
        )
    return Signers(None, f"{NOT_VERIFIED}: the catalog has no signatures and no {signing.ALLOWED_SIGNERS}")


def _signed(folder: Path) -> bool:
    """Whether catalog/evidence/ holds any signature (of any record)."""
    try:
        with os.scandir(folder) as entries:
            return any(entry.name.endswith(evidence.SIG) for entry in entries)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise UserError(f"cannot list the evidence folder ({exc.strerror}); restore catalog/evidence/ from git", str(folder)) from None


def vouch(catalog: Catalog, record: KnownGood, chosen: Signers) -> str:
    """The line saying what was verified of `record`: `signatures verified (signed by P)`, or why
    nothing was; Unverified (one line, exit 1) when its evidence does not hold."""
    if chosen.path is None:
        return chosen.why
    return f"signatures verified (signed by {verify_record(catalog.evidence, record, chosen.path)})"


# -- the local evidence ------------------------------------------------------------------------------


def verify_record(folder: Path, record: KnownGood, allowed: Path) -> str:
    """The principal that vouched for `record`; Unverified (one line) when its evidence does not hold."""
    what = f"record {record.id!r}"
    signed = evidence.signed_fields(record)
    exported = folder / evidence.record_name(record.id)
    signing.verify(signed.encode(), Path(f"{exported}{evidence.SIG}"), allowed, signing.RECORD_NAMESPACE, f"{what} ({exported.name})")
    if exported.exists() and _read(exported, what) != signed.encode():
        raise Unverified(f"{what}: {exported.name} differs from the record in the catalog; restore the catalog from git")
    statement_path = folder / evidence.statement_name(record.id)
    if not statement_path.exists():
        raise Unverified(f"{what} has no attestation ({statement_path.name}); publish it again")
    statement = _text(_read(statement_path, what), statement_path, what)
    principal = signing.verify(
        statement.encode(), Path(f"{statement_path}{evidence.SIG}"), allowed, signing.ATTESTATION_NAMESPACE, f"the attestation of {what}"
    )
    subject = _subject(statement, statement_path)
    if f"{subject.name}@sha256:{subject.sha256}" != record.digest:
        raise Unverified(f"the attestation of {what} is about {subject.name}@sha256:{subject.sha256[:12]}..., not {record.digest}")
    sbom_path = folder / evidence.sbom_name(record.id)
    if not sbom_path.exists() or hashlib.sha256(_read(sbom_path, what)).hexdigest() != attestation.sbom_sha256(statement):
        raise Unverified(f"{what}: {sbom_path.name} is missing or is not the SBOM its attestation names")
    return principal


def _read(path: Path, what: str, limit: int = MAX_BYTES) -> bytes:
    """An evidence file's bytes: a regular file of at most `limit` (an 8 GiB sparse SBOM or a FIFO
    is one line, not a MemoryError or a hang)."""
    try:
        return read_bytes(path, limit, "evidence file")
    except UserError as exc:
        raise Unverified(f"{what}: {exc}") from None


def _text(data: bytes, path: Path, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Unverified(f"{what}: {path.name} is not UTF-8 text; restore catalog/evidence/ from git") from None


def _subject(statement: str, path: Path) -> attestation.Subject:
    try:
        return attestation.read(statement, str(path))
    except RunFailure as exc:
        raise Unverified(exc.message) from None


# -- the registry ------------------------------------------------------------------------------------


def registry_findings(registry: Registry, catalog: Catalog, record: KnownGood) -> list[str]:
    """Each way the registry disagrees with `record` and its local evidence, one line per tag: the
    immutable and floating tags must point at the record's digest (or, for a name published for
    several platforms, at an index that lists it for the record's platform); `sha256-<hex>.sbom`
    must hold the SBOM the attestation names and `sha256-<hex>.att` the attestation itself (and its
    signature) byte for byte. A registry that cannot be read is one line for the record."""
    repository, _, digest = record.digest.partition("@")
    out: list[str] = []
    try:
        for tag in (record.tag, *record.floating):
            name, colon, line = tag.rpartition(":")
            if not colon or name != repository:
                out.append(f"{tag}: not a tag of {repository} (the record's repository); restore the catalog from git")
                continue
            problem = _points_at(registry, repository, line, record)
            if problem:
                out.append(f"{tag}: {problem}")
        out += _evidence_findings(registry, catalog.evidence, record)
    except Unverified as exc:  # the local evidence to compare with cannot be read
        out.append(f"{repository}:{evidence.evidence_tag(digest, 'att')}: not checked: {exc.message}")
    except EngineFault as exc:  # the registry itself: unreachable, refusing, failing
        out.append(f"{repository}: the registry cannot be read: {' '.join(exc.message.split())[:200]}")
    return out


def _manifest(registry: Registry, repository: str, tag: str) -> Manifest | str:
    """The manifest at repository:tag, or the line for a tag that is not there; EngineFault otherwise."""
    try:
        return registry.manifest(repository, tag)
    except EngineFault as exc:
        if exc.status == 404:
            return "not in the registry (deleted?); publish the record again"
        raise


def _points_at(registry: Registry, repository: str, tag: str, record: KnownGood) -> str | None:
    digest = record.digest.partition("@")[2]
    manifest = _manifest(registry, repository, tag)
    if isinstance(manifest, str):
        return manifest
    if manifest.digest == digest:
        return None
    if manifest.media_type in INDEXES and digest in _index_entries(manifest.body).get(record.platform, ()):
        return None  # the name of several platforms: its index lists this record's digest for its platform
    return f"points at {manifest.digest}, not the record's {digest}: the tag was moved to another image"


def _index_entries(body: bytes) -> dict[str, tuple[str, ...]]:
    """platform -> the digests an image index (or manifest list) names for it; {} when it is not one."""
    try:
        doc = json.loads(body)
    except ValueError:
        return {}
    out: dict[str, list[str]] = {}
    for entry in doc.get("manifests", []) if isinstance(doc, dict) and isinstance(doc.get("manifests"), list) else []:
        platform = entry.get("platform") if isinstance(entry, dict) else None
        if isinstance(platform, dict) and isinstance(entry.get("digest"), str):
            out.setdefault(f"{platform.get('os')}/{platform.get('architecture')}", []).append(entry["digest"])
    return {platform: tuple(digests) for platform, digests in out.items()}


def _evidence_findings(registry: Registry, folder: Path, record: KnownGood) -> list[str]:
    """The .sbom and .att tags against the local evidence (whose signatures `vouch` checks)."""
    repository, _, digest = record.digest.partition("@")
    statement_path = folder / evidence.statement_name(record.id)
    tags = {kind: f"{repository}:{evidence.evidence_tag(digest, kind)}" for kind in ("sbom", "att")}
    if not statement_path.exists():
        return [f"{tags['att']}: not checked: the catalog has no attestation of {record.id} ({statement_path.name}) to compare it with"]
    statement = _read(statement_path, f"record {record.id!r}")
    named_sbom = attestation.sbom_sha256(_text(statement, statement_path, f"record {record.id!r}"))
    signature = Path(f"{statement_path}{evidence.SIG}")
    wanted_att = {evidence.STATEMENT_FILE: statement}
    if signature.exists():
        wanted_att[evidence.STATEMENT_FILE + evidence.SIG] = _read(signature, f"record {record.id!r}", signing.MAX_SIGNATURE)
    out = []
    sbom_files = _evidence_files(registry, repository, evidence.evidence_tag(digest, "sbom"))
    if isinstance(sbom_files, str):
        out.append(f"{tags['sbom']}: {sbom_files}")
    elif set(sbom_files) != {evidence.SBOM_FILE}:
        out.append(f"{tags['sbom']}: holds {_names(sbom_files)}, not just {evidence.SBOM_FILE}: it is not the evidence publish pushed")
    elif hashlib.sha256(sbom_files[evidence.SBOM_FILE]).hexdigest() != named_sbom:
        out.append(
            f"{tags['sbom']}: its {evidence.SBOM_FILE} is not the SBOM the signed attestation names (sha256 differs): forged or replaced"
        )
    att_files = _evidence_files(registry, repository, evidence.evidence_tag(digest, "att"))
    if isinstance(att_files, str):
        out.append(f"{tags['att']}: {att_files}")
    elif set(att_files) != set(wanted_att):
        out.append(f"{tags['att']}: holds {_names(att_files)}, not {_names(wanted_att)}: it is not the evidence publish pushed")
    else:
        differ = [name for name in sorted(wanted_att) if att_files[name] != wanted_att[name]]
        if differ:
            out.append(f"{tags['att']}: its {', '.join(differ)} differs from catalog/evidence/'s: forged or replaced")
    return out


def _names(files: Mapping[str, bytes]) -> str:
    return ", ".join(sorted(files)[:5]) or "no files"


def _evidence_files(registry: Registry, repository: str, tag: str) -> dict[str, bytes] | str:
    """The regular files of an evidence image (one layer FROM scratch) by name, or what is wrong."""
    manifest = _manifest(registry, repository, tag)
    if isinstance(manifest, str):
        return manifest
    try:
        doc = json.loads(manifest.body)
    except ValueError:
        doc = None
    layers = doc.get("layers") if isinstance(doc, dict) else None
    if not isinstance(layers, list) or len(layers) != 1 or not isinstance(layers[0], dict) or not isinstance(layers[0].get("digest"), str):
        count = len(layers) if isinstance(layers, list) else "no"
        return f"is not an evidence image ({count} layers, {manifest.media_type or 'no media type'}): it was replaced"
    try:
        blob = registry.blob(repository, layers[0]["digest"], MAX_LAYER)
    except EngineFault as exc:
        if exc.status == 404:
            return "its layer is not in the registry"
        return f"its layer cannot be read: {' '.join(exc.message.split())[:200]}"
    try:
        return _unpack(blob)
    except ValueError as exc:
        return f"its layer is not a tar of files ({exc})"


def _unpack(blob: bytes) -> dict[str, bytes]:
    """A layer's regular files (gzip'd or plain tar), at most MAX_LAYER bytes unpacked."""
    data = blob
    if blob[:2] == b"\x1f\x8b":
        inflate = zlib.decompressobj(wbits=31)
        try:
            data = inflate.decompress(blob, MAX_LAYER + 1)
        except zlib.error as exc:
            raise ValueError(f"damaged gzip: {exc}") from None
        if len(data) > MAX_LAYER or inflate.unconsumed_tail:
            raise ValueError(f"larger than {MAX_LAYER // MiB} MiB unpacked")
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            out: dict[str, bytes] = {}
            for member in tar.getmembers():
                if member.isdir():
                    continue
                handle = tar.extractfile(member) if member.isfile() else None
                name = member.name.removeprefix("./")
                out[name] = handle.read() if handle is not None else b"(not a regular file)"
            return out
    except tarfile.TarError as exc:
        raise ValueError(str(exc)[:120]) from None
