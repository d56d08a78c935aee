"""Issue 37, item 6 and the evidence part of item 8, offline (the fake engine): publish leaves the
registry and the catalog consistent whatever stops it once the immutable tag is pushed (SIGTERM
while signing or while the tag is read back, a signer past its deadline, a registry gone after the
push), signing errors keep ssh-keygen's own reason, two publishes to one repository take turns,
and evidence reads are bounded. tests/integration/test_publish_races.py does the same against the
real engine and registry."""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from builder.catalog.store import Catalog
from builder.engine.port import EngineFault
from builder.host import facts as hostinfo
from builder.model import results
from builder.publish import evidence, signing
from builder.publish.signing import Unverified
from builder.publish.verify import verify_record
from builder.usecases import publish as publishing
from builder.util.errors import RunFailure
from builder.workspace import Store, Workspace
from tests.catalog_fixtures import smoke
from tests.fake_engine import FakeEngine, connect_to, digest_of
from tests.test_evidence import HOST, REPO, TESTED, make_key, needs_ssh_keygen

ROOT = Path(__file__).resolve().parents[1]
TORCH_CPU = "torch2.13.0-cpu-py3.11-debian12"
FLOATING = (f"{REPO}:torch2.13-cpu-py3.11-debian12", f"{REPO}:torch2.13-cpu")


@pytest.fixture(scope="module")
def spec() -> Any:
    (chosen,) = Workspace.locate(str(ROOT / "matrix.yaml")).selected(f"id={TORCH_CPU}", use_default=False)
    return chosen


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, spec: Any, tmp_path: Path) -> FakeEngine:
    engine = FakeEngine()
    engine.add_image(TESTED, spec.tag)
    engine.add_image("sha256:" + "b" * 64, spec.base.from_ref)
    monkeypatch.setattr(hostinfo, "gather", lambda **kwargs: HOST)
    monkeypatch.setenv("BUILDER_LOCK_DIR", str(tmp_path / "locks"))
    return engine


class Events:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, text: str) -> None:
        self.lines.append(text)

    def done(self, outcome: publishing.Published) -> None: ...


def publish(
    folder: Path, spec: Any, fake: FakeEngine, key: Path | None = None, events: Events | None = None
) -> tuple[publishing.Published, Catalog]:
    results.write(folder / "build" / "results", replace(smoke(spec.id), tag=spec.tag, content_hash=spec.content_hash, image_id=TESTED))
    ws = SimpleNamespace(store=Store(folder), matrix=SimpleNamespace(registry=REPO))
    catalog = Catalog(folder / "catalog")
    options = publishing.PublishOptions(registry=REPO, sign_key=key)
    (outcome,) = publishing.publish(ws, [spec], options, catalog, events or Events(), connect_to(fake))  # type: ignore[arg-type]
    return outcome, catalog


def slow_signer(folder: Path) -> Path:
    """An ssh-keygen that signs the check publish makes before any push at once, then hangs like a
    key waiting for a passphrase on a terminal or a hardware key for a touch."""
    real = signing.ssh_keygen()
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    script = bin_dir / "ssh-keygen"
    script.write_text(
        '#!/bin/sh\ndata=$(cat)\nif [ "$data" = probe ]; then printf probe | ' + real + ' "$@"; exit $?; fi\nexec sleep 30\n',
        encoding="utf-8",
    )
    script.chmod(0o755)
    return bin_dir


def no_push_names(fake: FakeEngine) -> bool:
    return not [n for n in fake.names if n.startswith(REPO) or n.startswith("builder-evidence:")]


