"""Same lock, same image ID, for real: the canonical numba CPU image (matrix.yaml `canonical_layers`)
built from clean on the suite's two engines (the second at $BUILDER_TEST_ENGINE2), one after the other,
from one copy of the repository (so the workspace and revision labels `builder build` adds are the
same), under a registry name of its own (so the slice's image of the same id is not touched). The
image IDs and the layer diff IDs must be equal. Without a second engine (a one-lane run) the second
build is on the same engine, after the first image is removed. The slice smoke-tests the image.

Then BuildKit: `builder bake` builds the same image with `docker buildx bake` (Debian 13's plugin,
.ci/buildx.sh) on this lane's engine and normalizes it; its layer diff IDs must be `builder build`'s
(the image ID differs: BuildKit's history says other things). The CUDA case is the canonical CUDA
numba image, run once matrix.yaml's canonical_layers names it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest
from docker import DockerClient

from builder.engine import client as engine
from builder.engine import line_image, settings
from builder.engine.image_build import Run
from builder.lock import layer
from builder.model.sources import Sources
from builder.usecases.layers import layer_maker
from builder.workspace import Workspace
from tests.integration.conftest import copy_repository

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "numba0.68.0-cpu-py3.11-debian12"
REGISTRY = "reproducible.test/gpu-images"
TAG = f"{REGISTRY}:{IMAGE}"
BASE = "builder-base/debian12:latest"
LINE_MEMBER = "cupy14.0.0-cu130-py3.11-debian12"  # on the cuda13 line (matrix.yaml line_layers)
BUILT: dict[str, list[str]] = {}  # image id -> the layer diff IDs `builder build` gave it on this lane's engine


def builder(folder: Path, *args: str, host: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    if host is not None:
        env["DOCKER_HOST"] = host
        if host == os.environ.get("BUILDER_TEST_ENGINE2"):
            env["BUILDER_LOCK_DIR"] = os.environ.get("BUILDER_LOCK_DIR") or "/tmp/builder-engine2"  # the second lane's locks
    return subprocess.run(
        [sys.executable, "-m", "builder", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=1200, check=False
    )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = copy_repository(tmp_path_factory.mktemp("reproducible") / "repo")
    matrix = folder / "matrix.yaml"
    text = matrix.read_text(encoding="utf-8")
    matrix.write_text("\n".join(f"registry: {REGISTRY}" if line.startswith("registry:") else line for line in text.splitlines()) + "\n")
    rendered = builder(folder, "render", host=None)
    assert rendered.returncode == 0, rendered.stderr
    return folder


def _engines(docker_client: DockerClient) -> list[tuple[str | None, DockerClient]]:
    """(DOCKER_HOST for `builder`, a client) of this lane's engine, then the other engine's; this one
    twice in a one-engine run."""
    mine = (os.environ.get("DOCKER_HOST"), docker_client)
    other = os.environ.get("BUILDER_TEST_ENGINE1") if os.environ.get("BUILDER_TEST_LANE") == "2" else os.environ.get("BUILDER_TEST_ENGINE2")
    return [mine, (other, docker.DockerClient(base_url=other))] if other else [mine, mine]


def _same_base(source: DockerClient, target: DockerClient) -> None:
    """The second engine builds on the very base the first did: loaded from it when it has none."""
    want = engine.image_id(source, BASE)
    assert want is not None, f"the first build left no {BASE}"
    found = engine.image_id(target, BASE)
    if found is None:
        for line in target.api.load_image(source.api.get_image(BASE)):
            assert "error" not in line, line
        found = engine.image_id(target, BASE)
    assert found == want, f"the engines hold two different {BASE} ({want} and {found}): their images cannot be compared"


def test_two_engines_build_one_image_id(docker_client: DockerClient, workspace: Path) -> None:
    made: list[tuple[str, str, list[str], float]] = []  # (engine, image ID, diff IDs, seconds)
    engines = _engines(docker_client)
    try:
        for n, (host, client) in enumerate(engines):
            if n:
                _same_base(engines[0][1], client)
            engine.remove_image_quietly(client, TAG)  # from clean: no image of the tag, so no step images of it either
            started = time.monotonic()
            done = builder(workspace, "build", "--select", f"id={IMAGE}", host=host)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            attrs = client.api.inspect_image(TAG)
            result = json.loads((workspace / "build" / "results" / "build.json").read_text(encoding="utf-8"))
            assert [r["image_id"] for r in result] == [attrs["Id"]]
            assert "2000" <= attrs["Created"] < "2009", f"created {attrs['Created']}: not the lock's SOURCE_DATE_EPOCH"
            made.append((host or "the default engine", attrs["Id"], attrs["RootFS"]["Layers"], time.monotonic() - started))
            if n == 0:
                BUILT[IMAGE] = attrs["RootFS"]["Layers"]
        print("\n" + "\n".join(f"{where}: {image} in {seconds:.1f}s" for where, image, _, seconds in made))
        (first_engine, first_id, first_layers, _), (second_engine, second_id, second_layers, _) = made
        assert first_layers == second_layers, f"layer diff IDs differ between {first_engine} and {second_engine}"
        assert first_id == second_id, f"{first_engine} built {first_id}, {second_engine} {second_id}"
        dockerfile = (workspace / "images" / IMAGE / "Dockerfile").read_text(encoding="utf-8")
        assert "ADD venv.tar /" in dockerfile and "pip install" not in dockerfile
    finally:
        for _, client in dict.fromkeys(engines):
            engine.remove_image_quietly(client, TAG)
            if client is not docker_client:
                client.close()


def test_two_engines_make_one_line_image_and_member(docker_client: DockerClient, workspace: Path) -> None:
    """The cuda13 line's NVIDIA image (matrix.yaml line_layers; engine/line_image.py) made from clean on
    both engines, as `builder build` makes it before the line's members: one image ID, and its NVIDIA
    layer's diff ID the sha256 of the tar the host made from the line lock's wheels. Then a member
    (cupy, canonical: its venv.tar above the line image) built by `builder build` on each: one image
    ID, on the line image's layers."""
    ws = Workspace(workspace / "matrix.yaml")
    spec = next(s for s in ws.decided.images if s.id == LINE_MEMBER)
    assert spec.line_image is not None and layer.line_layer(spec) and spec.canonical
    engines = _engines(docker_client)
    made: list[tuple[str, list[str]]] = []
    members: list[tuple[str, list[str]]] = []
    build_dir = workspace / "build"
    try:
        for n, (host, client) in enumerate(engines):
            if n:
                _same_base(engines[0][1], client)
            engine.remove_image_quietly(client, spec.tag)
            engine.remove_image_quietly(client, spec.line_image)
            chosen = settings.for_sources(os.environ, Sources(), ws.matrix.ca_bundle)
            run = Run(settings=chosen, build_dir=build_dir, lock_dir=build_dir / f"locks-{n}")
            run.layers = layer_maker([spec], chosen, ROOT / "build" / "wheels")  # the repository's wheels
            line_image.ensure(run, engine.DockerEngine(client), spec)
            attrs = client.api.inspect_image(spec.line_image)
            made.append((attrs["Id"], attrs["RootFS"]["Layers"]))
            done = builder(workspace, "build", "--select", f"id={LINE_MEMBER}", host=host)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            member = client.api.inspect_image(spec.tag)
            members.append((member["Id"], member["RootFS"]["Layers"]))
            if client is docker_client:
                BUILT[LINE_MEMBER] = member["RootFS"]["Layers"]
        assert made[0] == made[1], f"two engines made two line images: {made[0][0]} and {made[1][0]}"
        base = docker_client.api.inspect_image(BASE)["RootFS"]["Layers"]
        assert made[0][1][:-1] == base, "the line image is its base plus one layer"
        line_layer = layer_maker([spec], chosen, ROOT / "build" / "wheels")
        assert line_layer is not None
        with line_layer(spec, line=True)[layer.NVIDIA_LAYER_NAME].reader() as tar:  # the tar the host makes, made again here
            digest = hashlib.sha256()
            while chunk := tar.read(1 << 20):
                digest.update(chunk)
        assert made[0][1][-1] == "sha256:" + digest.hexdigest(), "the NVIDIA layer's diff ID is not the sha256 of the tar the host made"
        assert members[0][1][: len(made[0][1])] == made[0][1], "the member is not on its line image's layers"
        assert members[0] == members[1], f"two engines built two {LINE_MEMBER}: {members[0][0]} and {members[1][0]}"
    finally:  # this lane's engine keeps the line image for the wheels slice (test_wheels_slice.py builds the members on it, then removes it)
        for _, client in dict.fromkeys(engines):
            engine.remove_image_quietly(client, spec.tag)
            if client is not docker_client:
                engine.remove_image_quietly(client, str(spec.line_image))
                client.close()


