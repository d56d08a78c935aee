"""Publish against a hostile user and a broken registry, with the real engine and the local registry
(127.0.0.1:5000): a build tag moved by a concurrent `docker tag` while publish runs, a 500 on the
second push (a faulting proxy), SIGTERM during a floating-tag push, and a registry that stalls an
upload. Small images made from the host's binaries (registry_faults.mini_image) stand in for built
ones, so nothing here builds or touches another engineer's images; every name is h5a-*.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from docker import DockerClient

from builder.catalog.store import Catalog
from builder.engine import client as engine
from builder.engine import push
from builder.host import facts as hostinfo
from builder.host.facts import AmdInfo, EngineFacts, HostInfo, NvidiaInfo
from builder.model import results
from builder.model.results import GpuUse, SmokeResult, TestCounts
from builder.usecases import publish as publishing
from builder.util.errors import RunFailure
from builder.workspace import Store, Workspace
from tests.integration.registry_faults import mini_image, proxy, terminate_when

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
RUN = uuid.uuid4().hex[:8]
IMAGE_ID = "torch2.13.0-cpu-py3.11-debian12"
BUILD_REPO = f"127.0.0.1:5000/h5a-build-{RUN}"
BASE_REPO = f"h5a-test-base-{RUN}"
FLOATING = ("torch2.13-cpu-py3.11-debian12", "torch2.13-cpu")
HOST = HostInfo(engine=EngineFacts(True, "20.10.24", ()), nvidia=NvidiaInfo(status="absent"), amd=AmdInfo())
MANIFEST_TYPES = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"


def config_digest(name: str, reference: str) -> str:
    """The image id (config digest) the registry's manifest for reference names."""
    request = urllib.request.Request(f"http://127.0.0.1:5000/v2/{name}/manifests/{reference}", headers={"Accept": MANIFEST_TYPES})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30) as response:
        return str(json.loads(response.read())["config"]["digest"])


def registry_digest(name: str, reference: str) -> str | None:
    request = urllib.request.Request(
        f"http://127.0.0.1:5000/v2/{name}/manifests/{reference}", method="HEAD", headers={"Accept": MANIFEST_TYPES}
    )
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30) as response:
            return str(response.headers["Docker-Content-Digest"])
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def make_spec() -> Any:
    (real,) = Workspace.locate(str(ROOT / "matrix.yaml")).selected(f"id={IMAGE_ID}", use_default=False)
    return replace(real, tag=f"{BUILD_REPO}:{IMAGE_ID}", base=replace(real.base, local_repository=BASE_REPO))


@pytest.fixture(scope="module")
def images(docker_client: DockerClient) -> Iterator[dict[str, str]]:
    """The tested image (under the spec's build tag) and another one; removed afterwards with every h5a name."""
    spec = make_spec()
    repo, tag = spec.tag.rsplit(":", 1)
    assert spec.lock is not None
    dists = "".join(f"{name}\t{version}\n" for name, version in spec.lock.pins)  # its venv is its lock, so the SBOM check passes
    tested = mini_image(docker_client, repo, tag, f"tested-{RUN}", dists=dists)
    other = mini_image(docker_client, f"h5a-other-{RUN}", "latest", f"other-{RUN}")
    docker_client.api.tag(other, f"{BASE_REPO}/debian12", tag="latest")
    docker_client.api.tag(tested, f"h5a-keep-{RUN}", tag="tested")  # so the tests can inspect it after a build tag moved
    yield {"tested": tested, "other": other}
    for image in docker_client.api.images():
        for name in image.get("RepoTags") or []:
            if RUN in name:
                engine.remove_image_quietly(docker_client, name)
    for image in (tested, other):
        engine.remove_image_quietly(docker_client, image)


