"""Issue 37, item 7, offline (the fake engine): `builder clean` is scoped to its workspace. Each
checkout's builds label their images with its identity and note their step images in its ledger;
`clean` (and --dry-run) lists and removes only those, keeps other checkouts' images, and lists
what no workspace owns any more apart, removing it only with --orphans.
tests/integration/test_clean_workspaces.py does it with two workspaces on one real engine."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from builder.engine import client as engine_client
from builder.engine import image_build, leftovers
from builder.engine.image_build import Run
from builder.engine.ownership import Owner, Workspaces, forget_steps, identity, steps_in
from builder.engine.port import BuildRequest, ImageInfo, Layer, Progress
from builder.engine.settings import BuildSettings
from builder.model.plan import ImageSpec
from builder.render.labels import BUILT_BY_LABEL, HASH_LABEL, ID_LABEL, LINE_LABEL, WORKSPACE_LABEL, build_labels
from builder.usecases import clean as cleaning
from builder.workspace import Workspace
from tests.fake_engine import FakeEngine, connect_to

REPO = "ghcr.io/example/gpu-images"  # both checkouts' matrix.yaml name it: their tags are alike
FINISHED = "/bin/sh -c #(nop)  LABEL io.builder.content-hash=h org.opencontainers.image.revision=x io.builder.workspace=w"


def hexid(char: str) -> str:
    return "sha256:" + char * 64


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("BUILDER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(leftovers, "other_active_runs", lambda: [])
    return tmp_path / "state"


def checkout(tmp_path: Path, name: str) -> Owner:
    root = tmp_path / name
    (root / "build").mkdir(parents=True)
    (root / "matrix.yaml").write_text(f"registry: {REPO}\n", encoding="utf-8")
    owner = Owner(root, root / "build")
    owner.register()
    return owner


def finished(fake: FakeEngine, image: str, owner: Owner | None, *names: str, image_id: str = "x") -> None:
    labels = {BUILT_BY_LABEL: "builder", HASH_LABEL: "h", ID_LABEL: image_id, **({WORKSPACE_LABEL: owner.identity} if owner else {})}
    fake.add_image(image, *names, labels=labels)
    fake.histories[image] = [Layer(FINISHED, 0)]


def unfinished(fake: FakeEngine, char: str, owner: Owner | None) -> str:
    """A failed build's last step: untagged, built-by only, noted in `owner`'s ledger."""
    fake.add_image(hexid(char), labels={BUILT_BY_LABEL: "builder"})
    if owner is not None:
        owner.note_step(char * 12)
    return char * 12


@pytest.fixture
def engine_of_two(tmp_path: Path, state: Path) -> tuple[FakeEngine, Owner, Owner]:
    """Checkouts `a` and `b` of one matrix on one engine, each with a current image, a superseded
    one and an interrupted build's step."""
    a, b = checkout(tmp_path, "a"), checkout(tmp_path, "b")
    fake = FakeEngine()
    finished(fake, "sha256:a-current", a, f"{REPO}:img-a", image_id="img-a")
    finished(fake, "sha256:a-old", a)
    finished(fake, "sha256:b-current", b, f"{REPO}:img-b", image_id="img-b")
    finished(fake, "sha256:b-old", b)
    unfinished(fake, "1", a)
    unfinished(fake, "2", b)
    return fake, a, b


def clean(fake: FakeEngine, owner: Owner, *, everything: bool = False, orphans: bool = False, dry_run: bool = True) -> leftovers.Removed:
    return leftovers.clean(
        fake, owner.build_dir, scope=leftovers.Scope(owner, orphans), repository=REPO, planned=None, everything=everything, dry_run=dry_run
    )


def test_a_dry_run_lists_only_this_checkouts_images(engine_of_two: tuple[FakeEngine, Owner, Owner]) -> None:
    """Before: `clean --all --dry-run` in one checkout listed the other's images and intermediates."""
    fake, a, b = engine_of_two
    removed = clean(fake, a, everything=True)
    assert sorted(removed.images) == ["1" * 12, "a-old", f"{REPO}:img-a"], removed.images
    assert removed.orphans == [] and fake.removed_images == []
    assert any("of other workspaces on this engine" in note for note in removed.skipped), removed.skipped


def test_clean_removes_only_its_own_and_the_other_checkout_then_its_own(engine_of_two: tuple[FakeEngine, Owner, Owner]) -> None:
    fake, a, b = engine_of_two
    clean(fake, a, everything=True, dry_run=False)
    assert sorted(fake.removed_images) == [f"{REPO}:img-a", hexid("1"), "sha256:a-old"]
    assert steps_in(a.ledger) == frozenset(), "the ledger forgets what was removed"
    assert {"sha256:b-current", "sha256:b-old", hexid("2")} <= fake.image_ids
    clean(fake, b, dry_run=False)  # a plain clean: its untagged leftovers, not its current image
    assert {"sha256:b-old", hexid("2")}.isdisjoint(fake.image_ids) and "sha256:b-current" in fake.image_ids


