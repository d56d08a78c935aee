"""Stopping a build that prints nothing, for real, in seconds (issue #14, findings 15 and 20).

The base is a tiny image made from this host's own shell and `sleep` (no pull, no debootstrap):
its `apt-get` sleeps a minute, so the first `RUN` of the rendered Dockerfile is a silent step.
`builder build` runs in a subprocess and gets a signal while that step runs; it must exit with
128 + signal within seconds, leave no container and no staged context, and whatever unfinished
images it left must be found and removed by `builder clean`, which never touches anyone else's.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker import DockerClient
from docker.errors import NotFound

from builder.engine import client as engine
from builder.engine import leftovers
from builder.engine.ownership import identity
from builder.render.labels import BUILT_BY_LABEL, HASH_LABEL, WORKSPACE_LABEL

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
BASE = "builder-test/silent-base:latest"
REGISTRY = "builder-test/silent"
FOREIGN = "builder-test/not-ours-dangling"
EXIT_WITHIN_S = 5.0
MATRIX = f"""\
registry: {REGISTRY}
bases:
  silent: {{vendor: cpu, os: debian12, image: "{BASE}"}}
python: ["3.11"]
frameworks:
  numba: ["0.68.0"]
stacks:
  numba: [numba]
"""


def _rootfs() -> bytes:
    """A tar of sh, sleep and their libraries from this host, a passwd with root, and an apt-get that sleeps."""
    shell = shutil.which("dash") or "/bin/sh"
    sleep = shutil.which("sleep")
    if sleep is None:
        pytest.skip("no `sleep` on this host to make the silent base from")
    files = {"bin/sh": Path(shell).resolve(), "bin/sleep": Path(sleep).resolve()}
    for binary in list(files.values()):
        linked = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False).stdout
        for lib in re.findall(r"(/\S+\.so[.\d]*)", linked):
            files[lib.lstrip("/")] = Path(lib).resolve()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, source in files.items():
            tar.add(str(source), arcname=name)
        for name, text, mode in (
            ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n", 0o644),
            ("etc/group", "root:x:0:\n", 0o644),
            ("usr/bin/apt-get", "#!/bin/sh\nexec sleep 60\n", 0o755),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(text), mode
            tar.addfile(info, io.BytesIO(text.encode()))
        tar.addfile(_folder("tmp", 0o1777))
    return buf.getvalue()


def _folder(name: str, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, mode
    return info


def _dangling(client: DockerClient) -> set[str]:
    return {str(i["Id"]) for i in client.api.images(filters={"dangling": True})}


@pytest.fixture(scope="module")
def silent_base(docker_client: DockerClient) -> Iterator[str]:
    before = _dangling(docker_client)
    repository, tag = BASE.rsplit(":", 1)
    docker_client.api.import_image(src=_rootfs(), repository=repository, tag=tag)
    yield BASE
    for image_id in _dangling(docker_client) - before:  # what the tests' builds left, if a test failed before clean
        engine.remove_image_quietly(docker_client, image_id)
    engine.remove_image_quietly(docker_client, BASE)


@pytest.fixture
def repo(tmp_path: Path, silent_base: str) -> Path:
    (tmp_path / "matrix.yaml").write_text(MATRIX, encoding="utf-8")
    done = _builder(tmp_path, "render")
    assert done.returncode == 0, done.stderr
    return tmp_path


def _builder(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", *args], cwd=repo, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _start_silent_build(repo: Path, client: DockerClient) -> tuple[subprocess.Popen[str], str]:
    """`builder build` in a subprocess, returned once its silent step's container is running."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "builder", "build"], cwd=repo, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    logs = repo / "build" / "logs"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        found = (
            [re.findall(r"Running in ([0-9a-f]{12})", p.read_text(errors="replace")) for p in logs.glob("*.log")] if logs.is_dir() else []
        )
        container = next((ids[-1] for ids in found if ids), None)  # the latest step's (LABEL and USER steps have one too)
        if container and _running(client, container):
            time.sleep(0.5)  # inside `sleep 60` now: nothing more comes down the stream
            return proc, container
        if proc.poll() is not None:
            raise AssertionError(f"the build ended before its silent step: {proc.communicate()[1][-2000:]}")
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("the silent step never started")


def _running(client: DockerClient, container: str) -> bool:
    try:
        return bool(client.api.inspect_container(container)["State"]["Running"])
    except NotFound:
        return False


def _gone(client: DockerClient, container: str) -> bool:
    try:
        client.api.inspect_container(container)
    except NotFound:
        return True
    return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: signal.Signals(s).name)