def _canonical(folder: Path, image: str) -> bool:
    """Whether its Dockerfile adds the venv layer made from the lock (render wrote it from canonical_layers)."""
    dockerfile = folder / "images" / image / "Dockerfile"
    return dockerfile.is_file() and "ADD venv.tar /" in dockerfile.read_text(encoding="utf-8")


@pytest.mark.parametrize("image", [IMAGE, LINE_MEMBER])
def test_bake_builds_the_same_layers(docker_client: DockerClient, workspace: Path, image: str) -> None:
    """`builder bake` (docker buildx bake, then the normalization) gives `builder build`'s diff IDs: for
    the CPU image, and for the cuda13 line's cupy, which BuildKit builds FROM the line's image while
    `builder build` built it FROM the base and spliced the line's layer in (engine/image_build.py)."""
    if not _canonical(workspace, image):
        pytest.skip(f"{image} is not canonical yet (matrix.yaml canonical_layers)")
    host, tag = os.environ.get("DOCKER_HOST"), f"{REGISTRY}:{image}"
    try:
        if image not in BUILT:  # the two-engine test did not build it here: build it the classic way first
            engine.remove_image_quietly(docker_client, tag)
            done = builder(workspace, "build", "--select", f"id={image}", host=host)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            BUILT[image] = docker_client.api.inspect_image(tag)["RootFS"]["Layers"]
        started = time.monotonic()
        baked = builder(workspace, "bake", "--select", f"id={image}", host=host)
        assert baked.returncode == 0, baked.stdout[-2000:] + baked.stderr[-2000:]
        print(f"\nbake of {image}: {time.monotonic() - started:.1f}s")
        attrs = docker_client.api.inspect_image(tag)
        assert any("buildkit" in (h.get("Comment") or "") for h in docker_client.api.history(tag)), "bake did not build it"
        assert attrs["Id"] in baked.stdout
        assert attrs["RootFS"]["Layers"] == BUILT[image], f"bake's layer diff IDs differ from builder build's for {image}"
        assert "2000" <= attrs["Created"] < "2009", f"created {attrs['Created']}: not the lock's SOURCE_DATE_EPOCH"
    finally:
        engine.remove_image_quietly(docker_client, tag)
