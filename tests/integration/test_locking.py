"""`builder lock` for real: every embedded image whose indexes this machine reaches is resolved
(PyPI, the local wheel folders), and a local index on 127.0.0.1 plants the failures: an index
that cannot be reached, a set that cannot be resolved, a hash that does not match. A lock whose
hash was tampered with fails the build (pip's --require-hashes), and nothing half-written stays.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from docker import DockerClient

from builder.engine import client as engine
from builder.engine.ownership import ledger_of, steps_in
from builder.lock.files import parse
from tests.integration.conftest import remove_failed_steps

ROOT = Path(__file__).resolve().parents[2]
NUMBA = "numba0.68.0-cpu-py3.11-debian12"


def builder(repo: Path, *args: str, timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", *args], cwd=repo, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path, repository_copy: Any) -> Path:
    """A copy of the embedded matrix and its images/ (locks included), per test: they edit it."""
    return Path(repository_copy(tmp_path))


def snapshot(images: Path) -> dict[str, bytes]:
    return {str(p.relative_to(images)): p.read_bytes() for p in sorted(images.rglob("*")) if p.is_file()}


def test_every_reachable_embedded_image_resolves_and_locks(repo: Path) -> None:
    """The rules plan nothing that cannot be installed: a fresh resolution of every image (not the
    ones matrix.yaml's `unlocked:` names) succeeds, and the result checks as current. The fits are not
    measured again here (`--no-measure`): what the index serves moves daily, and measuring the wheels
    that moved is minutes of downloads; the reader is held to real wheels by test_wheel_fit_real.py
    and the built slice, and `nightly` measures what moved. So the only thing `lock --check` may
    name afterwards is the fit.json of an image whose lock the index moved (dropped when its lock was
    written: it was another lock's)."""
    before = {p.parent.name: p.read_bytes() for p in (repo / "images").glob("*/requirements.lock")}
    done = builder(repo, "lock", "--upgrade", "--no-measure", "-j", "2")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    locks = {p.parent.name: parse(p.read_text(encoding="utf-8")) for p in (repo / "images").glob("*/requirements.lock")}
    assert len(locks) >= 30 and all(lock is not None and lock.hashes and all(h for _, h in lock.hashes) for lock in locks.values())
    moved = {i for i in locks if (repo / "images" / i / "requirements.lock").read_bytes() != before.get(i)}
    check = builder(repo, "lock", "--check")
    complaints = check.stdout.splitlines()
    assert all(re.fullmatch(r"(missing|stale): images/(\S+)/fit\.json \(.*measures it\)", line) for line in complaints), check.stdout
    assert {line.split("/")[1] for line in complaints} <= moved, (sorted(moved), complaints)
    assert check.returncode == (1 if complaints else 0), check.stdout + check.stderr
    assert builder(repo, "render", "--check").returncode == 0


def test_an_unreachable_index_is_one_line_exit_1_and_writes_nothing(repo: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    before = snapshot(repo / "images")
    done = builder(
        repo, "lock", "--select", f"id={NUMBA}", "--upgrade", "--no-host-settings", "--index-url", f"http://127.0.0.1:{port}/simple/"
    )
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: {NUMBA}: index http://127.0.0.1:{port}/simple/ cannot be reached (Connection refused (os error 111)); check the network or name a mirror"
    ]
    assert snapshot(repo / "images") == before


def test_an_unresolvable_set_names_the_resolvers_reason(repo: Path, serve_index: Any) -> None:
    before = snapshot(repo / "images")
    with serve_index(hide=("llvmlite",)) as url:
        done = builder(repo, "lock", "--select", f"id={NUMBA}", "--upgrade", "--no-host-settings", "--index-url", url)
    assert done.returncode == 1
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert error.startswith(f"error: {NUMBA}: Because llvmlite was not found in the package registry"), error
    assert snapshot(repo / "images") == before


@pytest.mark.docker
@pytest.mark.parametrize("venv", ["pip", "canonical"])
def test_a_mirror_serving_other_bytes_fails_the_build_on_the_hash(
    repo: Path, serve_index: Any, docker_client: DockerClient, venv: str
) -> None:
    """The lock pins PyPI's hashes; a mirror that serves a changed numba wheel is refused with the cause:
    by pip's --require-hashes in the build, once (`pip`), or on the build host before any build, when
    the venv is a canonical layer made from the lock (`canonical`: matrix.yaml canonical_layers)."""
    _retag(repo, "builder-test/mirror", canonical=venv == "canonical")
    tag = f"builder-test/mirror:{NUMBA}"
    try:
        with serve_index(corrupt=("numba",)) as url:
            done = builder(repo, "build", "--select", f"id={NUMBA}", "--no-host-settings", "--index-url", url)
        assert done.returncode == 1, done.stdout[-3000:]
        _refused_on_the_hash(repo, venv)
        assert engine.image_id(docker_client, tag) is None
        # pip's build committed its steps up to the failing RUN (the ledger lists them for `builder clean`);
        # the canonical build was refused on the build host before any build
        steps = steps_in(ledger_of(repo / "build"))
        assert bool(steps) == (venv == "pip"), f"the {venv} build's ledger lists {len(steps)} step images"
    finally:
        _forget(docker_client, tag)
        remove_failed_steps(repo, docker_client)


def _retag(repo: Path, registry: str, canonical: bool = True) -> None:
    """Build under a test registry (never replace the real slice's tags); render again for it. Without
    `canonical`, matrix.yaml's canonical_layers goes: every image installs its lock with pip in a RUN step."""
    matrix = repo / "matrix.yaml"
    text = matrix.read_text(encoding="utf-8").replace("registry: ghcr.io/example/gpu-images", f"registry: {registry}")
    if not canonical:
        text, found = re.subn(r"(?m)^canonical_layers:\n(?:  .*\n|    .*\n)*", "", text)
        assert found == 1, "matrix.yaml's canonical_layers block moved: update this test"
    matrix.write_text(text)
    render = builder(repo, "render", "--force")
    assert render.returncode == 0, render.stderr


def _refused_on_the_hash(repo: Path, venv: str) -> None:
    (result,) = json.loads((repo / "build" / "results" / "build.json").read_text(encoding="utf-8"))
    if venv == "pip":
        assert result["status"] == "failed" and result["attempts"] == 1, result
        assert "does not match the hash pinned for it" in (result["cause"] or ""), result
        return
    assert result["status"] == "failed" and result["attempts"] == 0, result  # no build was started
    assert re.search(r"its venv layer: .*(sha256 differs|with the lock's hashes)", result["error"] or ""), result


def _forget(client: DockerClient, tag: str) -> None:
    for image in client.api.images(all=True, filters={"label": f"io.builder.stage-of={tag}"}):
        engine.remove_image_quietly(client, image["Id"])
    engine.remove_image_quietly(client, tag)


def test_keep_going_locks_the_rest_and_lists_what_failed(repo: Path, serve_index: Any) -> None:
    with serve_index(hide=("scipy",)) as url:  # jax needs scipy; numba does not
        done = builder(
            repo,
            "lock",
            "--select",
            "base=local-debian12,stack=[jn]*,platform=linux/amd64",
            "--upgrade",
            "--keep-going",
            "--no-host-settings",
            "--index-url",
            url,
        )
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: jax0.10.2-cpu-py3.11-debian12: Because scipy was not found"), errors
    assert "locked" in done.stdout and NUMBA in done.stdout


@pytest.mark.docker
@pytest.mark.parametrize("venv", ["pip", "canonical"])
def test_a_build_from_a_tampered_lock_fails_on_the_hash(repo: Path, docker_client: DockerClient, venv: str) -> None:
    """Every hash of one locked package replaced, and the body digest rewritten to match (it binds
    the body; it is no signature), so the lock passes `builder lock --check`: pip's --require-hashes
    still refuses every copy of it, and so does the build host that makes a canonical venv layer (no
    file its sources list has those hashes). (Without the rewritten digest, render and build refuse the lock
    before any build: tests/test_lock_integrity.py.)"""
    lock = repo / "images" / NUMBA / "requirements.lock"
    lines = lock.read_text(encoding="utf-8").splitlines()
    pins = [i for i, line in enumerate(lines) if re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*==", line)]
    first, following = pins[0], pins[1]
    for i in range(first, following):
        lines[i] = re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + hashlib.sha256(str(i).encode()).hexdigest(), lines[i])
    body = "\n".join(lines[5:]) + "\n"
    lines[4] = "# body: sha256:" + hashlib.sha256(body.encode()).hexdigest()
    lock.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert builder(repo, "lock", "--check", "--select", f"id={NUMBA}").returncode == 0
    _retag(repo, "builder-test/tampered", canonical=venv == "canonical")
    tag = f"builder-test/tampered:{NUMBA}"
    try:
        done = builder(repo, "build", "--select", f"id={NUMBA}")
        assert done.returncode == 1, done.stdout[-3000:]
        _refused_on_the_hash(repo, venv)
        assert engine.image_id(docker_client, tag) is None
        # pip's build committed its steps up to the failing RUN (the ledger lists them for `builder clean`);
        # the canonical build was refused on the build host before any build
        steps = steps_in(ledger_of(repo / "build"))
        assert bool(steps) == (venv == "pip"), f"the {venv} build's ledger lists {len(steps)} step images"
    finally:
        _forget(docker_client, tag)
        remove_failed_steps(repo, docker_client)
