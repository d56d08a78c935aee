"""Faults and leftovers, for real: a SIGKILLed run's container, forced rebuilds, two builds of one
tag at once, a registry that is down or failing, the engine lost mid-build, a TLS failure, and
`builder clean`. Each leaves nothing behind that the tool made and no longer needs, and each
ends with one line and the right exit code.
"""

from __future__ import annotations

import http.server
import io
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from docker import DockerClient

from builder.engine import client as engine

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = "builder-test/faults"
IMAGE = "numba0.68.0-cpu-py3.11-debian12"
TAG = f"{REGISTRY}:{IMAGE}"
STAGE_FILTER = {"label": f"io.builder.stage-of={TAG}"}  # older versions' build-stage images of TAG


def matrix(registry: str = REGISTRY) -> str:
    return f"""\
registry: {registry}
bases:
  local-debian12: {{vendor: cpu, os: debian12, bootstrap: debootstrap}}
python: ["3.11"]
frameworks:
  numba: ["0.68.0"]
stacks:
  numba: [numba]
"""


def builder(repo: Path, *args: str, env: dict[str, str] | None = None, timeout: int = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", *args],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def one_line(done: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    assert done.returncode == code, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert errors, done.stderr[-2000:]
    for word in words:
        assert word in errors[-1], errors[-1]
    return errors[-1]


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def render(repo: Path, registry: str = REGISTRY) -> Path:
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "matrix.yaml").write_text(matrix(registry), encoding="utf-8")
    done = builder(repo, "render")
    assert done.returncode == 0, done.stderr
    return repo


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, docker_client: DockerClient) -> Iterator[Path]:
    folder = render(tmp_path_factory.mktemp("faults-repo"))
    done = builder(folder, "build")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    yield folder
    for image in docker_client.api.images(all=True, filters=STAGE_FILTER):
        engine.remove_image_quietly(docker_client, image["Id"])
    engine.remove_image_quietly(docker_client, TAG)


def dangling(client: DockerClient) -> set[str]:
    """Untagged leaf images (a build of the one-stage Dockerfile keeps no build stage)."""
    return {image["Id"] for image in client.api.images(filters={"dangling": True})}


def frozen_with_a_container(proc: subprocess.Popen[bytes], client: DockerClient, tries: int = 5) -> list[str]:
    """Stop `proc` (SIGSTOP) while it holds a container, and say which: a running `builder test` makes
    and removes one container after another, so what a listing saw could be gone, or another made,
    by the time a signal lands. Frozen, it can do neither; a request it had already sent gets 2 s."""
    for _ in range(tries):
        wait_for(lambda: bool(engine.owned_containers(client)), 120, "the smoke container")
        proc.send_signal(signal.SIGSTOP)
        time.sleep(2)
        left = [c.id for c in engine.owned_containers(client)]
        if left:
            return left
        proc.send_signal(signal.SIGCONT)  # stopped between two containers: let it make the next
    raise AssertionError(f"never stopped {tries} times while it held a container")


def test_a_sigkilled_runs_container_is_removed_by_the_next_run(repo: Path, docker_client: DockerClient) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "builder", "test", "--timeout", "300"], cwd=repo, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        left = frozen_with_a_container(proc, docker_client)
    finally:  # the kill this test is about; also when no container was caught, so no stopped run outlives it
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert [c.id for c in engine.owned_containers(docker_client)] == left, "SIGKILL leaves the container (nothing can run)"
    done = builder(repo, "test")
    assert done.returncode == 0, done.stdout[-3000:]
    assert engine.owned_containers(docker_client) == []


def test_forced_rebuilds_do_not_grow_the_disk(repo: Path, docker_client: DockerClient) -> None:
    counts = []
    for _ in range(3):
        done = builder(repo, "build", "--force", "--no-cache")
        assert done.returncode == 0, done.stdout[-3000:]
        counts.append(len({i["Id"] for i in docker_client.api.images(all=True)}))
    assert counts[1] == counts[0] and counts[2] == counts[0], counts
    assert docker_client.api.images(all=True, filters=STAGE_FILTER) == []  # one stage: no build-stage image
    assert len(docker_client.api.images(filters={"reference": TAG})) == 1


def test_two_builds_of_one_tag_at_once_leave_no_loser(repo: Path, docker_client: DockerClient) -> None:
    before = dangling(docker_client)
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "builder", "build", "--force"],
            cwd=repo,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=1200) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [o[1][-2000:] for o in outputs]
    assert dangling(docker_client) <= before, "a build's image was left untagged"