# -- the immutable tag is recorded whatever stops the run after its push ------------------------------
@needs_ssh_keygen
def test_sigterm_while_signing_leaves_the_record_of_the_pushed_tag(
    tmp_path: Path, spec: Any, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/commands.md promises a record as soon as the tag is in the registry; a SIGTERM while ssh-keygen
    signed (after the immutable push) left the tag with no record."""
    key, _ = make_key(tmp_path, "ci@example.org")
    real_sign = signing.sign

    def sign(data: bytes, key: Path, namespace: str) -> str:
        if data == b"probe":
            return real_sign(data, key, namespace)
        raise KeyboardInterrupt  # what the CLI turns SIGTERM into (errors.Interrupted)

    monkeypatch.setattr(signing, "sign", sign)
    with pytest.raises(KeyboardInterrupt):
        publish(tmp_path, spec, fake, key)
    assert fake.registry[f"{REPO}:{TORCH_CPU}"] == digest_of(TESTED), "the immutable tag was pushed"
    (stored,) = Catalog(tmp_path / "catalog").load()
    assert stored.digest == f"{REPO}@{digest_of(TESTED)}" and stored.floating == ()
    assert publishing.EVIDENCE_PENDING in stored.notes and any("floating tags not moved" in n for n in stored.notes), stored.notes
    assert (tmp_path / "catalog" / stored.manifest).is_file()
    assert no_push_names(fake)


@needs_ssh_keygen
def test_a_signer_past_its_deadline_is_one_line_naming_key_and_deadline_and_the_record_stays(
    tmp_path: Path, spec: Any, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signer that did not answer was a TimeoutExpired traceback after the immutable push (and no record)."""
    key, _ = make_key(tmp_path, "ci@example.org")
    monkeypatch.setenv("PATH", f"{slow_signer(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(signing, "TIMEOUT_S", 1)
    outcome, catalog = publish(tmp_path, spec, fake, key)
    assert outcome.status == "failed" and "\n" not in outcome.reason
    assert f"signing with {key} did not answer within 1 s" in outcome.reason and "is published and recorded" in outcome.reason
    (stored,) = catalog.load()
    assert stored.digest == outcome.digest == f"{REPO}@{digest_of(TESTED)}"
    assert any(n.startswith(f"no evidence: signing with {key} did not answer") for n in stored.notes), stored.notes
    assert not catalog.evidence.exists() or not any(catalog.evidence.iterdir()), "no evidence of another digest beside it"
    assert no_push_names(fake)


def test_sigterm_while_the_pushed_tag_is_read_back_leaves_its_record(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    fake.registry_fault = KeyboardInterrupt()  # the registry read that follows the push is where SIGTERM lands
    with pytest.raises(KeyboardInterrupt):
        publish(tmp_path, spec, fake)
    (stored,) = Catalog(tmp_path / "catalog").load()
    assert stored.digest == f"{REPO}@{digest_of(TESTED)}" == f"{REPO}@{fake.registry[f'{REPO}:{TORCH_CPU}']}"
    assert any("was not read back" in n and "interrupted" in n for n in stored.notes), stored.notes
    assert no_push_names(fake)


def test_a_registry_gone_right_after_the_push_leaves_the_record_and_says_so(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    fake.registry_fault = EngineFault("Get http://127.0.0.1:5000/v2/: dial tcp 127.0.0.1:5000: connect: connection refused")
    outcome, catalog = publish(tmp_path, spec, fake)
    assert outcome.status == "failed" and "is pushed and recorded, but the registry did not report a digest" in outcome.reason
    (stored,) = catalog.load()
    assert stored.digest == outcome.digest == f"{REPO}@{digest_of(TESTED)}"
    assert any("was not read back" in n for n in stored.notes)


def test_every_step_rewrites_the_record_and_a_finished_publish_has_no_note_left(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    outcome, catalog = publish(tmp_path, spec, fake)
    assert outcome.status == "published", outcome.reason
    (stored,) = catalog.load()
    assert stored.notes == () and set(stored.floating) == set(FLOATING)


def test_an_evidence_push_that_fails_keeps_the_pending_floating_tags_in_the_notes(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    """(The record of a failed evidence push used to drop the note that the floating tags were not moved.)"""
    fake.fail_push = lambda name: "denied: the registry refused it" if name.endswith(".sbom") else None
    outcome, catalog = publish(tmp_path, spec, fake)
    assert outcome.status == "failed" and "its evidence was not pushed" in outcome.reason
    (stored,) = catalog.load()
    assert any(n.startswith("evidence not in the registry") for n in stored.notes)
    assert any(n.startswith("floating tags not moved") for n in stored.notes), stored.notes


# -- signing errors keep ssh-keygen's reason ---------------------------------------------------------
@needs_ssh_keygen
def test_a_key_others_can_read_is_refused_with_ssh_keygens_reason_not_a_passphrase(tmp_path: Path) -> None:
    key, _ = make_key(tmp_path, "ci@example.org")
    key.chmod(0o644)
    with pytest.raises(RunFailure) as caught:
        signing.sign(b"data", key, signing.RECORD_NAMESPACE)
    line = str(caught.value)
    assert "\n" not in line and "are too open" in line and "chmod 600" in line and "passphrase" not in line, line


@needs_ssh_keygen
def test_a_key_with_a_passphrase_says_so_and_names_ssh_agent(tmp_path: Path) -> None:
    import subprocess

    key = tmp_path / "locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "s3cret", "-f", str(key)], check=True)
    with pytest.raises(RunFailure) as caught:
        signing.sign(b"data", key, signing.RECORD_NAMESPACE)
    line = str(caught.value)
    assert "\n" not in line and "passphrase" in line and "ssh-agent" in line, line


# -- two publishes to one repository take turns ------------------------------------------------------
def test_a_second_publish_to_the_repository_waits_for_the_first(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    """Two publishes of one image shared their local push names: one released the other's mid-push (a
    spurious failure, a record saying a floating tag was not moved) and the evidence images of both
    were built under one name (one leaked). The second now waits its turn."""
    first_pushing, second_waiting = threading.Event(), threading.Event()
    second = Events()
    second.info = lambda text: second_waiting.set() if text.startswith("waiting for another publish") else None  # type: ignore[method-assign]

    def hold(name: str) -> None:
        if name == f"{REPO}:{TORCH_CPU}" and not first_pushing.is_set():
            first_pushing.set()
            assert second_waiting.wait(30), "the second publish did not wait"

    fake.before_push = hold
    outcomes: dict[str, publishing.Published] = {}
    thread = threading.Thread(target=lambda: outcomes.update(first=publish(tmp_path / "one", spec, fake)[0]))
    thread.start()
    assert first_pushing.wait(30)
    outcomes["second"] = publish(tmp_path / "two", spec, fake, events=second)[0]
    thread.join(30)
    assert [o.status for o in outcomes.values()] == ["published", "published"], outcomes
    for folder in ("one", "two"):
        (stored,) = Catalog(tmp_path / folder / "catalog").load()
        assert stored.notes == () and set(stored.floating) == set(FLOATING)
    assert no_push_names(fake)
    evidence_builds = [b.tag for b in fake.builds]
    assert len(evidence_builds) == len(set(evidence_builds)) == 4, "each run builds its evidence under its own names"


# -- evidence reads are bounded (item 8) -------------------------------------------------------------
@needs_ssh_keygen
def test_a_huge_sparse_sbom_or_signature_is_one_line_not_a_memory_error_or_a_minute(
    tmp_path: Path, spec: Any, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, allowed_line = make_key(tmp_path, "ci@example.org")
    outcome, catalog = publish(tmp_path, spec, fake, key)
    assert outcome.status == "published", outcome.reason
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(allowed_line)
    (stored,) = catalog.load()
    assert verify_record(catalog.evidence, stored, allowed) == "ci@example.org"
    sbom_path = catalog.evidence / evidence.sbom_name(spec.id)
    with sbom_path.open("r+b") as handle:  # 8 GiB, sparse: nothing on disk, a MemoryError when read whole
        handle.truncate(8 * 2**30)
    with pytest.raises(Unverified, match="larger than 64 MiB") as caught:
        verify_record(catalog.evidence, stored, allowed)
    assert "\n" not in str(caught.value)
    sbom_path.unlink()
    signature = catalog.evidence / (evidence.record_name(spec.id) + evidence.SIG)
    with signature.open("r+b") as handle:  # 1 GiB: ssh-keygen parsed it for a minute, then a TimeoutExpired traceback
        handle.truncate(2**30)
    with pytest.raises(Unverified, match=r"the signature is larger than|is not an SSH signature \(\d+ bytes\)") as caught:
        verify_record(catalog.evidence, stored, allowed)
    assert "\n" not in str(caught.value)


def test_a_signature_that_is_a_fifo_is_refused_in_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "x.record.json.sig"
    os.mkfifo(fifo)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    with pytest.raises(Unverified, match="not a regular file"):
        signing.verify(b"x", fifo, tmp_path / "allowed_signers", signing.RECORD_NAMESPACE, "record 'x'")


@needs_ssh_keygen
def test_a_checker_past_its_deadline_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key, allowed_line = make_key(tmp_path, "ci@example.org")
    signature = tmp_path / "x.sig"
    signature.write_text(signing.sign(b"x", key, signing.RECORD_NAMESPACE))
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(allowed_line)
    monkeypatch.setenv("PATH", f"{slow_signer(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(signing, "TIMEOUT_S", 1)
    with pytest.raises(Unverified, match=r"record 'x': ssh-keygen did not (finish checking its signature|answer) within 1 s"):
        signing.verify(b"x", signature, allowed, signing.RECORD_NAMESPACE, "record 'x'")
