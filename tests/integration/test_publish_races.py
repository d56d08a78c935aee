"""Issue 37, item 6, with the real engine and the local registry (127.0.0.1:5000): whatever stops a
publish once its immutable tag is in the registry (SIGTERM while the attestation is signed, a signer
past its deadline, a registry gone right after the push) leaves a record of that tag, and two
publishes of one image at once both succeed, agree with the registry and leave no push name and no
evidence image behind. The tested image is test_publish_attacks.py's small one (h5a-* names), so
nothing here builds; every name carries that module's run id and is removed afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker import DockerClient

from builder.catalog.store import Catalog
from builder.engine import client as engine
from builder.publish import signing
from builder.usecases import publish as publishing
from tests.integration import test_publish_attacks as attacks
from tests.integration.registry_faults import proxy, terminate_when
from tests.integration.test_publish_attacks import FLOATING, IMAGE_ID, RUN, Events, local_names, registry_digest

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE_LABEL = "io.builder.evidence-for"
images = attacks.images  # the fixtures of test_publish_attacks.py: its small tested image, a workspace with its result
workspace = attacks.workspace

SCRIPT = """
import signal, sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from builder.catalog.store import Catalog
from builder.engine import client as engine
from builder.util.errors import Interrupted
from builder.usecases import publish as publishing
from builder.workspace import Store
from tests.integration import test_publish_attacks as t
def interrupt(signum, frame):
    raise Interrupted(signum)
signal.signal(signal.SIGTERM, interrupt)
publishing.hostinfo.gather = lambda **kwargs: t.HOST
spec = t.make_spec_for(sys.argv[4])
ws = SimpleNamespace(store=Store(Path(sys.argv[1]).parent), matrix=SimpleNamespace(registry=t.BUILD_REPO))
key = Path(sys.argv[5]) if len(sys.argv) > 5 else None
try:
    (outcome,) = publishing.publish(ws, [spec], publishing.PublishOptions(registry=sys.argv[2], sign_key=key), Catalog(Path(sys.argv[3])), t.Events())
except Interrupted:
    sys.exit(143)
print(outcome.status, outcome.reason, flush=True)
sys.exit(0 if outcome.status == "published" else 1)
"""


@pytest.fixture(scope="module", autouse=True)
def no_evidence_left(docker_client: DockerClient) -> Iterator[None]:
    """Whatever a failing test leaves, the evidence images of this run's repositories go afterwards."""
    yield
    for image in docker_client.api.images(all=True, filters={"label": EVIDENCE_LABEL}):
        if f"-{RUN}@" in str((image.get("Labels") or {}).get(EVIDENCE_LABEL, "")):
            for name in image.get("RepoTags") or []:
                engine.remove_image_quietly(docker_client, name)
            engine.remove_image_quietly(docker_client, str(image["Id"]))