def test_what_no_workspace_owns_is_listed_apart_and_removed_only_with_orphans(tmp_path: Path, state: Path) -> None:
    a, gone = checkout(tmp_path, "a"), checkout(tmp_path, "gone")
    other_host = "f" * 16  # an identity this host has no note of: another host sharing the engine
    fake = FakeEngine()
    finished(fake, "sha256:gone-current", gone, f"{REPO}:img-g", "mine/retagged:latest", image_id="img-g")
    finished(fake, "sha256:legacy-old", None)  # untagged, built before images named their workspace
    finished(fake, "sha256:legacy-current", None, f"{REPO}:img-l", image_id="img-l")  # tagged: may be in use, stays
    fake.add_image("sha256:remote", f"{REPO}:img-r", labels={HASH_LABEL: "h", WORKSPACE_LABEL: other_host, ID_LABEL: "img-r"})
    stray = unfinished(fake, "3", None)
    shutil.rmtree(gone.root)  # the checkout is deleted
    assert Workspaces.known().gone == {gone.identity}

    plain = clean(fake, a, everything=True)
    assert plain.images == [] and plain.orphans == [], "nothing of its own; the orphans only with --orphans"
    assert any("--orphans" in note for note in plain.skipped) and any("tagged image(s) built before" in note for note in plain.skipped)

    removed = clean(fake, a, everything=True, orphans=True, dry_run=False)
    assert sorted(removed.orphans) == [stray, f"{REPO}:img-g", "legacy-old"], removed.orphans
    assert fake.names.get("mine/retagged:latest") == "sha256:gone-current", "a name someone else gave stays"
    assert {"sha256:legacy-current", "sha256:remote"} <= fake.image_ids


def test_a_build_labels_its_image_with_the_workspace_and_notes_its_steps(tmp_path: Path, state: Path) -> None:
    owner = checkout(tmp_path, "a")
    fake = FakeEngine()
    lines = ("Step 1/2 : FROM x\n", " ---> 0123456789ab\n", "Successfully built fedcba987654\n")
    fake.build_output = lambda request: [Progress(text=line) for line in lines]
    run = Run(settings=BuildSettings(), build_dir=owner.build_dir, lock_dir=tmp_path / "locks", owner=owner)
    with (tmp_path / "log").open("w") as log:
        image_build.stream_into(run, fake, BuildRequest(tmp_path, "t:1"), "img", log)
    assert steps_in(owner.ledger) == {"0123456789ab", "fedcba987654"}
    assert build_labels(_spec(), "rev", owner.identity)[WORKSPACE_LABEL] == owner.identity == identity(owner.root)


def test_a_build_never_removes_the_image_another_checkout_built_under_its_tag(tmp_path: Path, state: Path) -> None:
    a, b = checkout(tmp_path, "a"), checkout(tmp_path, "b")
    theirs = ImageInfo("sha256:b", {WORKSPACE_LABEL: b.identity})
    assert not image_build.replaceable(theirs, a)
    assert image_build.replaceable(ImageInfo("sha256:a", {WORKSPACE_LABEL: a.identity}), a)
    assert image_build.replaceable(ImageInfo("sha256:old", {}), a), "one older versions built names no workspace: replaced as before"


