"""Bootstrapped bases: a real mmdebstrap + load, the same image ID from a second bootstrap, the
recipe-hash skip, and failure handling."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import filelock
import pytest
from docker import DockerClient

from builder.engine import bootstrap
from builder.engine import client as engine
from builder.engine.bootstrap import BootstrapResult, DebootstrapFailed, ensure_base
from builder.model.plan import Base
from builder.util.errors import UserError
from builder.workspace import Workspace
from tests.fake_engine import FakeEngine

ROOT = Path(__file__).resolve().parents[2]
EPOCH = 1_700_000_000  # a mirror date for the fake trees


def _base(name: str, os_: str = "debian12") -> Base:
    """A base of its own tag (builder-test-<name>/<os>), so a test never touches the real shared base."""
    return Base(name=name, vendor="cpu", os=os_, bootstrap="debootstrap", line=7, local_repository=f"builder-test-{name}")


def _remove_image(client: DockerClient, ref: str) -> None:
    with contextlib.suppress(Exception):  # absent is fine
        client.api.remove_image(ref, force=True)


def _temp_tags(client: DockerClient, base: Base) -> list[str]:
    repository = base.local_tag.rsplit(":", 1)[0]
    # one listing call: the SDK's images.list inspects each image again and fails on one removed meanwhile
    return [t for image in client.api.images(name=repository) for t in image.get("RepoTags") or [] if ":tmp-" in t]


@pytest.fixture
def private_dirs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Scratch and lock dirs of this test alone (other processes may bootstrap concurrently)."""
    monkeypatch.setattr(bootstrap, "SCRATCH_DIR", tmp_path / "scratch")
    monkeypatch.setenv("BUILDER_LOCK_DIR", str(tmp_path / "locks"))
    return tmp_path / "scratch"


def _run(client: DockerClient, image: str, script: str) -> tuple[int, str]:
    with engine.tracked_container(client, image=image, command=["/bin/sh", "-c", script], network_disabled=True) as container:
        container.start()
        status = container.wait(timeout=120)["StatusCode"]
        return status, container.logs().decode()


# --- pure: no engine needed --------------------------------------------------------------------


def test_an_unknown_os_is_a_user_error_naming_base_line_and_choices() -> None:
    with pytest.raises(UserError) as info:
        ensure_base(FakeEngine(), _base("my-ubuntu", "ubuntu22.04"), log=print)
    message = str(info.value)
    assert "my-ubuntu" in message
    assert "line 7" in message
    assert info.value.line == 7
    for supported in ("debian11", "debian12", "debian13"):
        assert supported in message


def test_a_base_without_debootstrap_is_a_user_error() -> None:
    base = Base(name="cuda", vendor="cuda", os="ubuntu22.04", image="nvidia/cuda:x", line=3)
    with pytest.raises(UserError, match="bootstrap 'None' is not supported"):
        ensure_base(FakeEngine(), base, log=print)


def test_recipe_hash_is_stable_and_tracks_the_recipe() -> None:
    one = bootstrap.recipe_for(_base("a"), "http://deb.debian.org/debian", arch="amd64")
    same = bootstrap.recipe_for(_base("b"), "http://deb.debian.org/debian", arch="amd64")
    other_mirror = bootstrap.recipe_for(_base("a"), "http://mirror.example/debian", arch="amd64")
    assert bootstrap.recipe_hash(one) == bootstrap.recipe_hash(same)  # the name is not the recipe
    assert bootstrap.recipe_hash(one) != bootstrap.recipe_hash(other_mirror)
    assert one.release == "bookworm"
    assert {"python3", "python3-venv", "ca-certificates", "passwd"} <= set(one.include)
    # The JSON form is the base's identity (its label, its hash): a change renames every base users have.
    assert bootstrap.canonical_json(one) == (
        '{"arch":"amd64","include":["ca-certificates","passwd","python3","python3-venv"],'
        '"mirror":"http://deb.debian.org/debian","release":"bookworm","schema":2,"tool":"mmdebstrap","variant":"minbase"}'
    )