class _Failing(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_POST = do_PUT = do_PATCH = do_GET  # noqa: N815

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        return


_PROXY = """
import socket, sys, threading
def pipe(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
server = socket.socket(socket.AF_UNIX)
server.bind(sys.argv[1])
server.listen(64)
print("ready", flush=True)
while True:
    client, _ = server.accept()
    upstream = socket.socket(socket.AF_UNIX)
    upstream.connect("/var/run/docker.sock")
    for a, b in ((client, upstream), (upstream, client)):
        threading.Thread(target=pipe, args=(a, b), daemon=True).start()
"""


class _SocketProxy:
    """A unix socket forwarding to the engine's, in its own process: killing it is the engine
    going away for the client (every connection drops at once), while the engine itself stays."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.proc = subprocess.Popen([sys.executable, "-c", _PROXY, str(path)], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def cut(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)


def test_the_engine_lost_mid_build_is_exit_1_with_build_json(repo: Path, tmp_path: Path, docker_client: DockerClient) -> None:
    before = len(docker_client.api.containers(all=True))
    proxy = _SocketProxy(tmp_path / "docker.sock")
    log = repo / "build" / "logs" / f"{IMAGE}.log"
    log.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "builder", "build", "--force", "--no-cache"], cwd=repo,
        env={**os.environ, "PYTHONPATH": str(ROOT), "DOCKER_HOST": f"unix://{proxy.path}"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for(lambda: log.exists() and "Step 1" in log.read_text(errors="replace"), 300, "the build to start")
    proxy.cut()
    stdout, stderr = proc.communicate(timeout=600)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert done.returncode == 1, stdout[-2000:] + stderr[-2000:]
    assert "Traceback" not in stderr
    results = json.loads((repo / "build" / "results" / "build.json").read_text(encoding="utf-8"))
    assert results[0]["status"] == "failed" and "engine" in (results[0]["error"] or "")
    wait_for(lambda: len(docker_client.api.containers(all=True)) <= before, 120, "the cancelled build's container to go")
    assert builder(repo, "build").returncode == 0  # the engine itself was fine all along: the image is still (or again) there


@pytest.fixture
def untrusted_index(tmp_path: Path) -> Iterator[str]:
    """An https index on 127.0.0.1 whose certificate nobody trusts (a corporate proxy's, say)."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}/simple/"
    server.shutdown()


def test_a_tls_failure_is_diagnosed_once_not_retried(tmp_path: Path, untrusted_index: str) -> None:
    """No CA bundle that trusts the index: pip inside the build fails verification; one attempt, the fix named."""
    folder = render(tmp_path / "tls", "builder-test/tls")
    done = builder(folder, "build", "--no-host-settings", "--index-url", untrusted_index, timeout=900)
    assert done.returncode == 1, done.stdout[-2000:]
    (result,) = json.loads((folder / "build" / "results" / "build.json").read_text(encoding="utf-8"))
    assert result["attempts"] == 1, "a TLS verification failure is deterministic: not retried"
    assert "TLS verification failed" in (result["cause"] or "") and "--ca-bundle" in (result["fix"] or "")
    assert "no CA bundle" in result["fix"]


def test_clean_removes_only_what_it_made_and_no_longer_needs(repo: Path, docker_client: DockerClient) -> None:
    # what an older version's build left: an untagged build-stage image labelled with its tag
    old_stage, _ = docker_client.images.build(fileobj=io.BytesIO(f"FROM {TAG}\nLABEL io.builder.stage-of={TAG}\n".encode()), rm=True)
    assert [i["Id"] for i in docker_client.api.images(all=True, filters=STAGE_FILTER)] == [old_stage.id]
    foreign = "builder-test/not-ours:latest"
    docker_client.api.tag(TAG, "builder-test/not-ours", "latest")  # same image, a tag this tool did not make for this matrix
    try:
        dry = builder(repo, "clean", "--all", "--dry-run")
        assert dry.returncode == 0 and "would remove image builder-base/debian12:latest" in dry.stdout
        assert engine.image_id(docker_client, "builder-base/debian12:latest") is not None  # dry run: nothing removed
        done = builder(repo, "clean")
        assert done.returncode == 0, done.stderr
        # nothing says which checkout an older version's image is (issue 37): an orphan, removed only with --orphans
        assert [i["Id"] for i in docker_client.api.images(all=True, filters=STAGE_FILTER)] == [old_stage.id] and "--orphans" in done.stderr
        orphans = builder(repo, "clean", "--orphans", "--dry-run")  # never for real on an engine other people share
        assert f"would remove orphan image {str(old_stage.id).removeprefix('sha256:')[:12]}" in orphans.stdout, orphans.stdout
        engine.remove_image_quietly(docker_client, str(old_stage.id))
        assert engine.image_id(docker_client, TAG) is not None, "a plain clean keeps the current images"
        stale = builder(repo, "clean", "--stale")
        assert stale.returncode == 0 and engine.image_id(docker_client, TAG) is not None, "still planned: kept"
        assert engine.image_id(docker_client, foreign) is not None, "never another repository's tag"
    finally:
        engine.remove_image_quietly(docker_client, foreign)