def test_the_cli_dry_run_names_no_other_checkouts_image(
    engine_of_two: tuple[FakeEngine, Owner, Owner], cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, a, b = engine_of_two
    monkeypatch.setattr(engine_client, "open_engine", lambda timeout=600: fake)
    matrix = a.root / "matrix.yaml"
    matrix.write_text((Path(__file__).resolve().parents[1] / "matrix.yaml").read_text().replace("ghcr.io/example/gpu-images", REPO))
    result = cli("--matrix", str(matrix), "clean", "--all", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "would remove image a-old" in result.stdout and f"would remove image {REPO}:img-a" in result.stdout
    assert "img-b" not in result.stdout and "b-old" not in result.stdout and "2" * 12 not in result.stdout, result.stdout
    assert fake.removed_images == []


def test_the_clean_use_case_takes_its_engine_and_closes_it(engine_of_two: tuple[FakeEngine, Owner, Owner]) -> None:
    """Issue 40: `builder clean` opened the Docker adapter in the command's body. The use-case takes
    the engine (engine/port.py's Connect) like every other one, and closes it when done."""
    fake, a, _ = engine_of_two
    (a.root / "matrix.yaml").write_text(
        (Path(__file__).resolve().parents[1] / "matrix.yaml").read_text().replace("ghcr.io/example/gpu-images", REPO)
    )
    done = cleaning.clean(Workspace(a.root / "matrix.yaml"), cleaning.CleanOptions(everything=True, dry_run=True), connect_to(fake))
    assert done.dry_run and f"{REPO}:img-a" in done.images and "a-old" in done.images
    assert not any("img-b" in name or "b-old" in name for name in done.images), "another checkout's images are its own"
    assert done.count() == len(done.containers) + len(done.images) + len(done.folders) + len(done.orphans) > 0
    assert fake.removed_images == [] and fake.closed


def _spec() -> ImageSpec:
    root = Path(__file__).resolve().parents[1]
    return Workspace.locate(str(root / "matrix.yaml")).selected("id=torch2.13.0-cpu-py3.11-debian12", use_default=False)[0]


@pytest.mark.parametrize(
    ("history", "finished"),
    [
        # the classic builder appends one LABEL step per build label, in no set order (measured on 20.10)
        ((f"LABEL {WORKSPACE_LABEL}=w", "LABEL org.opencontainers.image.revision=r", f"LABEL {HASH_LABEL}=h", "RUN x"), True),
        ((f"LABEL {HASH_LABEL}=h", f"LABEL {WORKSPACE_LABEL}=w", "RUN x"), True),
        ((f"LABEL {HASH_LABEL}=h org.opencontainers.image.revision=r", "RUN x"), True),  # BuildKit: one step
        (("LABEL theirs=1", f"LABEL {HASH_LABEL}=h", "RUN x"), False),  # built FROM ours by someone else
        (("RUN their-step", f"LABEL {WORKSPACE_LABEL}=w", f"LABEL {HASH_LABEL}=h"), False),
        ((f"LABEL {WORKSPACE_LABEL}=w", "RUN x"), False),  # no content hash among the build's labels
    ],
)
def test_a_finished_build_is_told_by_its_label_steps_in_any_order(history: tuple[str, ...], finished: bool) -> None:
    """Before, only the newest step was looked at for the content hash: a real build's last LABEL
    step is as often its revision or workspace, and such a superseded image was never removed."""
    fake = FakeEngine()
    fake.add_image("sha256:x", labels={HASH_LABEL: "h"})
    fake.histories["sha256:x"] = [Layer(f"/bin/sh -c #(nop)  {step}", 0) for step in history]
    assert leftovers._finished_here(fake, "sha256:x") is finished


def test_the_ledger_is_never_written_through_a_link_and_a_fifo_never_blocks_a_build(tmp_path: Path, state: Path) -> None:
    import os

    owner = checkout(tmp_path, "a")
    outside = tmp_path / "outside.txt"
    outside.write_text("theirs\n")
    owner.ledger.symlink_to(outside)
    owner.note_step("1" * 12)
    forget_steps(owner.ledger, ["1" * 12])
    assert outside.read_text() == "theirs\n" and owner.ledger.is_symlink()
    owner.ledger.unlink()
    os.mkfifo(owner.ledger)
    owner.note_step("2" * 12)  # returns at once: a FIFO is not the ledger
    assert steps_in(owner.ledger) == frozenset()


def test_clean_removes_the_cuda_line_images_the_plan_no_longer_names(engine_of_two: tuple[FakeEngine, Owner, Owner]) -> None:
    """A CUDA line's NVIDIA image (engine/line_image.py) is this host's, like a base: `clean --stale`
    removes the ones no current line lock names, `--all` every one; the engine refuses any image
    that another (another workspace's too) is built on."""
    fake, a, _ = engine_of_two
    current, old = "builder-line/cuda13-debian12-py3.11-amd64:1111", "builder-line/cuda13-debian12-py3.11-amd64:0000"
    fake.add_image("sha256:line-current", current, labels={LINE_LABEL: "cuda13-debian12-py3.11-amd64"})
    fake.add_image("sha256:line-old", old, labels={LINE_LABEL: "cuda13-debian12-py3.11-amd64"})
    stale = leftovers.clean(
        fake, a.build_dir, scope=leftovers.Scope(a, False), repository=REPO, planned=[f"{REPO}:img-a"], everything=False,
        dry_run=False, planned_lines=[current],
    )  # fmt: skip
    assert old in stale.images and current not in stale.images and fake.removed_images.count(old) == 1
    assert current in fake.names, "the line image the plan names stays"
    everything = clean(fake, a, everything=True, dry_run=False)
    assert current in everything.images and current not in fake.names
