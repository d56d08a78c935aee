"""The CI slice, for real: bootstrap the Debian bases, build the default selection (tensorflow,
jax, numba on the local Debian 13 base, torch on Debian 12: matrix.yaml's defaults), smoke-test it
in locked-down containers, and prove
the promises around it: incremental rebuilds, no secrets in images, nothing left behind.

The build runs with planted credentials in a proxy URL and an index URL; a local server that
plays both roles records that they reached the build, and the images must not contain them.
"""

from __future__ import annotations

import http.server
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from docker import DockerClient

from builder.engine import bootstrap
from builder.engine import client as engine
from builder.workspace import Workspace

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "build" / "results"
PROXY_SECRET = "s3cret-proxy-7f3a"
INDEX_SECRET = "s3cret-index-91bc"
SLICE = Workspace.locate(str(ROOT / "matrix.yaml")).selected(None, use_default=True)


def builder(*args: str, env: dict[str, str] | None = None, timeout: int = 2400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers 404 to everything, as proxy or index, and remembers what it was sent."""

    seen: list[tuple[str, dict[str, str]]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        return


@pytest.fixture(scope="module")
def recorder() -> Iterator[tuple[int, list[tuple[str, dict[str, str]]]]]:
    _Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], _Recorder.seen
    server.shutdown()


def _loose_images(docker_client: DockerClient) -> set[str]:
    """Untagged images a build made: a finished image (content-hash label) or a build stage
    (`io.builder.stage-of`: older versions kept one per tag; the one-stage Dockerfile makes none),
    but not an image pulled from a registry (`builder pull` and team environments pull by digest,
    which leaves the image untagged with a RepoDigest: the user's, not a build's garbage)."""
    return {
        image["Id"]
        for image in docker_client.api.images(filters={"dangling": True})
        if {"io.builder.content-hash", "io.builder.stage-of"} & set(image.get("Labels") or {}) and not image.get("RepoDigests")
    }


@pytest.fixture(scope="module")
def loose_before(docker_client: DockerClient) -> set[str]:
    """What was loose before this module built anything: an engine that has been used before (a
    developer's, or a CI machine started from one) may hold some, and they are not this module's."""
    return _loose_images(docker_client)


@pytest.fixture(scope="module")
def slice_build(docker_client: DockerClient, recorder: tuple[int, list[Any]], loose_before: set[str]) -> subprocess.CompletedProcess[str]:
    """`builder build --force -j 2` of the default selection, with the planted credentials.

    --force makes the build run even when the images exist, so the credentials always reach it
    (the planted index URL changes with the port, so the install steps run again). The index is
    named `localhost`: the build sends 127.0.0.1 (where builder serves it its local wheels) past any
    proxy, so an index named by that address would never meet the planted proxy."""
    port, _ = recorder
    # The bases first, through this machine's own network settings: the planted proxy is for the build
    # steps (the bootstrap honours HTTP_PROXY too, and the recorder answers 404 to the mirror).
    for base in {s.base.name: s.base for s in SLICE if s.base.bootstrap}.values():
        bootstrap.ensure_base(engine.DockerEngine(docker_client), base, log=lambda line: None)
    done = builder(
        "build",
        "--force",
        "-j",
        "2",
        "--extra-index-url",
        f"http://ci-user:{INDEX_SECRET}@localhost:{port}/simple/",
        env={"HTTP_PROXY": f"http://proxy-user:{PROXY_SECRET}@127.0.0.1:{port}"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _build_statuses() -> dict[str, str]:
    """Status per image of the last `builder build` (build/results/build.json)."""
    return {r["id"]: r["status"] for r in json.loads((RESULTS / "build.json").read_text())}


def test_the_slice_covers_four_frameworks() -> None:
    stacks = sorted(s.stack for s in SLICE)
    assert stacks == ["jax", "numba", "tensorflow", "torch"]
    assert all(s.base.bootstrap == "debootstrap" for s in SLICE)


def test_slice_builds_with_plan_tags_and_labels(slice_build: Any, docker_client: DockerClient) -> None:
    assert _build_statuses() == {s.id: "built" for s in SLICE}
    for spec in SLICE:
        labels = engine.image_labels(docker_client, spec.tag)
        assert labels is not None, f"{spec.tag} is missing"
        assert labels["io.builder.content-hash"] == spec.content_hash
        assert labels["io.builder.frameworks"] == ",".join(f"{n}={v}" for n, v in spec.frameworks)
        assert labels["org.opencontainers.image.title"] == spec.id


def test_no_build_step_met_the_planted_credentials(slice_build: Any, recorder: tuple[int, list[Any]]) -> None:
    """Every image of the default selection is canonical (matrix.yaml canonical_layers): its venv is
    made on the build host from the lock's wheels (local sources first, then the indexes in order),
    and its Dockerfile fetches nothing, built with the network off, taking no build args. So no build
    step ever holds the planted index URL or proxy: whatever the recorder saw came from builder's own
    fetch on the host (its user agent), never from pip or uv in a container. The RUN path, where the
    credentials do reach an install step and must leave no trace, is tests/integration/test_secrets.py's."""
    assert all(spec.canonical for spec in SLICE), [spec.id for spec in SLICE if not spec.canonical]
    _, seen = recorder
    agents = {headers.get("user-agent", "") for _, headers in seen}
    assert all(agent.startswith("gpu-image-builder/") for agent in agents), agents


def _image_bytes_contain(client: DockerClient, tag: str, needle: bytes) -> list[str]:
    """Members of every layer of `docker save` that contain `needle`."""
    hits = []
    data = b"".join(client.api.get_image(tag))
    with tarfile.open(fileobj=io.BytesIO(data)) as outer:
        for member in outer.getmembers():
            if not member.isfile():
                continue
            blob = outer.extractfile(member)
            if blob is None:
                continue
            content = blob.read()
            if needle in content:
                hits.append(member.name)
            if member.name.endswith("layer.tar"):
                with tarfile.open(fileobj=io.BytesIO(content)) as layer:
                    for entry in layer.getmembers():
                        inner = layer.extractfile(entry) if entry.isfile() else None
                        if inner is not None and needle in inner.read():
                            hits.append(f"{member.name}:{entry.name}")
    return hits


def test_no_secrets_in_final_images(slice_build: Any, docker_client: DockerClient) -> None:
    for spec in SLICE:
        inspect = docker_client.api.inspect_image(spec.tag)
        history = json.dumps(docker_client.api.history(spec.tag))
        config = json.dumps(inspect["Config"])
        for secret in (PROXY_SECRET, INDEX_SECRET):
            assert secret not in history, f"{spec.id}: secret in docker history"
            assert secret not in config, f"{spec.id}: secret in env or labels"
    # Every byte of every layer, for the smallest image of the slice.
    numba = next(s for s in SLICE if s.stack == "numba")
    for secret in (PROXY_SECRET, INDEX_SECRET):
        assert _image_bytes_contain(docker_client, numba.tag, secret.encode()) == []


def test_build_logs_do_not_print_secrets(slice_build: Any) -> None:
    logs = sorted((ROOT / "build" / "logs").glob("*.log"))
    assert {f"{s.id}.log" for s in SLICE} <= {log.name for log in logs}, "the build wrote no per-image logs to check"
    for log in logs:
        text = log.read_text(errors="replace")
        assert PROXY_SECRET not in text and INDEX_SECRET not in text, log.name


def test_second_build_skips_everything(slice_build: Any) -> None:
    done = builder("build", "-j", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert set(_build_statuses().values()) == {"up-to-date"}


def test_smoke_tests_pass_and_leave_no_container(slice_build: Any, docker_client: DockerClient) -> None:
    # a user's shell with pytest settings of its own: the checks' pytest runs on its own settings
    done = builder("test", env={"PYTEST_ADDOPTS": "-p no_such_plugin --no-such-option", "PYTEST_PLUGINS": "no_such_plugin"})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    for spec in SLICE:
        result = json.loads((RESULTS / f"{spec.id}.json").read_text())
        assert result["verdict"] == "passed", result["failures"]
        assert result["tests"]["tests"] >= 8 and result["tests"]["failures"] == 0
        probe = result["probe"]["frameworks"][spec.stack]
        assert probe["status"] == "skipped", "no GPU here: nothing may claim passed"
        assert probe["cpu_check"]["ok"] is True
        assert probe["version"].split("+")[0] == spec.versions[spec.stack]
    junit = (RESULTS / "junit.xml").read_text()
    assert junit.count("<testsuite ") == len(SLICE)
    assert engine.owned_containers(docker_client) == []


def _default_sigint() -> None:
    """A runner started in the background may ignore SIGINT, and children inherit that; Ctrl-C
    at a terminal is what these tests mean."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_ctrl_c_during_a_build_leaves_no_container_and_no_half_tag(slice_build: Any, docker_client: DockerClient) -> None:
    numba = next(s for s in SLICE if s.stack == "numba")
    before_id = docker_client.api.inspect_image(numba.tag)["Id"]
    before_containers = {c["Id"] for c in docker_client.api.containers(all=True)}
    log = ROOT / "build" / "logs" / f"{numba.id}.log"
    log.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "builder", "build", "--force", "--no-cache", "--select", f"id={numba.id}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_default_sigint,
    )
    try:
        # the install step: pip's, or the marked step of a canonical image's venv layer (matrix.yaml canonical_layers), whose
        # finished build would give the same image ID anyway (docs/reproducible.md)
        step = "LABEL io.builder.layer=venv.tar" if numba.canonical else "pip install"  # engine/reproducible.py `marked`
        _wait_for(lambda: log.exists() and step in log.read_text(errors="replace"), 300, "the install step")
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) != 0
    finally:
        proc.kill()
    _wait_for(lambda: {c["Id"] for c in docker_client.api.containers(all=True)} <= before_containers, 60, "build containers to go")
    assert docker_client.api.inspect_image(numba.tag)["Id"] == before_id, "the tag moved to a half-built image"


def test_ctrl_c_during_smoke_tests_removes_the_container(slice_build: Any, docker_client: DockerClient) -> None:
    tf = next(s for s in SLICE if s.stack == "tensorflow")
    proc = subprocess.Popen(
        [sys.executable, "-m", "builder", "test", "--select", f"id={tf.id}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_default_sigint,
    )
    try:
        _wait_for(lambda: bool(engine.owned_containers(docker_client)), 120, "the smoke container")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) != 0
    finally:
        proc.kill()
    assert engine.owned_containers(docker_client) == []


def test_a_hung_image_is_killed_at_the_timeout(slice_build: Any, docker_client: DockerClient) -> None:
    tf = next(s for s in SLICE if s.stack == "tensorflow")
    done = builder("test", "--select", f"id={tf.id}", "--timeout", "2")
    assert done.returncode == 1
    result = json.loads((RESULTS / f"{tf.id}.json").read_text())
    assert result["verdict"] == "failed"
    assert "timed out" in json.dumps(result["failures"])
    assert engine.owned_containers(docker_client) == []


def test_engine_down_is_one_line_and_exit_2() -> None:
    done = builder("build", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no Docker engine answers"), done.stderr


def test_push_to_the_local_registry_returns_its_digest(slice_build: Any, docker_client: DockerClient) -> None:
    """`--push` goes through push.push_image; the registry from .ci/docker-up.sh is on 127.0.0.1:5000."""
    from builder.engine.push import push_image

    numba = next(s for s in SLICE if s.stack == "numba")
    target = f"127.0.0.1:5000/builder-test/slice:{numba.id}"
    docker_client.api.tag(numba.tag, "127.0.0.1:5000/builder-test/slice", numba.id)
    try:
        digest = push_image(engine.DockerEngine(docker_client), target, log=lambda line: None)
        assert digest.startswith("sha256:") and len(digest) == 71
        pulled = docker_client.api.inspect_distribution(target)
        assert pulled["Descriptor"]["digest"] == digest
    finally:
        docker_client.api.remove_image(target)


def test_the_builds_left_no_loose_image(slice_build: Any, docker_client: DockerClient, loose_before: set[str]) -> None:
    """Forced rebuilds (this module runs several) leave nothing untagged:
    neither the image a rebuild replaced nor a build stage (the Dockerfile has one stage)."""
    assert sorted(image[:19] for image in _loose_images(docker_client) - loose_before) == []
