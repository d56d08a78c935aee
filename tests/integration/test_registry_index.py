"""The registry's own API against the real local registry (127.0.0.1:5000, from .ci/docker-up.sh):
builder/engine/registry.py reads two platforms' manifests the engine pushed and puts the index
that names them, and the engine then sees one name with two platforms. Two tiny images, built FROM
scratch for each platform (no emulation needed: nothing runs), stand in for an image's amd64 and
arm64 builds; publish's whole path with real arm64 builds is tests/integration/test_arm64.py's."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker import DockerClient

from builder.catalog import indexes
from builder.engine.registry import HttpRegistry

REGISTRY = "127.0.0.1:5000"


def _build(docker_client: DockerClient, folder: Path, repository: str, tag: str, platform: str) -> None:
    """FROM scratch + one file, for `platform`: nothing runs, so no emulation is needed."""
    (folder / "hello.txt").write_text(f"{platform} {uuid.uuid4()}\n", encoding="utf-8")
    (folder / "Dockerfile").write_text("FROM scratch\nCOPY hello.txt /\n", encoding="utf-8")
    for line in docker_client.api.build(path=str(folder), tag=f"{repository}:{tag}", platform=platform, rm=True, decode=True):
        assert "error" not in line, line


@pytest.fixture
def two_platforms(docker_client: DockerClient, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """repository, {platform: pushed digest}; local names removed afterwards."""
    repository = f"{REGISTRY}/builder-test/index-{uuid.uuid4().hex[:8]}"
    pushed: dict[str, str] = {}
    try:
        for platform in ("linux/amd64", "linux/arm64"):
            tag = platform.replace("/", "-")
            _build(docker_client, tmp_path, repository, tag, platform)
            assert docker_client.api.inspect_image(f"{repository}:{tag}")["Architecture"] == platform.split("/")[1]
            for line in docker_client.api.push(repository, tag, stream=True, decode=True):
                assert "error" not in line, line
            pushed[platform] = docker_client.api.inspect_distribution(f"{repository}:{tag}")["Descriptor"]["digest"]
        yield repository, pushed
    finally:
        for platform in ("linux/amd64", "linux/arm64"):
            with contextlib.suppress(Exception):  # tidying the test's own names
                docker_client.api.remove_image(f"{repository}:{platform.replace('/', '-')}")


def test_the_index_put_through_the_registry_api_lists_both_platforms(
    two_platforms: tuple[str, dict[str, str]], docker_client: DockerClient
) -> None:
    repository, pushed = two_platforms
    registry = HttpRegistry()
    entries = []
    for platform, digest in pushed.items():
        manifest = registry.manifest(repository, digest)
        assert manifest.digest == digest and manifest.media_type == indexes.DOCKER_MANIFEST
        entries.append(indexes.Entry(platform, digest, len(manifest.body), manifest.media_type))
    media_type, body = indexes.index_body(entries)
    digest = registry.put_manifest(repository, "multi", media_type, body)
    back = registry.manifest(repository, "multi")
    assert (back.digest, back.media_type, back.body) == (digest, indexes.DOCKER_LIST, body)
    seen = docker_client.api.inspect_distribution(f"{repository}:multi")
    assert seen["Descriptor"]["digest"] == digest
    assert sorted(f"{p['os']}/{p['architecture']}" for p in seen["Platforms"]) == ["linux/amd64", "linux/arm64"]
    listed = {m["platform"]["architecture"]: m["digest"] for m in json.loads(back.body)["manifests"]}
    assert listed == {"amd64": pushed["linux/amd64"], "arm64": pushed["linux/arm64"]}


def test_a_manifest_the_registry_does_not_have_is_one_fault_naming_it() -> None:
    from builder.engine.port import EngineFault

    registry = HttpRegistry()
    missing = "sha256:" + "0" * 64
    with pytest.raises(EngineFault, match=f"builder-test/none@{missing}: the registry answered 404"):
        registry.manifest(f"{REGISTRY}/builder-test/none", missing)
    with pytest.raises(EngineFault, match="127.0.0.1:1: the registry cannot be reached"):
        HttpRegistry().manifest("127.0.0.1:1/x", "latest")
