"""The evidence of a published digest, offline: the SBOM (from a fake image listing, schema-valid,
equal to the lock or the publish refuses), the in-toto Statement's shape, and SSH signatures made
with a key this test makes with ssh-keygen: the round trip verifies, and every tampering (unsigned,
one byte changed in the record, the attestation or the SBOM, a key not allowed) is refused in one
line by `pull` and `catalog --verify`."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from builder.catalog.layers import ImageLayer
from builder.catalog.store import Catalog
from builder.engine.port import Layer
from builder.host import facts as hostinfo
from builder.host.facts import AmdInfo, EngineFacts, HostInfo, NvidiaInfo
from builder.model import results
from builder.model.plan import Lock
from builder.publish import attestation, evidence, inventory, sbom, signing
from builder.publish.inventory import DebPackage, Distribution
from builder.publish.signing import Unverified
from builder.publish.verify import signers, verify_record, vouch
from builder.usecases import catalog as catalogs
from builder.usecases import publish as publishing
from builder.usecases import pull as pulling
from builder.util.errors import RunFailure
from builder.workspace import Store, Workspace
from tests.catalog_fixtures import SHA, record, smoke
from tests.fake_engine import BASE_LAYER, FakeEngine, built, connect_to
from tests.fake_registry import published

ROOT = Path(__file__).resolve().parents[1]
TORCH_CPU = "torch2.13.0-cpu-py3.11-debian12"
REPO = "127.0.0.1:5000/evidence"
TESTED = "sha256:" + "a" * 64
HOST = HostInfo(engine=EngineFacts(True, "20.10.24", ()), nvidia=NvidiaInfo(status="absent"), amd=AmdInfo())
LOCK = Lock(
    text="", inputs="", pins=(("numpy", "2.4.6"), ("torch", "2.13.0+cpu")), hashes=(("numpy", ("d" * 64, "e" * 64)), ("torch", ("f" * 64,)))
)
LISTING = "## python\nnumpy\t2.4.6\nTorch\t2.13.0+cpu\npip\t24.0\n## dpkg\nlibc6\t2.36-9\tamd64\npython3.11\t3.11.2-6\tamd64\n"
needs_ssh_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="OpenSSH's ssh-keygen is not installed")


# ---------------------------------------------------------------- SBOM


def test_the_sbom_lists_the_venv_with_the_locks_hashes_and_dpkg_and_is_schema_valid() -> None:
    found = inventory.parse(LISTING, "img")
    assert found.python == (Distribution("numpy", "2.4.6"), Distribution("pip", "24.0"), Distribution("torch", "2.13.0+cpu"))
    assert found.dpkg[0] == DebPackage("libc6", "2.36-9", "amd64")
    text = sbom.make_sbom("img", REPO, f"sha256:{SHA}", found, sbom.lock_pins(LOCK), "2026-12-01T10:05:00Z")
    sbom.validate(text, "img")  # CycloneDX 1.6, the library's strict validator
    doc = json.loads(text)
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
    assert doc["metadata"]["component"]["type"] == "container" and doc["metadata"]["component"]["version"] == f"sha256:{SHA}"
    by_ref = {c["bom-ref"]: c for c in doc["components"]}
    assert by_ref["pypi:numpy"]["purl"] == "pkg:pypi/numpy@2.4.6"
    assert sorted(h["content"] for h in by_ref["pypi:numpy"]["hashes"]) == ["d" * 64, "e" * 64]
    assert {p["name"]: p["value"] for p in by_ref["pypi:pip"]["properties"]} == {"builder:source": "venv"}
    assert by_ref["deb:libc6:amd64"]["purl"] == "pkg:deb/debian/libc6@2.36-9?arch=amd64"
    assert sbom.python_set(text) == {"numpy": "2.4.6", "pip": "24.0", "torch": "2.13.0+cpu"}
    again = sbom.make_sbom("img", REPO, f"sha256:{SHA}", found, sbom.lock_pins(LOCK), "2026-12-01T10:05:00Z")
    assert again == text, "the same image gives the same SBOM bytes (serial number from the digest)"


def test_an_sbom_that_breaks_the_schema_is_refused() -> None:
    text = sbom.make_sbom("img", REPO, f"sha256:{SHA}", inventory.parse(LISTING, "img"), {}, "2026-12-01T10:05:00Z")
    broken = text.replace('"type": "library"', '"type": "lib"', 1)
    with pytest.raises(RunFailure, match=r"img: the SBOM is not valid CycloneDX 1\.6: 'lib' is not one of"):
        sbom.validate(broken, "img")


@pytest.mark.parametrize(
    ("listing", "message"),
    [
        (LISTING.replace("numpy\t2.4.6", "numpy\t2.4.5"), r"numpy is 2\.4\.5 in the image, 2\.4\.6 in the lock"),
        (LISTING.replace("numpy\t2.4.6\n", ""), r"numpy==2\.4\.6 is in the lock but not in the image"),
        (LISTING.replace("pip\t24.0", "pip\t24.0\nrequests\t2.32.0"), r"requests 2\.32\.0 is in the image but not in the lock"),
    ],
)
def test_publish_refuses_an_sbom_whose_python_set_is_not_the_locks(listing: str, message: str) -> None:
    with pytest.raises(RunFailure, match=r"^img: its SBOM differs from requirements\.lock: " + message):
        sbom.check_equal_to_lock(inventory.parse(listing, "img"), sbom.lock_pins(LOCK), "img")
    sbom.check_equal_to_lock(inventory.parse(LISTING, "img"), sbom.lock_pins(LOCK), "img")  # pip (the venv's) is allowed


@pytest.mark.parametrize("listing", ["", "numpy 2.4.6\n", "## python\nnumpy\n"])
def test_a_listing_that_is_not_one_is_refused_in_one_line(listing: str) -> None:
    with pytest.raises(RunFailure, match=r"^img: ") as caught:
        inventory.parse(listing, "img")
    assert "\n" not in caught.value.message


# ---------------------------------------------------------------- the Statement


def test_the_statement_is_in_toto_v1_about_the_digest_with_the_smoke_evidence() -> None:
    rec = record(TORCH_CPU)
    text = attestation.statement(rec, smoke(TORCH_CPU), "{}\n")
    doc = json.loads(text)
    assert doc["_type"] == "https://in-toto.io/Statement/v1" and doc["predicateType"] == attestation.PREDICATE_TYPE
    assert doc["subject"] == [{"name": "127.0.0.1:5000/gpu-images", "digest": {"sha256": SHA}}]
    predicate = doc["predicate"]
    assert predicate["gpu"]["model"] == "no GPU" and predicate["verdict"] == "passed"
    assert predicate["lock"] == {"sha256": "c" * 64} and predicate["base"]["name"] == "local-debian12"
    assert predicate["sbom"]["sha256"] == attestation.sha256_text("{}\n") and predicate["builder"] == {"version": "0.1.0"}
    assert predicate["dates"] == {"tested": rec.tested, "published": rec.published} and "cuda_checks" in predicate and "fit" in predicate
    assert attestation.read(text, "x") == attestation.Subject("127.0.0.1:5000/gpu-images", SHA)
    assert predicate["built"] is None  # not read: said so, never invented
    built = attestation.BuiltImage("sha256:" + "1" * 64, ("sha256:" + "2" * 64, "sha256:" + "3" * 64), True)
    again = json.loads(attestation.statement(rec, smoke(TORCH_CPU), "{}\n", built))["predicate"]["built"]
    assert again == {"image_id": built.image_id, "diff_ids": list(built.diff_ids), "canonical": True}  # what a rebuild compares
    with pytest.raises(RunFailure, match="not an in-toto Statement"):
        attestation.read(text.replace("Statement/v1", "Statement/v0"), "x")


# ---------------------------------------------------------------- signatures


def make_key(folder: Path, principal: str) -> tuple[Path, str]:
    key = folder / principal.split("@")[0]
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", principal, "-f", str(key)], check=True)
    public = " ".join(Path(f"{key}.pub").read_text().split()[:2])
    return key, f"{principal} {public}\n"


@pytest.fixture
def spec() -> Any:
    (chosen,) = Workspace.locate(str(ROOT / "matrix.yaml")).selected(f"id={TORCH_CPU}", use_default=False)
    return chosen


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, spec: Any) -> FakeEngine:
    engine = FakeEngine()
    engine.add_image(TESTED, spec.tag)
    engine.add_image("sha256:" + "b" * 64, spec.base.from_ref)
    monkeypatch.setattr(hostinfo, "gather", lambda **kwargs: HOST)
    return engine


class Events:
    def info(self, text: str) -> None: ...
    def done(self, outcome: publishing.Published) -> None: ...


def publish(tmp_path: Path, spec: Any, fake: FakeEngine, key: Path | None) -> tuple[publishing.Published, Catalog]:
    from dataclasses import replace

    results.write(tmp_path / "build" / "results", replace(smoke(spec.id), tag=spec.tag, content_hash=spec.content_hash, image_id=TESTED))
    ws = SimpleNamespace(store=Store(tmp_path), matrix=SimpleNamespace(registry=REPO))
    catalog = Catalog(tmp_path / "catalog")
    options = publishing.PublishOptions(registry=REPO, sign_key=key)
    (outcome,) = publishing.publish(ws, [spec], options, catalog, Events(), connect_to(fake))  # type: ignore[arg-type]
    return outcome, catalog


def test_publish_stores_and_pushes_the_sbom_and_the_attestation(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    outcome, catalog = publish(tmp_path, spec, fake, None)
    assert outcome.status == "published", outcome.reason
    (rec,) = catalog.load()
    digest = rec.digest.split("@")[1]
    tags = {f"{REPO}:{evidence.evidence_tag(digest, kind)}" for kind in ("sbom", "att")}
    assert tags <= set(fake.registry) and tags <= set(outcome.tags)
    built = sorted(b.tag for b in fake.builds)  # each run names its evidence images its own way (issue 37)
    assert [t.rsplit("-", 1)[0] for t in built] == [f"builder-evidence:{digest[7:23]}-att", f"builder-evidence:{digest[7:23]}-sbom"]
    assert not any(name.startswith("builder-evidence:") for name in fake.names), "the local evidence images are given back"
    folder = catalog.evidence
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [evidence.sbom_name(spec.id), evidence.statement_name(spec.id), evidence.record_name(spec.id)]
    ), "unsigned without --sign-key"
    assert set(sbom.python_set((folder / evidence.sbom_name(spec.id)).read_text())) == {name for name, _ in spec.lock.pins} | {"pip"}
    statement = (folder / evidence.statement_name(spec.id)).read_text()
    assert attestation.read(statement, "s").sha256 == digest.removeprefix("sha256:")


def test_the_record_carries_the_layers_above_its_base_and_its_export_vouches_for_them(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    nvidia, venv = b"the NVIDIA wheels' layer", b"the venv layer"
    fake.layers[TESTED] = [BASE_LAYER, nvidia, venv]
    fake.histories[TESTED] = [Layer("LABEL x", 0), Layer("ADD venv.tar /", 300), Layer("ADD nvidia.tar /", 2_500), Layer("", 169)]
    outcome, catalog = publish(tmp_path, spec, fake, None)
    assert outcome.status == "published", outcome.reason
    (rec,) = catalog.load()
    assert rec.layers == tuple(
        ImageLayer("sha256:" + hashlib.sha256(layer).hexdigest(), size) for layer, size in ((nvidia, 2_500), (venv, 300))
    )
    exported = json.loads((catalog.evidence / evidence.record_name(spec.id)).read_text())
    assert exported["layers"] == [layer.to_json() for layer in rec.layers], "the signed export holds them"


def test_a_history_that_does_not_pair_with_the_layers_records_none(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    fake.layers[TESTED] = [BASE_LAYER, b"one layer"]
    fake.histories[TESTED] = [Layer("ADD venv.tar /", 300), Layer("RUN true", 7), Layer("", 169)]
    outcome, catalog = publish(tmp_path, spec, fake, None)
    assert outcome.status == "published", outcome.reason
    (rec,) = catalog.load()
    assert rec.layers is None and "layers" not in rec.to_json(), "not measured: said so, never guessed"


def test_publish_refuses_an_image_whose_venv_is_not_its_lock_before_any_push(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    fake.inventory = lambda container: "## python\npip\t24.0\nnumpy\t1.0\n## dpkg\n"
    outcome, catalog = publish(tmp_path, spec, fake, None)
    assert outcome.status == "failed" and "its SBOM differs from requirements.lock" in outcome.reason
    assert fake.pushes == [] and catalog.load() == ()


@needs_ssh_keygen
def test_signed_evidence_verifies_and_every_tampering_is_refused(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    key, allowed_line = make_key(tmp_path, "ci@example.org")
    contexts: list[list[str]] = []
    fake.build_output = lambda request: contexts.append(sorted(os.listdir(request.path))) or built(request)  # type: ignore[func-returns-value]
    outcome, catalog = publish(tmp_path, spec, fake, key)
    assert outcome.status == "published", outcome.reason
    assert contexts == [
        ["Dockerfile", "sbom.cdx.json"],
        ["Dockerfile", "attestation.intoto.json", "attestation.intoto.json.sig"],
    ], "the evidence images hold the evidence and nothing else: never the key"
    assert key.name not in {p.name for p in catalog.root.rglob("*")}, "the key is not copied anywhere we write"
    allowed = catalog.root / signing.ALLOWED_SIGNERS
    allowed.write_text(allowed_line)
    (rec,) = catalog.load()
    assert verify_record(catalog.evidence, rec, allowed) == "ci@example.org"
    chosen = signers(catalog, None, True)
    assert chosen.path == allowed, "catalog/allowed_signers is used by default"
    assert vouch(catalog, rec, chosen) == "signatures verified (signed by ci@example.org)"
    registry = published(catalog)
    (checked,) = catalogs.verify(catalog, [rec], chosen, registry)
    assert checked.ok and checked.detail == "signatures verified (signed by ci@example.org); the registry's tags match", checked.detail
    # plain OpenSSH verifies the exported files, without this tool
    statement = catalog.evidence / evidence.statement_name(spec.id)
    plain = subprocess.run(
        ["ssh-keygen", "-Y", "verify", "-f", str(allowed), "-I", "ci@example.org", "-n", signing.ATTESTATION_NAMESPACE,
         "-s", f"{statement}.sig"], input=statement.read_bytes(), capture_output=True, check=False,
    )  # fmt: skip
    assert plain.returncode == 0, plain.stderr

    def refused(match: str) -> None:
        (current,) = catalog.load()
        with pytest.raises(Unverified, match=match) as caught:
            pulling.pull(catalog, f"id={spec.id}", log=lambda line: None, connect=connect_to(fake))
        assert "\n" not in caught.value.message
        (bad,) = catalogs.verify(catalog, [current], signers(catalog, None, True), registry)
        assert not bad.ok and bad.detail == caught.value.message

    known = catalog.file.read_text()
    catalog.file.write_text(known.replace(rec.digest[-6:], rec.digest[-6:-1] + ("0" if rec.digest[-1] != "0" else "1"), 1))
    refused(r"does not match .*record\.json\.sig: it was changed after it was signed")
    catalog.file.write_text(known)

    original = statement.read_bytes()
    statement.write_bytes(original.replace(b'"passed"', b'"passeD"', 1))
    refused(r"the attestation of record .* does not match .*intoto\.json\.sig")
    statement.write_bytes(original)

    sbom_file = catalog.evidence / evidence.sbom_name(spec.id)
    sbom_bytes = sbom_file.read_bytes()
    sbom_file.write_bytes(sbom_bytes.replace(b"pkg:pypi/", b"pkg:pypI/", 1))
    refused(r"sbom\.cdx\.json is missing or is not the SBOM its attestation names")
    sbom_file.write_bytes(sbom_bytes)

    signature = Path(f"{statement}.sig")
    signature_bytes = signature.read_bytes()
    signature.write_bytes(b"x" * (signing.MAX_SIGNATURE + 1))  # a 1 GiB .sig kept ssh-keygen busy for its whole deadline
    refused(r"intoto\.json\.sig is not an SSH signature \(16385 bytes\)")
    signature.unlink()
    os.mkfifo(signature)  # a FIFO: refused at once, not read
    refused(r"intoto\.json\.sig is not an SSH signature \(not a regular file\)")
    signature.unlink()
    signature.write_bytes(signature_bytes)

    _, stranger = make_key(tmp_path, "stranger@example.org")
    allowed.write_text(stranger)
    refused(r"is not by a key in .*allowed_signers")
    allowed.write_text(allowed_line)

    signature = Path(f"{catalog.evidence / evidence.record_name(spec.id)}.sig")
    signature.unlink()
    refused(r"is unsigned \(no .*record\.json\.sig\)")
    fake_pulls = list(fake.pulls)
    assert fake_pulls == [], "nothing is pulled for a record that does not verify"


@needs_ssh_keygen
def test_an_unsigned_publish_removes_an_earlier_signature_and_pull_without_allowed_signers_says_not_verified(
    tmp_path: Path, spec: Any, fake: FakeEngine
) -> None:
    key, _ = make_key(tmp_path, "ci@example.org")
    publish(tmp_path, spec, fake, key)
    outcome, catalog = publish(tmp_path, spec, fake, None)
    assert outcome.status == "published"
    assert not any(p.name.endswith(".sig") for p in catalog.evidence.iterdir())
    (rec,) = catalog.load()
    chosen = signers(catalog, None, True)
    assert chosen.path is None and vouch(catalog, rec, chosen) == "not verified: the catalog has no signatures and no allowed_signers"


def test_a_key_that_is_not_a_file_stops_publish_before_anything(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    from builder.util.errors import UserError

    with pytest.raises(UserError, match="--sign-key .*: no such key file"):
        publish(tmp_path, spec, fake, tmp_path / "missing")
    assert fake.pushes == []
