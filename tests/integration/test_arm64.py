"""arm64 images on this amd64 host, for real (issue 19): the numba CPU image and the numba
CUDA-from-wheels image for linux/arm64, built through `builder build` on the bootstrapped arm64
Debian base (one base, debootstrapped under qemu-user once for both) and smoke-tested through
`builder test` under emulation.

Each image's config says arm64, and so does the base's; RUN steps and the smoke checks ran under
qemu (the probe reports an aarch64 machine); the results say `platform: linux/arm64` and
`emulated: true`; the CPU image passes and the CUDA image is `gpu-skipped` (never passed) with its
CPU-side CUDA checks passed. In CI (BUILDER_REQUIRE_DOCKER=1) a host without emulation fails
here with the one-line fix instead of skipping. Each image is built once; both are removed afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker import DockerClient

from builder.engine import bootstrap
from builder.engine import client as engine
from builder.engine.leftovers import STAGE_LABEL  # older versions' build stages: none are made now
from builder.host import doctor
from builder.host.facts import gather_emulation
from builder.model.plan import ARM64, Base
from builder.workspace import Workspace

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
SELECT = "platform=linux/arm64,stack=numba,numba=0.68.0"  # the Debian 12 pair (Debian 13 carries 0.68.1: one emulated bootstrap is enough)
WS = Workspace.locate(str(ROOT / "matrix.yaml"))
ARM = WS.selected(SELECT, use_default=False)
CPU = next(s for s in ARM if s.base.vendor == "cpu")
CUDA = next(s for s in ARM if s.base.vendor == "cuda")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, repository_copy: Any) -> Path:
    """This module's own copy of the repository (tests/integration/conftest.py copy_repository)."""
    return Path(repository_copy(tmp_path_factory.mktemp("arm64-repo")))


def results_of(repo: Path) -> Path:
    return repo / "build" / "results"


