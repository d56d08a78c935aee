"""Issue 37, item 7, on one real engine shared by two checkouts of one matrix (and a third that is
deleted): `builder clean` in one lists and removes only what its own builds made. Checkout B's
build is interrupted (test_interrupts.py's silent base: its step sleeps), leaving B's committed
steps untagged; the finished images are made with the labels `builder build` gives (a real build
of a locked image takes minutes). Before, A's `clean --all --dry-run` listed B's steps (and B's
images of the shared repository), and `clean --all` removed them.

`clean --orphans` is only ever asked for with --dry-run here: on a shared engine it would be
entitled to remove leftovers of other people's older runs.
"""

from __future__ import annotations

import io
import shutil
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker import DockerClient

from builder.engine import client as engine
from builder.engine.ownership import Owner, steps_in
from builder.render.labels import BUILT_BY_LABEL, HASH_LABEL, ID_LABEL, WORKSPACE_LABEL
from tests.integration import test_interrupts as interrupts

pytestmark = pytest.mark.docker

RUN = uuid.uuid4().hex[:8]
REGISTRY = f"builder-test/workspaces-{RUN}"
silent_base = interrupts.silent_base  # test_interrupts.py's base: its apt-get sleeps, so a build stops where we want


def checkout(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "matrix.yaml").write_text(
        interrupts.MATRIX.replace(f"registry: {interrupts.REGISTRY}\n", f"registry: {REGISTRY}\n"), encoding="utf-8"
    )
    done = interrupts._builder(folder, "render")
    assert done.returncode == 0, done.stderr
    return folder


def finished_image(client: DockerClient, owner: Owner, image_id: str) -> str:
    """An image as `builder build` in `owner`'s checkout finishes one: tagged REGISTRY:<id>, its labels."""
    labels = {HASH_LABEL: f"sha256:{RUN}{image_id}", WORKSPACE_LABEL: owner.identity}
    dockerfile = f"FROM {interrupts.BASE}\nLABEL {BUILT_BY_LABEL}=builder {ID_LABEL}={image_id}\n"
    for _ in client.api.build(fileobj=io.BytesIO(dockerfile.encode()), tag=f"{REGISTRY}:{image_id}", labels=labels, rm=True, decode=True):
        pass
    return str(client.api.inspect_image(f"{REGISTRY}:{image_id}")["Id"])


@pytest.fixture
def workspaces(tmp_path: Path, silent_base: str, docker_client: DockerClient) -> Iterator[dict[str, Path]]:
    folders = {name: checkout(tmp_path / name) for name in ("a", "b", "c")}
    yield folders
    for image in docker_client.api.images(filters={"reference": f"{REGISTRY}:*"}):
        for tag in image.get("RepoTags") or []:
            engine.remove_image_quietly(docker_client, tag)
    ledger = folders["b"] / "build" / "steps.txt"
    for step in sorted(steps_in(ledger), reverse=True) if ledger.is_file() else []:  # B's interrupted steps, if a test failed first
        engine.remove_image_quietly(docker_client, step)


def interrupted_build(folder: Path, client: DockerClient) -> list[str]:
    """`builder build` in `folder`, stopped by SIGTERM in its silent step: the step images it committed."""
    proc, _ = interrupts._start_silent_build(folder, client)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return sorted(steps_in(folder / "build" / "steps.txt"))


def dangling(client: DockerClient) -> set[str]:
    return {str(i["Id"]).removeprefix("sha256:")[:12] for i in client.api.images(filters={"dangling": True})}


def test_clean_in_one_checkout_lists_and_removes_only_its_own(workspaces: dict[str, Path], docker_client: DockerClient) -> None:
    a, b, c = (Owner(workspaces[n], workspaces[n] / "build") for n in ("a", "b", "c"))
    b_steps = interrupted_build(b.root, docker_client)
    b_leaf = [s for s in b_steps if s in dangling(docker_client)]
    assert b_leaf, "B's interrupted build left its last committed step untagged"
    assert identity_of(docker_client, finished_image(docker_client, a, "img-a")) == a.identity
    finished_image(docker_client, b, "img-b")
    c.register()
    finished_image(docker_client, c, "img-c")
    shutil.rmtree(c.root)  # checkout C is deleted: its image is nobody's any more

    dry = interrupts._builder(a.root, "clean", "--all", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"would remove image {REGISTRY}:img-a" in dry.stdout, dry.stdout
    for theirs in (*b_steps, f"{REGISTRY}:img-b", f"{REGISTRY}:img-c"):
        assert theirs not in dry.stdout, f"A's dry run lists {theirs}:\n{dry.stdout}"
    assert "of other workspaces on this engine" in dry.stderr and "--orphans" in dry.stderr, dry.stderr
    orphans = interrupts._builder(a.root, "clean", "--all", "--orphans", "--dry-run")
    assert f"would remove orphan image {REGISTRY}:img-c" in orphans.stdout, orphans.stdout
    assert f"{REGISTRY}:img-b" not in orphans.stdout and not any(s in orphans.stdout for s in b_steps), orphans.stdout

    done = interrupts._builder(a.root, "clean", "--all")
    assert done.returncode == 0, done.stderr
    assert engine.image_id(docker_client, f"{REGISTRY}:img-a") is None, "A's own image is removed"
    for kept in (f"{REGISTRY}:img-b", f"{REGISTRY}:img-c", *b_leaf):
        assert engine.image_id(docker_client, kept) is not None, f"A's clean removed {kept}"

    mine = interrupts._builder(b.root, "clean")
    assert mine.returncode == 0, mine.stderr
    if "other run(s) are building now" in mine.stderr:
        pytest.skip("another run is building on this engine: clean rightly keeps unfinished images now")
    assert [s for s in b_leaf if engine.image_id(docker_client, s) is not None] == [], "B's clean removes its interrupted steps"
    assert engine.image_id(docker_client, f"{REGISTRY}:img-b") is not None, "a plain clean keeps B's current image"


def identity_of(client: DockerClient, image: str) -> str:
    return str((client.api.inspect_image(image)["Config"]["Labels"] or {}).get(WORKSPACE_LABEL))