@pytest.fixture
def workspace(tmp_path: Path, images: dict[str, str], docker_client: DockerClient, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    spec = make_spec()
    repo, tag = spec.tag.rsplit(":", 1)
    docker_client.api.tag(images["tested"], repo, tag=tag)  # a test may have moved it
    gpu = GpuUse(False, "cpu image: no GPU needed")
    counts = TestCounts(tests=9, failures=0, errors=0, skipped=1)
    result = SmokeResult(
        spec.id, spec.tag, "passed", gpu, 1.0, counts, content_hash=spec.content_hash, image_id=images["tested"], returncode=0, vendor="cpu"
    )
    results.write(tmp_path / "build" / "results", result)
    monkeypatch.setattr(hostinfo, "gather", lambda **kwargs: HOST)
    return SimpleNamespace(
        store=Store(tmp_path),
        build_dir=tmp_path / "build",
        matrix=SimpleNamespace(registry=BUILD_REPO),
        spec=spec,
        catalog=Catalog(tmp_path / "catalog"),
    )


class Events:
    def __init__(self, on_info: Any = None) -> None:
        self.lines: list[str] = []
        self.outcomes: list[publishing.Published] = []
        self.on_info = on_info

    def info(self, text: str) -> None:
        self.lines.append(text)
        if self.on_info:
            self.on_info(text)

    def done(self, outcome: publishing.Published) -> None:
        self.outcomes.append(outcome)


def local_names(client: DockerClient, prefix: str) -> list[str]:
    return sorted(n for image in client.api.images() for n in image.get("RepoTags") or [] if n.startswith(prefix))


def test_a_docker_tag_on_the_build_tag_during_publish_never_reaches_the_registry(
    workspace: Any, images: dict[str, str], docker_client: DockerClient
) -> None:
    name = f"h5a-pub-{RUN}"
    repo, tag = workspace.spec.tag.rsplit(":", 1)
    moved: list[str] = []

    def concurrent_build(line: str) -> None:  # `builder build --force` lands while the immutable tag uploads
        if not moved:
            docker_client.api.tag(images["other"], repo, tag=tag)
            moved.append(line)

    events = Events(concurrent_build)
    (outcome,) = publishing.publish(
        workspace, [workspace.spec], publishing.PublishOptions(registry=f"127.0.0.1:5000/{name}"), workspace.catalog, events
    )
    assert moved and outcome.status == "published", outcome.reason
    immutable = registry_digest(name, IMAGE_ID)
    assert [registry_digest(name, line) for line in FLOATING] == [immutable, immutable]
    assert [config_digest(name, ref) for ref in (IMAGE_ID, *FLOATING)] == [images["tested"]] * 3, "the registry holds the tested image"
    (record,) = workspace.catalog.load()
    assert record.digest == f"127.0.0.1:5000/{name}@{immutable}" and len(record.floating) == 2
    assert f"h5a-mini==tested-{RUN}" in (workspace.catalog.manifests / f"{IMAGE_ID}.txt").read_text(), "manifest read from the tested image"
    assert local_names(docker_client, f"127.0.0.1:5000/{name}") == [], "no push name is left behind"
    assert docker_client.api.inspect_image(workspace.spec.tag)["Id"] == images["other"], "the concurrent build's tag is theirs"


def test_a_500_on_the_second_push_leaves_a_record_of_what_the_registry_holds(workspace: Any, docker_client: DockerClient) -> None:
    name = f"h5a-pub500-{RUN}"
    with proxy(lambda method, path: "500" if method == "PUT" and path.endswith(f"/manifests/{FLOATING[1]}") else None) as fault:
        repository = f"127.0.0.1:{fault.port}/{name}"
        (outcome,) = publishing.publish(
            workspace, [workspace.spec], publishing.PublishOptions(registry=repository), workspace.catalog, Events()
        )
        assert any(what == "500" for _, _, what in fault.seen), (outcome, fault.seen)
    assert outcome.status == "failed" and "is published and recorded" in outcome.reason and "\n" not in outcome.reason, outcome.reason
    immutable = registry_digest(name, IMAGE_ID)
    (record,) = workspace.catalog.load()
    assert record.digest == f"{repository}@{immutable}"
    assert record.floating == (f"{repository}:{FLOATING[0]}",) and registry_digest(name, FLOATING[0]) == immutable
    assert registry_digest(name, FLOATING[1]) is None
    assert any(note.startswith(f"floating tags not moved: {repository}:{FLOATING[1]}") for note in record.notes)
    assert local_names(docker_client, repository) == []


SCRIPT = """
import signal, sys
from builder.usecases import publish as publishing
from builder.util.errors import Interrupted
from tests.integration import test_publish_attacks as t
def interrupt(signum, frame):
    raise Interrupted(signum)
signal.signal(signal.SIGTERM, interrupt)
publishing.hostinfo.gather = lambda **kwargs: t.HOST
from types import SimpleNamespace
from builder.catalog.store import Catalog
from builder.workspace import Store
spec = t.make_spec()
ws = SimpleNamespace(store=Store(__import__("pathlib").Path(sys.argv[1]).parent), matrix=SimpleNamespace(registry=t.BUILD_REPO))
try:
    publishing.publish(ws, [spec], publishing.PublishOptions(registry=sys.argv[2]), Catalog(__import__("pathlib").Path(sys.argv[3])), t.Events())
except Interrupted:
    sys.exit(143)
"""


def test_sigterm_during_a_floating_push_records_the_immutable_tag_and_cancels_the_push(workspace: Any, docker_client: DockerClient) -> None:
    name = f"h5a-pubterm-{RUN}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "H5A_RUN": RUN}
    with proxy(lambda method, path: "stall" if method == "PUT" and path.endswith(f"/manifests/{FLOATING[0]}") else None) as fault:
        repository = f"127.0.0.1:{fault.port}/{name}"
        args = [
            sys.executable,
            "-c",
            SCRIPT.replace("t.make_spec()", f"t.make_spec_for({RUN!r})"),
            str(workspace.build_dir),
            repository,
            str(workspace.catalog.root),
        ]
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        err = terminate_when(proc, lambda: bool(fault.stalled), "the proxy never stalled the floating push")
        assert proc.returncode == 143, err[-2000:]
    (record,) = workspace.catalog.load()
    assert record.digest == f"{repository}@{registry_digest(name, IMAGE_ID)}" and record.floating == ()
    assert any("publish interrupted" in note for note in record.notes), record.notes
    assert local_names(docker_client, repository) == [], "SIGTERM left push names in the engine"


def make_spec_for(run: str) -> Any:
    """make_spec of the parent test's run (the subprocess imports this module afresh, with its own RUN)."""
    global BUILD_REPO, BASE_REPO, RUN
    RUN, BUILD_REPO, BASE_REPO = run, f"127.0.0.1:5000/h5a-build-{run}", f"h5a-test-base-{run}"
    return make_spec()


def test_a_stalled_upload_fails_at_the_deadline_in_one_line_and_later_pushes_go_through(
    images: dict[str, str], docker_client: DockerClient
) -> None:
    """The engine (20.10) keeps its own connection to a registry that stalls even after the client
    goes (measured: Proxy.held stays), so what the tool owns is bounded: it stops waiting at the
    deadline, says so in one line, shuts its stream (the engine's push request ends), and the next
    push to a working registry is not stuck behind the stalled one."""
    name = f"h5a-stall-{RUN}"
    with proxy(lambda method, path: "stall" if method in ("PATCH", "PUT") and "/blobs/uploads/" in path else None) as fault:
        target = f"127.0.0.1:{fault.port}/{name}"
        docker_client.api.tag(images["tested"], target, tag="x")
        started = time.monotonic()
        with pytest.raises(RunFailure, match=r"did not finish within 8 s .*it was cancelled") as caught:
            push.push_image(engine.DockerEngine(docker_client), f"{target}:x", log=lambda line: None, deadline=8)
        assert time.monotonic() - started < 30 and "\n" not in str(caught.value)
        assert fault.stalled, "the proxy stalled an upload"
        after = f"127.0.0.1:5000/{name}-after"
        docker_client.api.tag(images["tested"], after, tag="x")
        started = time.monotonic()
        digest = push.push_image(engine.DockerEngine(docker_client), f"{after}:x", log=lambda line: None, deadline=60)
        assert registry_digest(f"{name}-after", "x") == digest and time.monotonic() - started < 60


KILLED = """
import sys, time
from builder.engine import client as e
c = e.connect()
with e.tracked_container(c, image=sys.argv[1], command=["sleep", "600"], labels={"io.builder.image-id": "manifest"}) as box:
    print(box.id, flush=True)
    time.sleep(600)
"""


def test_a_sigkilled_publishs_manifest_container_is_removed_by_the_next_publish(
    workspace: Any, images: dict[str, str], docker_client: DockerClient
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, images["tested"]],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    container = proc.stdout.readline().strip()
    proc.kill()  # SIGKILL: no finally, no atexit
    proc.wait(30)
    assert docker_client.api.inspect_container(container)["Id"] == container, "the killed run left its container"
    publishing.publish(workspace, [], publishing.PublishOptions(registry=f"127.0.0.1:5000/h5a-sweep-{RUN}"), workspace.catalog, Events())
    assert not docker_client.api.containers(all=True, filters={"id": container}), "the next publish removed it"