def builder(repo: Path, *args: str, timeout: int = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", *args],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def emulation() -> None:
    """qemu-aarch64 registered with the F flag (scripts/setup.sh does it): in CI its absence fails."""
    refusal = doctor.emulation_refusal([ARM64], gather_emulation())
    if refusal is None:
        return
    if os.environ.get("BUILDER_REQUIRE_DOCKER") == "1":
        pytest.fail(refusal)
    pytest.skip(refusal)


@pytest.fixture(scope="module")
def arm_build(docker_client: DockerClient, emulation: None, repo: Path) -> Iterator[dict[str, dict[str, Any]]]:
    """`builder build -j 2` of both arm64 images (the arm64 base bootstrapped once, for both)."""
    try:
        done = builder(repo, "build", "-j", "2", "--select", SELECT)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
        yield {r["id"]: r for r in json.loads((results_of(repo) / "build.json").read_text())}
    finally:
        for spec in ARM:
            for stage in docker_client.api.images(all=True, filters={"label": f"{STAGE_LABEL}={spec.tag}"}):
                engine.remove_image_quietly(docker_client, str(stage["Id"]))
            engine.remove_image_quietly(docker_client, spec.tag)


@pytest.fixture(scope="module")
def arm_test(arm_build: Any, repo: Path) -> dict[str, dict[str, Any]]:
    done = builder(repo, "test", "--select", SELECT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return {spec.id: json.loads((results_of(repo) / f"{spec.id}.json").read_text()) for spec in ARM}


def test_the_selection_is_one_cpu_and_one_cuda_from_wheels_image() -> None:
    assert sorted(s.id for s in ARM) == ["numba0.68.0-cpu-py3.11-debian12-arm64", "numba0.68.0-cu130-py3.11-debian12-arm64"]
    assert CUDA.base.cuda_from_wheels and CPU.base.local_tag == CUDA.base.local_tag == "builder-base/debian12-arm64:latest"
    for spec in ARM:
        assert spec.lock is not None and "aarch64-manylinux_" in spec.lock.text


@pytest.mark.parametrize("platform", ["linux/amd64", "linux/arm64"])
def test_a_bootstrapped_tree_is_loaded_for_its_platform(
    docker_client: DockerClient, platform: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loaded config names the base's platform: a one-file tree stands in for mmdebstrap's,
    loaded under a tag of this test's own."""
    monkeypatch.setattr(bootstrap, "SCRATCH_DIR", tmp_path / "scratch")
    monkeypatch.setenv("BUILDER_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setattr(bootstrap, "_check_tools", lambda: None)
    monkeypatch.setattr(bootstrap, "mirror_epoch", lambda recipe: 1_700_000_000)
    monkeypatch.setattr(bootstrap, "run_bootstrap", lambda recipe, rootfs, epoch, log: (rootfs / "etc").mkdir())
    base = Base(
        "itest-arch",
        "cpu",
        "debian12",
        bootstrap="debootstrap",
        local_repository=f"builder-test-arch-{uuid.uuid4().hex[:8]}",
        platform=platform,
    )
    try:
        bootstrap.ensure_base(engine.DockerEngine(docker_client), base, log=lambda line: None)
        config = docker_client.api.inspect_image(base.local_tag)
        assert (config["Os"], config["Architecture"]) == ("linux", platform.split("/")[1])
    finally:
        engine.remove_image_quietly(docker_client, base.local_tag)


def test_the_images_and_their_base_are_arm64(arm_build: dict[str, dict[str, Any]], docker_client: DockerClient) -> None:
    assert {arm_build[s.id]["status"] for s in ARM} <= {"built", "up-to-date"}
    for ref in (CPU.base.local_tag, *(s.tag for s in ARM)):
        config = docker_client.api.inspect_image(ref)
        assert (config["Os"], config["Architecture"]) == ("linux", "arm64"), ref


def test_the_smoke_tests_ran_emulated_and_say_so(arm_test: dict[str, dict[str, Any]]) -> None:
    for spec in ARM:
        result = arm_test[spec.id]
        assert (result["platform"], result["emulated"]) == (ARM64, True), spec.id
        assert result["tests"]["failures"] == 0 and result["tests"]["errors"] == 0, (spec.id, result["failures"])
        framework = result["probe"]["frameworks"]["numba"]
        assert framework["version"] == "0.68.0", framework
        assert "aarch64" in result["probe"]["host"]["platform"], "the probe ran as an arm64 process (under qemu)"
    assert arm_test[CPU.id]["verdict"] == "passed", arm_test[CPU.id]["failures"]


def test_the_cuda_image_is_gpu_skipped_never_passed_with_its_cpu_side_checks_passed(arm_test: dict[str, dict[str, Any]]) -> None:
    result = arm_test[CUDA.id]
    assert result["verdict"] == "gpu-skipped", (result["failures"], result["diagnoses"])
    assert result["gpu"]["attached"] is False
    framework = result["probe"]["frameworks"]["numba"]
    assert framework["status"] == "skipped", "no GPU here: nothing may claim passed"
    checks = result["cuda_checks"]
    assert checks and all(c["ok"] for c in checks), checks


AMD = "numba0.68.0-cpu-py3.11-debian12"  # the arm64 CPU image's amd64 sibling: one name, two platforms


@pytest.fixture(scope="module")
def two_platforms(
    arm_test: Any, repo: Path, tmp_path_factory: pytest.TempPathFactory, docker_client: DockerClient, built_for_the_lane: Any
) -> Iterator[tuple[str, Path, str]]:
    """The numba CPU image built and tested for amd64 too, then both platforms published in one run
    to a repository of this test's own, with a catalog in a temp folder: repository, catalog, publish's output."""
    built_for_the_lane(WS.selected(f"id={AMD}", use_default=False)[0].tag)
    for command in ("build", "test"):
        done = builder(repo, command, "--select", f"id={AMD}")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    repository = f"127.0.0.1:5000/builder-test/multi-{uuid.uuid4().hex[:8]}"
    catalog = tmp_path_factory.mktemp("catalog")
    done = builder(repo, "publish", "--select", "stack=numba,base=local-debian12", "--registry", repository, "--catalog", str(catalog))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    try:
        yield repository, catalog, done.stdout + done.stderr
    finally:
        for image in docker_client.api.images(name=repository):
            for tag in image.get("RepoTags") or []:
                engine.remove_image_quietly(docker_client, tag)


def test_publish_puts_one_index_naming_both_platforms_each_recorded(
    two_platforms: tuple[str, Path, str], docker_client: DockerClient
) -> None:
    repository, catalog, output = two_platforms
    records = {r["id"]: r for r in json.loads((catalog / "known-good.json").read_text())["images"]}
    assert set(records) == {AMD, CPU.id}
    assert (records[CPU.id]["platform"], records[CPU.id]["emulated"]) == (ARM64, True)
    assert records[AMD].get("platform", "linux/amd64") == "linux/amd64" and not records[AMD].get("emulated", False)
    (index,) = json.loads((catalog / "indexes.json").read_text())["indexes"]
    assert index["name"] == AMD and index["tag"] == f"{repository}:{AMD}"
    assert index["platforms"] == {"linux/amd64": records[AMD]["digest"], "linux/arm64": records[CPU.id]["digest"]}
    seen = docker_client.api.inspect_distribution(f"{repository}:{AMD}")
    assert f"{repository}@{seen['Descriptor']['digest']}" == index["digest"], "the catalog's index digest is the registry's"
    assert sorted(f"{p['os']}/{p['architecture']}" for p in seen["Platforms"]) == ["linux/amd64", "linux/arm64"]
    for platform, digest in index["platforms"].items():  # each platform's own digest is in the registry, pullable alone
        assert docker_client.api.inspect_distribution(digest)["Descriptor"]["digest"] == digest.split("@")[1], platform
    flat = "".join(output.split())  # rich may wrap a long line anywhere
    assert f"indexed{AMD}:{index['digest']}" in flat, "publish says the index it put"


def test_pull_takes_this_hosts_platform_from_the_two(two_platforms: tuple[str, Path, str], repo: Path) -> None:
    repository, catalog, _ = two_platforms
    records = {r["id"]: r for r in json.loads((catalog / "known-good.json").read_text())["images"]}
    done = builder(repo, "pull", "--catalog", str(catalog), "--arch", "amd64", "numba=0.68", "vendor=cpu")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert records[AMD]["digest"] in done.stdout + done.stderr and records[CPU.id]["digest"] not in done.stdout + done.stderr
    listed = builder(repo, "catalog", "--catalog", str(catalog), "--format", "json", "platform=linux/arm64")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    assert [r["id"] for r in data["images"]] == [CPU.id] and AMD in data["indexes"]
