"""The registry's side of verification (issue 37, item 2) with the real engine and the local registry
(127.0.0.1:5000): a signed publish, then what an attacker with push rights does to the registry:
the immutable and a floating tag moved to another image, the `.sbom` tag replaced by a forged SBOM
and the `.att` tag by a forged attestation (pushed through the engine, as anyone's push is).
`builder catalog --verify` says one line per tag, exit 1; `builder pull` still pulls by digest and
says which readable tags no longer point at it. Small images made from the host's binaries
(registry_faults.mini_image) stand in for built ones; every name is s37a-*.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from docker import DockerClient

from builder.catalog.store import Catalog
from builder.engine import client as engine
from builder.host import facts as hostinfo
from builder.host.facts import AmdInfo, EngineFacts, HostInfo, NvidiaInfo
from builder.model import results
from builder.model.results import GpuUse, SmokeResult, TestCounts
from builder.publish import evidence
from builder.usecases import publish as publishing
from builder.workspace import Store, Workspace
from tests.integration.registry_faults import mini_image

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
RUN = uuid.uuid4().hex[:8]
IMAGE_ID = "torch2.13.0-cpu-py3.11-debian12"
BUILD_REPO = f"127.0.0.1:5000/s37a-build-{RUN}"
NAME = f"s37a-ev-{RUN}"
REPOSITORY = f"127.0.0.1:5000/{NAME}"
HOST = HostInfo(engine=EngineFacts(True, "20.10.24", ()), nvidia=NvidiaInfo(status="absent"), amd=AmdInfo())
SIGNER = "ci@example.org"


class Events:
    def info(self, text: str) -> None: ...
    def done(self, outcome: publishing.Published) -> None: ...


def builder(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "BUILDER_ALLOWED_SIGNERS"}
    return subprocess.run(
        [sys.executable, "-m", "builder", "--matrix", str(ROOT / "matrix.yaml"), *args],
        cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def push_files(client: DockerClient, tag: str, files: dict[str, bytes]) -> None:
    """A FROM-scratch image of `files` pushed as `tag` (what an attacker with push rights can do)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        dockerfile = f"FROM scratch\nCOPY {' '.join(sorted(files))} /\n".encode()
        for name, data in {**files, "Dockerfile": dockerfile}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    repository, _, name = tag.rpartition(":")
    client.images.build(fileobj=io.BytesIO(buf.getvalue()), custom_context=True, tag=tag, rm=True)
    client.images.push(repository, tag=name)


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory, docker_client: DockerClient) -> Iterator[SimpleNamespace]:
    """The tested image published, signed, to its own repository and catalog; the other image to move tags to."""
    folder = tmp_path_factory.mktemp("s37a")
    (real,) = Workspace.locate(str(ROOT / "matrix.yaml")).selected(f"id={IMAGE_ID}", use_default=False)
    spec = replace(real, tag=f"{BUILD_REPO}:{IMAGE_ID}", base=replace(real.base, local_repository=f"s37a-base-{RUN}"))
    assert spec.lock is not None
    dists = "".join(f"{name}\t{version}\n" for name, version in spec.lock.pins)  # its venv is its lock: the SBOM check passes
    tested = mini_image(docker_client, BUILD_REPO, IMAGE_ID, f"tested-{RUN}", padding=4096, dists=dists)
    other = mini_image(docker_client, f"s37a-other-{RUN}", "latest", f"other-{RUN}", padding=4096)
    docker_client.api.tag(other, f"s37a-base-{RUN}/debian12", tag="latest")  # the record names a base the engine has
    key = folder / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", SIGNER, "-f", str(key)], check=True)
    result = SmokeResult(
        spec.id, spec.tag, "passed", GpuUse(False, "cpu image: no GPU needed"), 1.0, TestCounts(9, 0, 0, 1),
        content_hash=spec.content_hash, image_id=tested, returncode=0, vendor="cpu",
    )  # fmt: skip
    results.write(folder / "build" / "results", result)
    catalog = Catalog(folder / "catalog")
    ws = SimpleNamespace(store=Store(folder), matrix=SimpleNamespace(registry=BUILD_REPO))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hostinfo, "gather", lambda **kwargs: HOST)
        options = publishing.PublishOptions(registry=REPOSITORY, sign_key=key)
        (outcome,) = publishing.publish(ws, [spec], options, catalog, Events())  # type: ignore[arg-type]
    assert outcome.status == "published", outcome.reason
    (catalog.root / "allowed_signers").write_text(f"{SIGNER} {' '.join(Path(f'{key}.pub').read_text().split()[:2])}\n")
    yield SimpleNamespace(catalog=catalog, other=other, tested=tested)
    for image in docker_client.api.images():
        for ref in (image.get("RepoTags") or []) + (image.get("RepoDigests") or []):
            if RUN in ref:
                engine.remove_image_quietly(docker_client, ref)
    for image in (tested, other):
        engine.remove_image_quietly(docker_client, image)


