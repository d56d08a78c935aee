"""Check a record's evidence in catalog/evidence/ against the allowed signers: the record's signed
fields (as catalog/known-good.json holds them now) under its signature, the in-toto Statement under
its own, the Statement's subject being the record's digest, and the SBOM being the one the Statement
names. Any failure is one line (signing.Unverified) naming the record and what is wrong."""

from __future__ import annotations

import hashlib
from pathlib import Path

from builder.catalog.records import KnownGood
from builder.errors import RunFailure, UserError
from builder.fsio import MiB, read_bytes, read_text
from builder.publish import attestation, evidence, signing
from builder.publish.signing import Unverified

MAX_BYTES = 64 * MiB


def verify_record(folder: Path, record: KnownGood, allowed: Path) -> str:
    """The principal that vouched for `record`; Unverified (one line) when its evidence does not hold."""
    what = f"record {record.id!r}"
    signed = evidence.signed_fields(record)
    exported = folder / evidence.record_name(record.id)
    signing.verify(signed.encode(), Path(f"{exported}{evidence.SIG}"), allowed, signing.RECORD_NAMESPACE, f"{what} ({exported.name})")
    if exported.is_file() and _read(exported) != signed:
        raise Unverified(f"{what}: {exported.name} differs from the record in the catalog; restore the catalog from git")
    statement_path = folder / evidence.statement_name(record.id)
    if not statement_path.is_file():
        raise Unverified(f"{what} has no attestation ({statement_path.name}); publish it again")
    statement = _read(statement_path)
    principal = signing.verify(
        statement.encode(), Path(f"{statement_path}{evidence.SIG}"), allowed, signing.ATTESTATION_NAMESPACE, f"the attestation of {what}"
    )
    try:
        subject = attestation.read(statement, str(statement_path))
    except RunFailure as exc:
        raise Unverified(exc.message) from None
    if f"{subject.name}@sha256:{subject.sha256}" != record.digest:
        raise Unverified(f"the attestation of {what} is about {subject.name}@sha256:{subject.sha256[:12]}..., not {record.digest}")
    sbom_path = folder / evidence.sbom_name(record.id)
    if not sbom_path.is_file() or hashlib.sha256(_bounded(sbom_path)).hexdigest() != attestation.sbom_sha256(statement):
        raise Unverified(f"{what}: {sbom_path.name} is missing or is not the SBOM its attestation names")
    return principal


def _bounded(path: Path) -> bytes:
    """An evidence file's bytes, at most MAX_BYTES (an 8 GiB sparse SBOM was read whole: MemoryError);
    past that, or not a regular file, it is evidence that does not hold: Unverified, one line."""
    try:
        return read_bytes(path, MAX_BYTES, "evidence file")
    except UserError as exc:
        raise Unverified(str(exc)) from None


def _read(path: Path) -> str:
    try:
        return read_text(path, MAX_BYTES, "evidence file")
    except UserError as exc:
        raise Unverified(str(exc)) from None
