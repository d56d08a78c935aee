"""Team environments with the real engine, registry and index: the numba CPU image of the slice
published to the local registry (as tests/integration/test_slice_publish.py publishes the slice),
then a team folder on it: a pure-Python package and one that needs NumPy locked on the base's lock,
a requirement that would move NumPy refused, the derived image built FROM the digest, its smoke
verdict equal to the base's, and a rebuild from clean giving the same lock and the same venv files.
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

from builder.engine import client as engine
from builder.env.shell import schema
from builder.workspace import Workspace

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = "127.0.0.1:5000"
REPOSITORY = f"{REGISTRY}/builder-test/env-{uuid.uuid4().hex[:8]}"
NUMBA = next(s for s in Workspace.locate(str(ROOT / "matrix.yaml")).selected(None, use_default=True) if s.stack == "numba")
NAME = f"itest-{uuid.uuid4().hex[:6]}"
TAG = f"builder-env/{NAME}:latest"


def builder(repo: Path, *args: str, cwd: Path | None = None, timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", "--matrix", str(repo / "matrix.yaml"), *args],
        cwd=cwd or repo, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, repository_copy: Any) -> Path:
    """This module's own copy of the repository (tests/integration/conftest.py copy_repository)."""
    return Path(repository_copy(tmp_path_factory.mktemp("team-env-repo")))


@pytest.fixture(scope="module")
def catalog(repo: Path, tmp_path_factory: pytest.TempPathFactory, docker_client: DockerClient, built_for_the_lane: Any) -> Iterator[Path]:
    """The numba CPU image built, tested and published to its own repository and catalog."""
    folder = tmp_path_factory.mktemp("catalog")
    built_for_the_lane(NUMBA.tag)
    select = f"id={NUMBA.id}"
    for step in (("build", "--select", select), ("test", "--select", select)):
        done = builder(repo, *step)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    done = builder(repo, "publish", "--select", select, "--registry", REPOSITORY, "--catalog", str(folder))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    yield folder
    engine.remove_image_quietly(docker_client, TAG)
    for image in docker_client.api.images():  # its tags, and the digest the env build pulled FROM (untagged)
        for ref in (image.get("RepoTags") or []) + (image.get("RepoDigests") or []):
            if ref.startswith(REPOSITORY):
                engine.remove_image_quietly(docker_client, ref)


def record(catalog: Path) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((catalog / "known-good.json").read_text())["images"][0]
    return found


def base_numpy() -> str:
    assert NUMBA.lock is not None
    return dict(NUMBA.lock.pins)["numpy"]


def write_env(folder: Path, requirements: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = "".join(f"  - '{r}'\n" for r in requirements)
    (folder / "gpu-env.yaml").write_text(
        f"name: {NAME}\nbase: numba={NUMBA.versions['numba']} python={NUMBA.python}\nrequirements:\n{lines}"
    )
    return folder


def venv_files(docker_client: DockerClient) -> str:
    """Every file of the derived image's venv with its sha256 (what a teammate's build must equal)."""
    out: bytes = docker_client.containers.run(
        TAG, ["sh", "-c", "cd /opt/venv && find . -type f -print0 | sort -z | xargs -0 sha256sum"], remove=True, network_disabled=True
    )
    return out.decode()


def test_env_on_the_numba_image(repo: Path, catalog: Path, tmp_path: Path, docker_client: DockerClient) -> None:
    team = write_env(tmp_path / "team", ["six==1.17.0", "pandas"])
    done = builder(repo, "env", "lock", "--catalog", str(catalog), cwd=team)
    assert done.returncode == 0, done.stderr[-3000:]
    lock = (team / "gpu-env.lock").read_text()
    assert "\nsix==1.17.0 \\\n" in lock and "\npandas==" in lock, "a pure-Python package and one that needs NumPy"
    assert f"\nnumpy=={base_numpy()} \\\n" in lock, "NumPy stays the base's"

    done = builder(repo, "env", "build", "--catalog", str(catalog), cwd=team)
    assert done.returncode == 0 and done.stdout.startswith("built:"), done.stdout + done.stderr[-3000:]
    labels = docker_client.api.inspect_image(TAG)["Config"]["Labels"]
    assert labels["io.builder.env.base"] == record(catalog)["digest"]
    assert labels["io.builder.env.lock-sha256"] == __import__("hashlib").sha256(lock.encode()).hexdigest()
    assert builder(repo, "env", "build", "--catalog", str(catalog), cwd=team).stdout.startswith("up-to-date:"), "content-hash incremental"

    done = builder(repo, "env", "test", "--catalog", str(catalog), cwd=team, timeout=900)
    assert done.returncode == 0 and done.stdout.startswith("same: "), done.stdout + done.stderr[-3000:]
    assert f"{record(catalog)['verdict']}, as the base" in done.stdout
    numpy = docker_client.containers.run(TAG, ["python", "-c", "import numpy, pandas, six; print(numpy.__version__)"], remove=True)
    assert numpy.decode().strip() == base_numpy()

    done = builder(repo, "env", "shell", "--print", "--catalog", str(catalog), cwd=team)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("docker run --rm -it --user ") and f"source={team},target=/workspace" in done.stdout
    import jsonschema  # type: ignore[import-untyped]  # here: its import costs seconds (rfc3987-syntax), every worker collects this file

    jsonschema.Draft201909Validator(schema()).validate(json.loads((team / ".devcontainer" / "devcontainer.json").read_text()))

    first = venv_files(docker_client)
    (team / "gpu-env.lock").unlink()
    assert builder(repo, "env", "lock", "--catalog", str(catalog), cwd=team).returncode == 0
    assert (team / "gpu-env.lock").read_text() == lock, "re-locked from clean: the same lock"
    done = builder(repo, "env", "build", "--force", "--no-cache", "--catalog", str(catalog), cwd=team)
    assert done.returncode == 0 and done.stdout.startswith("built:"), done.stdout + done.stderr[-3000:]
    assert venv_files(docker_client) == first, "rebuilt from clean: the same installed files, byte for byte"


def test_a_requirement_that_moves_numpy_is_refused(repo: Path, catalog: Path, tmp_path: Path) -> None:
    team = write_env(tmp_path / "team", ["six==1.17.0", f"numpy>{base_numpy()}"])
    done = builder(repo, "env", "lock", "--catalog", str(catalog), cwd=team)
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "gpu-env.yaml:5: refused: it needs numpy>" in done.stderr
    assert not (team / "gpu-env.lock").exists()