def test_a_signal_stops_a_silent_build_step_within_seconds(repo: Path, docker_client: DockerClient, signum: int) -> None:
    """Finding 15: the worker sat in a socket read; SIGTERM took the whole step (60 s here), and longer."""
    proc, container = _start_silent_build(repo, docker_client)
    started = time.monotonic()
    proc.send_signal(signum)
    try:
        _, stderr = proc.communicate(timeout=EXIT_WITHIN_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"{signal.Signals(signum).name} did not stop the build within {EXIT_WITHIN_S} s")
    took = time.monotonic() - started
    assert proc.returncode == 128 + signum, stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert f"interrupted by {signal.Signals(signum).name}" in stderr
    assert took < EXIT_WITHIN_S
    assert _gone(docker_client, container), "the cancelled step's container is still there"
    assert [c for c in engine.owned_containers(docker_client)] == []
    contexts = repo / "build" / "contexts"
    assert not contexts.exists() or list(contexts.iterdir()) == [], "a staged build context was left behind"
    (result,) = json.loads((repo / "build" / "results" / "build.json").read_text(encoding="utf-8"))
    assert result["status"] == "interrupted"


def _build_dangling(client: DockerClient, dockerfile: str, labels: dict[str, str] | None = None) -> str:
    """Build `dockerfile` under a throwaway tag, then build something else under it: the first image is left dangling."""
    ids: list[str] = []
    for text in (dockerfile, f"FROM {BASE}\nLABEL replaced=yes\n"):
        for _ in client.api.build(
            fileobj=io.BytesIO(text.encode()), tag=f"{FOREIGN}:x", labels=labels if not ids else None, rm=True, decode=True
        ):
            pass
        ids.append(str(engine.image_id(client, f"{FOREIGN}:x")))
    return str(ids[0])


def test_clean_removes_what_an_interrupted_build_left_and_nothing_else(repo: Path, docker_client: DockerClient) -> None:
    """Finding 20: the steps an interrupted build committed were unlabelled dangling images that
    `clean` could not find. Now they carry io.builder.built-by; images others made stay."""
    proc, _ = _start_silent_build(repo, docker_client)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=30)
    finally:
        proc.kill()  # only if it is still running: then the test above fails too
        proc.wait()
    log = next((repo / "build" / "logs").glob("*.log")).read_text(encoding="utf-8")
    steps = re.findall(r"^ ---> ([0-9a-f]{12})$", log, re.MULTILINE)[1:]  # the images the build committed (or reused), not its base
    assert steps, "the interrupted build committed steps before the silent one"
    leaf = engine.image_id(docker_client, steps[-1])
    assert leaf in _dangling(docker_client), "the interrupted build's last step is an untagged leaf"
    assert (docker_client.api.inspect_image(leaf)["Config"]["Labels"] or {}).get(BUILT_BY_LABEL) == "builder"
    assert leaf in leftovers.unfinished_images(engine.DockerEngine(docker_client))

    plain = _build_dangling(docker_client, f"FROM {BASE}\nLABEL someone=else\n")
    # Built FROM one of our finished images by someone else: inherits our labels, adds a step of its own.
    derived = _build_dangling(docker_client, f"FROM {BASE}\nLABEL {BUILT_BY_LABEL}=builder {HASH_LABEL}=abc\nLABEL theirs=1\n")
    # One of ours that a newer build replaced: its last step is the LABEL `builder build` adds (this checkout's, issue 37).
    ours = _build_dangling(
        docker_client, f"FROM {BASE}\nLABEL {BUILT_BY_LABEL}=builder\n", labels={HASH_LABEL: "old", WORKSPACE_LABEL: identity(repo)}
    )
    try:
        done = _builder(repo, "clean")
        assert done.returncode == 0, done.stderr
        if "other run(s) are building now" in done.stderr:
            pytest.skip("another run is building on this engine: clean rightly keeps unfinished images now")
        assert [s for s in steps if engine.image_id(docker_client, s) is not None] == [], "clean left the interrupted build's images"
        assert engine.image_id(docker_client, ours) is None, "clean left a superseded image of ours"
        assert engine.image_id(docker_client, plain) is not None, "clean removed an image it did not make"
        assert engine.image_id(docker_client, derived) is not None, "clean removed an image built on top of ours"
    finally:
        for image_id in (plain, derived, ours):
            engine.remove_image_quietly(docker_client, image_id)
        engine.remove_image_quietly(docker_client, f"{FOREIGN}:x")