@pytest.mark.parametrize(
    ("line", "network"),
    [
        ("E: Failed getting release file http://deb.debian.org/debian/dists/bookworm/Release", True),
        ("W: Couldn't download package libc6 (ver 2.36 arch amd64)", True),
        ("wget: unable to resolve host address 'deb.debian.org'", True),
        ("E: No such script: /usr/share/debootstrap/scripts/nosuch", False),
        ("E: Couldn't find these debs: python3-nosuch", False),
    ],
)
def test_network_failures_are_told_from_deterministic_ones(line: str, network: bool) -> None:
    assert DebootstrapFailed(1, ["I: Retrieving InRelease", line]).network is network


# --- against the engine, with a fake debootstrap (fast) ---------------------------------------


def _fake_rootfs(rootfs: Path) -> None:
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "fake-release").write_text("fake\n")


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bootstrap, "DEBOOTSTRAP_WAIT_MIN_S", 0.0)
    monkeypatch.setattr(bootstrap, "DEBOOTSTRAP_WAIT_MAX_S", 0.0)


@pytest.fixture
def fake_base(docker_client: DockerClient, private_dirs: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Base]:
    monkeypatch.setattr(bootstrap, "mirror_epoch", lambda recipe: EPOCH)  # the fakes read no mirror
    base = _base(f"itest-fake-{uuid.uuid4().hex[:8]}")
    yield base
    for tag in _temp_tags(docker_client, base):
        _remove_image(docker_client, tag)
    _remove_image(docker_client, base.local_tag)