def test_moved_tags_and_forged_evidence_in_the_registry_are_each_one_line(published: SimpleNamespace, docker_client: DockerClient) -> None:
    catalog: Catalog = published.catalog
    done = builder("catalog", "--verify", "--format", "json", "--catalog", str(catalog.root))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (record,) = catalog.load()
    checked = json.loads(done.stdout)["verify"][IMAGE_ID]
    assert checked == {"ok": True, "detail": f"signatures verified (signed by {SIGNER}); the registry's tags match", "findings": []}

    digest = record.digest.partition("@")[2]
    assert len(record.floating) == 2
    for tag in (record.tag, record.floating[0]):  # moved to another image
        repository, _, name = tag.rpartition(":")
        docker_client.api.tag(published.other, repository, tag=name)
        docker_client.images.push(repository, tag=name)
    statement = (catalog.evidence / evidence.statement_name(IMAGE_ID)).read_bytes()
    signature = (catalog.evidence / f"{evidence.statement_name(IMAGE_ID)}.sig").read_bytes()
    sbom_tag, att_tag = (f"{REPOSITORY}:{evidence.evidence_tag(digest, kind)}" for kind in ("sbom", "att"))
    push_files(docker_client, sbom_tag, {evidence.SBOM_FILE: b'{"bomFormat": "CycloneDX", "forged": true}\n'})
    forged = statement.replace(b'"passed"', b'"failed"', 1)
    push_files(docker_client, att_tag, {evidence.STATEMENT_FILE: forged, evidence.STATEMENT_FILE + evidence.SIG: signature})

    done = builder("catalog", "--verify", "--catalog", str(catalog.root))
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 4, done.stderr
    assert lines[0].startswith(f"{IMAGE_ID}: {record.tag}: points at sha256:") and f"not the record's {digest}" in lines[0]
    assert lines[1].startswith(f"{IMAGE_ID}: {record.floating[0]}: points at sha256:")
    assert (
        lines[2]
        == f"{IMAGE_ID}: {sbom_tag}: its sbom.cdx.json is not the SBOM the signed attestation names (sha256 differs): forged or replaced"
    )
    assert lines[3] == f"{IMAGE_ID}: {att_tag}: its attestation.intoto.json differs from catalog/evidence/'s: forged or replaced"

    done = builder("pull", f"id={IMAGE_ID}", "--no-fit-check", "--catalog", str(catalog.root))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == f"docker run --rm -it {record.digest}", "still pulled, and run, by digest"
    assert f"pulled {record.digest} ({IMAGE_ID}): digest checked; signatures verified (signed by {SIGNER})" in done.stderr
    for tag in (record.tag, record.floating[0]):
        assert f"note: {tag} in the registry now points at sha256:" in done.stderr, done.stderr
    assert f"note: {record.floating[1]} " not in done.stderr, "the tag that still points at it is not named"
    assert record.digest in docker_client.api.inspect_image(record.digest)["RepoDigests"]
