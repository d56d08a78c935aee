"""The engine edge against a real engine: connection errors, container lifecycle, helpers."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
import uuid
from pathlib import Path
from typing import IO, Any

import docker
import pytest
from docker import DockerClient
from docker.errors import DockerException, NotFound

from builder.engine import client as engine
from builder.engine.port import ContainerEntry, EngineFault
from builder.util.errors import UserError

ROOT = Path(__file__).resolve().parents[2]


def test_connect_to_a_dead_socket_is_a_user_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    dead = f"unix://{tmp_path}/no-engine-{uuid.uuid4().hex[:6]}.sock"
    monkeypatch.setenv("DOCKER_HOST", dead)
    with pytest.raises(UserError) as info:
        engine.connect()
    message = str(info.value)
    assert "\n" not in message
    assert dead in message
    assert "bash .ci/docker-up.sh" in message
    assert "systemctl start docker" in message


def test_connect_names_the_default_socket_when_docker_host_is_unset(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))  # no current context of the developer's (tests/test_engine_address.py)
    monkeypatch.setattr(engine, "DEFAULT_SOCKET", "unix:///nonexistent/docker.sock")

    def refuse(**_: Any) -> Any:
        raise DockerException("refused")

    monkeypatch.setattr(docker, "from_env", refuse)
    with pytest.raises(UserError, match=r"nonexistent/docker.sock \(DOCKER_HOST is not set\)"):
        engine.connect()


def _gone(client: DockerClient, container_id: str | None) -> bool:
    assert container_id, "a container without an id"
    try:
        client.containers.get(container_id)
    except NotFound:
        return True
    return False


def _session_leftovers(client: DockerClient) -> list[ContainerEntry]:
    return engine.owned_containers(client, f"{engine.SESSION_LABEL}={engine.SESSION_ID}")


@pytest.mark.docker
def test_tracked_container_is_labelled_and_removed_after_a_normal_exit(docker_client: DockerClient, scratch_image: str) -> None:
    with engine.tracked_container(docker_client, image=scratch_image, labels={"purpose": "test"}, network_disabled=True) as container:
        assert container.id, "a created container without an id"
        labels = docker_client.api.inspect_container(container.id)["Config"]["Labels"]
        assert labels[engine.OWNER_LABEL] == engine.OWNER_VALUE
        assert labels["purpose"] == "test"
        assert container.id in {c.id for c in engine.owned_containers(docker_client)}
    assert _gone(docker_client, container.id)
    assert container.id not in engine._live


@pytest.mark.docker
def test_tracked_container_is_removed_when_the_block_raises(docker_client: DockerClient, scratch_image: str) -> None:
    with pytest.raises(RuntimeError, match="boom"), engine.tracked_container(docker_client, image=scratch_image) as container:
        raise RuntimeError("boom")
    assert _gone(docker_client, container.id)


@pytest.mark.docker
def test_tracked_container_is_removed_on_keyboard_interrupt(docker_client: DockerClient, scratch_image: str) -> None:
    with pytest.raises(KeyboardInterrupt), engine.tracked_container(docker_client, image=scratch_image) as container:
        raise KeyboardInterrupt
    assert _gone(docker_client, container.id)
    assert _session_leftovers(docker_client) == []


@pytest.mark.docker
def test_tracked_container_removes_a_running_container(docker_client: DockerClient, scratch_image: str) -> None:
    # A started container whose command cannot run ends up exited: removal must still force it.
    with (
        engine.tracked_container(docker_client, image=scratch_image, command=["/none"], network_disabled=True) as container,
        pytest.raises(DockerException, match="none"),  # the engine reports the missing binary
    ):
        container.start()
    assert _gone(docker_client, container.id)


@pytest.mark.docker
def test_cleanup_all_removes_what_a_block_could_not(docker_client: DockerClient, scratch_image: str) -> None:
    # A container whose create call was interrupted before its id came back: only the session
    # label finds it.
    orphan = docker_client.containers.create(
        scratch_image,
        labels={engine.OWNER_LABEL: engine.OWNER_VALUE, engine.SESSION_LABEL: engine.SESSION_ID},
    )
    engine._clients[id(docker_client)] = docker_client
    assert orphan.id in engine.cleanup_all()
    assert _gone(docker_client, orphan.id)
    assert engine.cleanup_all() == []  # idempotent


@pytest.mark.docker
@pytest.mark.parametrize("how", ["sigterm", "sigint", "exit"])
def test_a_killed_process_leaves_no_container(docker_client: DockerClient, scratch_image: str, how: str) -> None:
    script = textwrap.dedent(
        f"""
        import sys, time
        from builder.engine import client as engine
        client = engine.connect()
        with engine.tracked_container(client, image={scratch_image!r}) as c:
            print(c.id, flush=True)
            if {how!r} == "exit":
                sys.stdin.readline()  # exits once the test has seen the container (else a race)
                sys.exit(3)
            time.sleep(60)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        stderr=subprocess.DEVNULL,  # the child's KeyboardInterrupt traceback is expected
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None and proc.stdin is not None
    container_id = proc.stdout.readline().strip()
    assert container_id, "the child did not create a container"
    assert not _gone(docker_client, container_id)
    if how == "exit":
        proc.stdin.close()
    else:
        proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGINT)
    proc.wait(timeout=60)
    assert _gone(docker_client, container_id)