@pytest.mark.docker
@pytest.mark.usefixtures("fast_retries")
def test_network_failures_are_retried(docker_client: DockerClient, fake_base: Base, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []

    def flaky(recipe: bootstrap.Recipe, rootfs: Path, epoch: int, log: Any) -> None:
        assert list(rootfs.iterdir()) == [], "a failed attempt's files survived into the retry"
        calls.append(rootfs)
        (rootfs / "half-made").write_text("")
        if len(calls) < 3:
            raise DebootstrapFailed(1, ["E: Failed getting release file http://x/Release"])
        (rootfs / "half-made").unlink()
        _fake_rootfs(rootfs)

    monkeypatch.setattr(bootstrap, "run_bootstrap", flaky)
    logs: list[str] = []
    result = ensure_base(engine.DockerEngine(docker_client), fake_base, log=logs.append)
    assert len(calls) == 3
    assert result.built
    assert any("retrying" in line for line in logs)
    assert list(bootstrap.SCRATCH_DIR.iterdir()) == []
    labels = engine.image_labels(docker_client, fake_base.local_tag)
    assert labels is not None
    assert labels[bootstrap.HASH_LABEL] == result.recipe_hash
    assert _temp_tags(docker_client, fake_base) == []


@pytest.mark.docker
@pytest.mark.usefixtures("fast_retries")
def test_deterministic_failures_are_not_retried_and_leave_nothing(
    docker_client: DockerClient, fake_base: Base, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def broken(recipe: bootstrap.Recipe, rootfs: Path, epoch: int, log: Any) -> None:
        calls.append(rootfs)
        _fake_rootfs(rootfs)
        raise DebootstrapFailed(1, ["E: Couldn't find these debs: python3-nosuch"])

    monkeypatch.setattr(bootstrap, "run_bootstrap", broken)
    with pytest.raises(UserError, match="python3-nosuch"):
        ensure_base(engine.DockerEngine(docker_client), fake_base, log=lambda _: None)
    assert len(calls) == 1
    assert engine.image_labels(docker_client, fake_base.local_tag) is None
    assert list(bootstrap.SCRATCH_DIR.iterdir()) == []


@pytest.mark.docker
def test_ctrl_c_leaves_no_tag_and_no_scratch_dir(docker_client: DockerClient, fake_base: Base, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(recipe: bootstrap.Recipe, rootfs: Path, epoch: int, log: Any) -> None:
        _fake_rootfs(rootfs)
        raise KeyboardInterrupt

    monkeypatch.setattr(bootstrap, "run_bootstrap", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ensure_base(engine.DockerEngine(docker_client), fake_base, log=lambda _: None)
    assert engine.image_labels(docker_client, fake_base.local_tag) is None
    assert _temp_tags(docker_client, fake_base) == []
    assert list(bootstrap.SCRATCH_DIR.iterdir()) == []


@pytest.mark.docker
def test_a_second_process_waits_for_the_lock(docker_client: DockerClient, fake_base: Base, monkeypatch: pytest.MonkeyPatch) -> None:
    lock_path = bootstrap.lock_path(fake_base)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import filelock, sys, time\nwith filelock.FileLock({str(lock_path)!r}):\n    print('held', flush=True); time.sleep(2)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    monkeypatch.setattr(bootstrap, "run_bootstrap", lambda r, rootfs, epoch, log: _fake_rootfs(rootfs))
    logs: list[str] = []
    start = time.monotonic()
    result = ensure_base(engine.DockerEngine(docker_client), fake_base, log=logs.append)
    holder.wait(timeout=30)
    assert result.built
    assert any("waiting for another process" in line for line in logs)
    assert time.monotonic() - start > 0.5


# --- the real thing: debootstrap from the Debian mirror, imported into the engine ----------------


@pytest.fixture(scope="module")
def built_debian12(
    docker_client: DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Base, BootstrapResult, list[str]]]:
    # A fresh name, so this really runs debootstrap (the shared local-debian12 base may exist).
    base = _base(f"itest-debian12-{uuid.uuid4().hex[:6]}")
    logs: list[str] = []
    work = tmp_path_factory.mktemp("bootstrap")
    # The Debian 12 base the other modules build on: the default job's torch image, and the images the
    # second lane's modules build (Debian 13's, only the first lane's slice builds: it bootstraps that one).
    shared = Workspace.locate(str(ROOT / "matrix.yaml")).matrix.base("local-debian12")
    with _lane_one_waits_for(shared) as lane_one, pytest.MonkeyPatch.context() as patch:
        patch.setattr(bootstrap, "SCRATCH_DIR", work / "scratch")
        patch.setenv("BUILDER_LOCK_DIR", str(work / "locks"))
        result = ensure_base(engine.DockerEngine(docker_client), base, log=logs.append)
        print(f"\nbootstrap {base.local_tag}: built={result.built} in {result.seconds:.1f}s")
        assert list((work / "scratch").iterdir()) == [], "the rootfs scratch dir was left behind"
        _share_as_the_default_base(docker_client, base, shared)
        if lane_one is not None:
            _load_into(lane_one, docker_client, shared)
    yield base, result, logs
    _remove_image(docker_client, base.local_tag)


def _share_as_the_default_base(client: DockerClient, base: Base, shared: Base) -> None:
    """Where the engine has no bootstrapped local-debian12 base yet, the one this module made is it:
    the recipe (and so every label) is the same, only the name differs, so it is the very image
    `ensure_base` would import, and the later tests' builds on this engine skip a second debootstrap
    (tests/integration/conftest.py runs this module first). The itest tag goes at the end; this one stays."""
    mine = engine.image_labels(client, base.local_tag)
    assert mine is not None
    mirror = bootstrap.Recipe.from_label(mine[bootstrap.RECIPE_LABEL]).mirror
    assert mine[bootstrap.HASH_LABEL] == bootstrap.recipe_hash(bootstrap.recipe_for(shared, mirror)), "not the shared base's recipe"
    if engine.image_labels(client, shared.local_tag) is None:
        repository, tag = shared.local_tag.rsplit(":", 1)
        client.api.tag(base.local_tag, repository, tag)


@contextlib.contextmanager
def _lane_one_waits_for(shared: Base) -> Iterator[DockerClient | None]:
    """In the second lane (tests/conftest.py), the first lane's engine, with the first lane's bootstrap
    lock of the shared base held: its first build waits on that lock, as a second `builder` process
    waits on a first (ensure_base), and then finds the base this module made loaded into its engine,
    so one debootstrap serves both engines (about a minute of the run's CPU). None, and nothing held,
    in a one-lane run, or where the first lane is already bootstrapping it (it then makes its own)."""
    address = os.environ.get("BUILDER_TEST_ENGINE1") if os.environ.get("BUILDER_TEST_LANE") == "2" else None
    if not address:
        yield None
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("BUILDER_LOCK_DIR", raising=False)  # the first lane's `builder` processes keep theirs in the default place
        lock = filelock.FileLock(str(bootstrap.lock_path(shared)))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        yield None
        return
    lane_one = docker.DockerClient(base_url=address)
    try:
        yield lane_one
    finally:
        lane_one.close()
        lock.release()


def _load_into(lane_one: DockerClient, client: DockerClient, shared: Base) -> None:
    """The shared base, saved from this engine and loaded into the first lane's (same image id, same
    labels), unless that engine already holds it."""
    labels = engine.image_labels(client, shared.local_tag)
    assert labels is not None
    if (engine.image_labels(lane_one, shared.local_tag) or {}).get(bootstrap.HASH_LABEL) == labels[bootstrap.HASH_LABEL]:
        return
    for line in lane_one.api.load_image(client.api.get_image(shared.local_tag)):
        assert "error" not in line, line
    loaded = engine.image_labels(lane_one, shared.local_tag)
    assert loaded is not None and loaded[bootstrap.HASH_LABEL] == labels[bootstrap.HASH_LABEL], loaded


@pytest.mark.docker
def test_debootstrap_builds_a_working_debian12_base(
    docker_client: DockerClient, built_debian12: tuple[Base, BootstrapResult, list[str]]
) -> None:
    base, result, logs = built_debian12
    assert result.built
    assert result.tag == base.local_tag
    assert any(line.startswith("I: success in") for line in logs), logs[-5:]
    labels = engine.image_labels(docker_client, base.local_tag)
    assert labels is not None
    assert labels[bootstrap.HASH_LABEL] == result.recipe_hash
    recipe = bootstrap.Recipe.from_label(labels[bootstrap.RECIPE_LABEL])
    assert bootstrap.recipe_hash(recipe) == result.recipe_hash  # the label round-trips exactly
    assert recipe == bootstrap.recipe_for(base, recipe.mirror)
    assert labels[bootstrap.BASE_NAME_LABEL] == "debian:bookworm"
    assert _temp_tags(docker_client, base) == []

    status, out = _run(
        docker_client,
        base.local_tag,
        "python3 -c 'import venv, ssl, sys; print(sys.version_info[:2])' && command -v useradd"
        " && test -s /etc/ssl/certs/ca-certificates.crt"
        ' && test -z "$(ls /var/cache/apt/archives/*.deb 2>/dev/null)"'
        ' && test -z "$(ls /var/lib/apt/lists 2>/dev/null)" && echo ok',
    )
    assert status == 0, out
    assert "(3, 11)" in out
    assert "/usr/sbin/useradd" in out
    assert out.strip().endswith("ok")


@pytest.mark.docker
def test_a_second_ensure_base_is_a_fast_skip(docker_client: DockerClient, built_debian12: tuple[Base, BootstrapResult, list[str]]) -> None:
    base, first, _ = built_debian12
    image_id = docker_client.api.inspect_image(base.local_tag)["Id"]
    start = time.monotonic()
    again = ensure_base(engine.DockerEngine(docker_client), base, log=lambda _: None)
    elapsed = time.monotonic() - start
    print(f"\nskip of {base.local_tag}: {elapsed * 1000:.0f} ms")
    assert not again.built
    assert again.recipe_hash == first.recipe_hash
    assert elapsed < 1.0
    assert docker_client.api.inspect_image(base.local_tag)["Id"] == image_id