def start(workspace: Any, repository: str, catalog: Path, env: dict[str, str], key: Path | None = None) -> subprocess.Popen[str]:
    args = [sys.executable, "-c", SCRIPT, str(workspace.build_dir), repository, str(catalog), RUN, *([str(key)] if key else [])]
    return subprocess.Popen(args, cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def evidence_images(client: DockerClient, repository: str) -> list[str]:
    """Local images of the evidence of anything pushed to `repository` (any run's)."""
    return sorted(
        str(i["Id"])
        for i in client.api.images(all=True, filters={"label": EVIDENCE_LABEL})
        if str((i.get("Labels") or {}).get(EVIDENCE_LABEL, "")).startswith(f"{repository}@")
    )


def make_key(folder: Path) -> Path:
    key = folder / "signer"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ci@example.org", "-f", str(key)], check=True)
    return key


def slow_signer(folder: Path) -> Path:
    """ssh-keygen that signs publish's check before any push at once, then hangs (a key waiting for a touch)."""
    real = signing.ssh_keygen()
    bin_dir = folder / "slow-bin"
    bin_dir.mkdir()
    script = bin_dir / "ssh-keygen"
    script.write_text(f'#!/bin/sh\ndata=$(cat)\nif [ "$data" = probe ]; then printf probe | {real} "$@"; exit $?; fi\nexec sleep 120\n')
    script.chmod(0o755)
    return bin_dir


def test_sigterm_while_signing_leaves_the_pushed_tag_recorded(workspace: Any, docker_client: DockerClient, tmp_path: Path) -> None:
    name = f"h5a-signterm-{RUN}"
    repository = f"127.0.0.1:5000/{name}"
    env = {**os.environ, "PATH": f"{slow_signer(tmp_path)}{os.pathsep}{os.environ['PATH']}", "BUILDER_LOCK_DIR": str(tmp_path / "locks")}
    proc = start(workspace, repository, workspace.catalog.root, env, make_key(tmp_path))
    # a second after the tag is in the registry: its record is written, the signer hangs
    err = terminate_when(proc, lambda: registry_digest(name, IMAGE_ID) is not None, "the immutable tag was never pushed", settle_s=1)
    pushed = registry_digest(name, IMAGE_ID)
    assert proc.returncode == 143, err[-2000:]
    (record,) = workspace.catalog.load()
    assert record.digest == f"{repository}@{pushed}", "the record names what the registry holds"
    assert publishing.EVIDENCE_PENDING in record.notes and record.floating == (), record.notes
    assert [registry_digest(name, line) for line in FLOATING] == [None, None]
    assert local_names(docker_client, repository) == [] and evidence_images(docker_client, repository) == []


def test_a_signer_past_its_deadline_is_one_line_and_the_tag_is_recorded(
    workspace: Any, docker_client: DockerClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"h5a-slowsign-{RUN}"
    repository = f"127.0.0.1:5000/{name}"
    key = make_key(tmp_path)
    monkeypatch.setenv("PATH", f"{slow_signer(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("BUILDER_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setattr(signing, "TIMEOUT_S", 2)
    (outcome,) = publishing.publish(
        workspace, [workspace.spec], publishing.PublishOptions(registry=repository, sign_key=key), workspace.catalog, Events()
    )
    assert outcome.status == "failed" and "\n" not in outcome.reason
    assert f"signing with {key} did not answer within 2 s" in outcome.reason, outcome.reason
    (record,) = workspace.catalog.load()
    assert record.digest == outcome.digest == f"{repository}@{registry_digest(name, IMAGE_ID)}"
    assert any(note.startswith("no evidence: signing with") for note in record.notes)
    assert local_names(docker_client, repository) == [] and evidence_images(docker_client, repository) == []


def test_a_registry_gone_after_the_push_leaves_the_record(workspace: Any, docker_client: DockerClient, tmp_path: Path) -> None:
    """The registry answers the push, then never again (a proxy that fails every manifest read)."""
    name = f"h5a-gone-{RUN}"
    with proxy(lambda method, path: "500" if method in ("GET", "HEAD") and f"/manifests/{IMAGE_ID}" in path else None) as fault:
        repository = f"127.0.0.1:{fault.port}/{name}"
        (outcome,) = publishing.publish(
            workspace, [workspace.spec], publishing.PublishOptions(registry=repository), workspace.catalog, Events()
        )
    assert outcome.status == "failed" and "is pushed and recorded, but the registry did not report a digest" in outcome.reason, outcome
    (record,) = workspace.catalog.load()
    assert record.digest == f"{repository}@{registry_digest(name, IMAGE_ID)}"
    assert any("was not read back" in note for note in record.notes)
    assert local_names(docker_client, repository) == []


def test_two_publishes_of_one_image_at_once_both_succeed_and_leave_nothing(
    workspace: Any, docker_client: DockerClient, tmp_path: Path
) -> None:
    """They shared their local push names: one failed spuriously (its record: a floating tag not
    moved) and evidence images leaked every time. Now the second waits its turn."""
    name = f"h5a-twice-{RUN}"
    repository = f"127.0.0.1:5000/{name}"
    env = {**os.environ, "BUILDER_LOCK_DIR": str(tmp_path / "locks")}
    catalogs = [tmp_path / "one", tmp_path / "two"]
    procs = [start(workspace, repository, folder, env) for folder in catalogs]
    try:
        outputs = [proc.communicate(timeout=300) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    immutable = registry_digest(name, IMAGE_ID)
    assert [registry_digest(name, line) for line in FLOATING] == [immutable, immutable]
    for folder in catalogs:
        (record,) = Catalog(folder).load()
        assert record.digest == f"{repository}@{immutable}" and record.notes == () and len(record.floating) == 2, record
    assert local_names(docker_client, repository) == [], "no push name is left behind"
    assert evidence_images(docker_client, repository) == [], "no evidence image is left behind"