@pytest.mark.docker
def test_helpers_report_the_engine(docker_client: DockerClient, scratch_image: str) -> None:
    assert engine.engine_version(docker_client)[0].isdigit()
    runtimes = engine.gpu_runtimes(docker_client.info())
    assert all(name.startswith(engine.GPU_RUNTIME_PREFIXES) for name in runtimes)
    assert engine.image_labels(docker_client, f"builder-test/absent-{uuid.uuid4().hex}:x") is None
    assert engine.image_labels(docker_client, scratch_image) == {}


@pytest.mark.docker
def test_the_smoke_checks_need_the_docker_cli_and_a_host_without_it_is_refused(docker_client: DockerClient, tmp_path: Path) -> None:
    """The checks' pytest-testinfra runs `docker exec`: without the CLI every check failed on the host
    and good images were recorded "failed". `builder test` now refuses such a host in one line."""
    assert engine.DockerEngine(docker_client).checks_blocked() is None, "this host has the docker CLI the checks use"
    before = {c.id for c in engine.owned_containers(docker_client)}
    done = subprocess.run(
        [sys.executable, "-m", "builder", "test", "--select", "stack=numba,platform=linux/amd64"],
        cwd=tmp_path, env={**os.environ, "PATH": str(tmp_path), "BUILDER_MATRIX": str(ROOT / "matrix.yaml")},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stdout[-2000:] + done.stderr[-2000:]
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert "no `docker` is on PATH" in line and "apt-get install docker.io" in line, line
    assert {c.id for c in engine.owned_containers(docker_client)} == before, "refused before any container"


def test_gpu_runtimes_keeps_only_gpu_runtimes() -> None:
    info: dict[str, Any] = {"Runtimes": {"runc": {}, "nvidia": {}, "io.containerd.runc.v2": {}, "crun": {}}}
    assert engine.gpu_runtimes(info) == ["nvidia"]


@pytest.mark.docker
def test_no_builder_container_is_left_on_the_engine(docker_client: DockerClient) -> None:
    # Runs last in this module (file order): every container the tests above made is gone. Scoped
    # to this process's session label, since other processes may share the engine.
    assert _session_leftovers(docker_client) == []


def _streamed_archive(out: IO[bytes], tag: str, made: list[str], *, diff_id: str | None = None, cut: bool = False) -> None:
    """A one-layer image's docker-archive written in order into `out` (a load's pipe); its image ID into `made`.
    `cut`: the writer fails after the layer; `diff_id`: a config that names another layer."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo("hello")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    data = layer.getvalue()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Labels": {"io.builder.test": "streamed-load"}},
        "rootfs": {"type": "layers", "diff_ids": [diff_id or "sha256:" + hashlib.sha256(data).hexdigest()]},
    }
    body = json.dumps(config).encode()
    image_id = hashlib.sha256(body).hexdigest()
    manifest = json.dumps([{"Config": f"{image_id}.json", "RepoTags": [tag], "Layers": ["l/layer.tar"]}]).encode()
    made.append(f"sha256:{image_id}")
    with tarfile.open(fileobj=out, mode="w|") as tar:
        for name, content in (("l/layer.tar", data), (f"{image_id}.json", body), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
            if cut:
                raise RuntimeError("the writer failed half-way")


@pytest.mark.docker
def test_a_streamed_load_loads_the_archive_and_a_cut_or_refused_one_nothing(docker_client: DockerClient) -> None:
    """DockerEngine.load_stream: the archive goes through a pipe (never a file); a writer's error is
    the load's, and the engine then holds no image of the cut archive; the engine's refusal is an
    EngineFault."""
    port = engine.DockerEngine(docker_client)
    tag = f"builder-test/streamed-{uuid.uuid4().hex[:8]}:1"
    try:
        with pytest.raises(RuntimeError, match="half-way"):
            port.load_stream(lambda out: _streamed_archive(out, tag, [], cut=True))
        assert port.inspect_image(tag) is None
        with pytest.raises(EngineFault):
            port.load_stream(lambda out: _streamed_archive(out, tag, [], diff_id="sha256:" + "0" * 64))
        assert port.inspect_image(tag) is None
        made: list[str] = []
        port.load_stream(lambda out: _streamed_archive(out, tag, made))
        loaded = port.inspect_image(tag)
        assert loaded is not None and [loaded.id] == made
    finally:
        engine.remove_image_quietly(docker_client, tag)
