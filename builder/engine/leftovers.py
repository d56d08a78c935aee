"""What this tool left in the engine and on disk, and removing it: only ever what it made itself.

Everything it makes carries its labels: containers `io.builder.owner=builder` plus the run's
session (host, pid, pid start time), built images `io.builder.content-hash`, bootstrapped bases
`io.builder.recipe-hash`; staged build contexts live in build/contexts/<session>/. A run sweeps
what dead runs left; `builder clean` removes the rest, also the build-stage images older versions
kept, one per tag (`io.builder.stage-of=<tag>`): the Dockerfile has one stage now and makes none.

Every image a build commits carries `io.builder.built-by=builder` from its first step on (the
Dockerfile sets it right after the base), so the untagged leaf a failed or interrupted build leaves
is found by it; removing that leaf takes its untagged parents with it, never a parent that a tagged
image still uses (the engine keeps those). An image someone else built FROM one of ours inherits
the label too, but also our finished image's content hash, which our unfinished steps never carry:
such an image is left alone.

`builder clean` is scoped to its workspace (ownership.py): one engine serves several checkouts,
and each removes only what its own builds made (a finished image's io.builder.workspace label, an
unfinished step in its build/steps.txt). What no workspace owns any more (a checkout that is gone,
untagged images older versions left) is listed apart and removed only with `--orphans`; tagged
images older versions built name no workspace and stay.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import filelock

from builder.engine import session
from builder.engine.bootstrap import HASH_LABEL as RECIPE_LABEL
from builder.engine.ownership import Owner, Workspaces, forget_steps, owner_of, steps_in
from builder.engine.port import Engine, EngineFault, ImageInfo
from builder.lock.line import IMAGE_REPOSITORY as LINE_REPOSITORY
from builder.render.labels import BUILD_LABELS, BUILT_BY_LABEL, BUILT_BY_VALUE, HASH_LABEL, ID_LABEL, LINE_LABEL
from builder.util import fsio

STAGE_LABEL = "io.builder.stage-of"  # build-stage images of older versions' two-stage Dockerfiles


def runs_dir() -> Path:
    """The live runs' lock files (fsio.lock_dir, read at each use)."""
    return fsio.lock_dir() / "builder-runs"


@contextlib.contextmanager
def active_run() -> Iterator[None]:
    """Mark this process as a running build/test for as long as the block lasts (a held file lock),
    so `builder clean` leaves the intermediate images a live build may still need."""
    runs = runs_dir()
    runs.mkdir(parents=True, exist_ok=True)
    path = runs / f"{session.SESSION_ID.replace(':', '_')}.lock"
    lock = filelock.FileLock(str(path))
    with lock:
        yield
    with contextlib.suppress(OSError):
        path.unlink()


def other_active_runs() -> list[str]:
    """Sessions of other processes inside `active_run` now (their locks are held)."""
    runs = runs_dir()
    if not runs.is_dir():
        return []
    busy = []
    for path in sorted(runs.glob("*.lock")):
        if path.stem == session.SESSION_ID.replace(":", "_"):
            continue
        lock = filelock.FileLock(str(path))
        try:
            lock.acquire(timeout=0)
        except filelock.Timeout:
            busy.append(path.stem.replace("_", ":"))
            continue
        lock.release()
        with contextlib.suppress(OSError):
            path.unlink()
    return busy


@dataclass
class Removed:
    containers: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)  # tags, or short ids of untagged images
    folders: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)  # images no workspace owns any more (only with `orphans`)
    skipped: list[str] = field(default_factory=list)  # what was left alone, and why

    def count(self) -> int:
        return len(self.containers) + len(self.images) + len(self.folders) + len(self.orphans)


def _session_of(folder: Path) -> str:
    return folder.name.replace("_", ":")


def dead_staging(build_dir: Path) -> list[Path]:
    """Staged contexts of runs that are gone (their folder names are the runs' sessions)."""
    root = build_dir / "contexts"
    if not root.is_dir():
        return []
    found = []
    for folder in sorted(root.iterdir()):
        if folder.name == session.SESSION_ID.replace(":", "_"):
            continue
        alive = session.session_alive(_session_of(folder))
        legacy = alive is None and (folder / "Dockerfile").exists()  # build/contexts/<id>/ of older versions
        if alive is False or legacy:
            found.append(folder)
    return found


def remove_staging(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def sweep(engine: Engine, build_dir: Path) -> Removed:
    """At the start of a run: what killed runs left (their containers and staged contexts)."""
    removed = Removed(containers=session.remove_dead_runs_containers(engine))
    for folder in dead_staging(build_dir):
        remove_staging(folder)
        removed.folders.append(str(folder))
    return removed


def unfinished_images(engine: Engine) -> list[str]:
    """Ids of the untagged leaf images our failed or interrupted builds left: labelled built-by
    (only our Dockerfiles set it), without a content hash (only our finished images, and images
    others built on top of them, carry one)."""
    return [i.id for i in engine.images(f"{BUILT_BY_LABEL}={BUILT_BY_VALUE}", dangling=True) if HASH_LABEL not in i.labels]


_LABEL_STEP = re.compile(r"^(?:/bin/sh -c )?(?:#\(nop\)\s+)?LABEL\s+(.*)$")
_LABEL_KEY = re.compile(r"(?:^|\s)([\w./-]+)=")


def _finished_here(engine: Engine, image_id: str) -> bool:
    """Whether an image with our content hash is one `builder build` finished, not one someone built
    FROM ours (which inherits the hash label, with their own steps on top): its newest steps are
    only the LABEL steps the engine appends for the build's labels (one per label, in no set
    order), and one of them is the content hash."""
    try:
        history = engine.history(image_id)
    except EngineFault:  # unknown means not ours to remove
        return False
    keys: set[str] = set()
    for layer in history:
        step = _LABEL_STEP.match(layer.created_by.strip())
        found = set(_LABEL_KEY.findall(step.group(1))) if step else set()
        if not found or not found <= set(BUILD_LABELS):
            break
        keys |= found
    return HASH_LABEL in keys


def _remove(engine: Engine, ref: str, dry_run: bool) -> bool:
    if dry_run:
        return True
    before = engine.inspect_image(ref)
    engine.remove_image(ref)
    return before is not None and engine.inspect_image(ref) is None


def _short(image_id: str) -> str:
    return image_id.removeprefix("sha256:")[:12]


@dataclass(frozen=True)
class Scope:
    """Whose images a clean may touch: this workspace's (`owner`), and with `orphans` also those no
    workspace owns any more (ownership.py), which are listed apart."""

    owner: Owner
    orphans: bool = False

    def judge(self, labels: Mapping[str, str], known: Workspaces) -> str:
        """ours | orphan | theirs, for an image that carries a finished build's labels."""
        built_by = owner_of(labels)
        if built_by == self.owner.identity:
            return "ours"
        if built_by is None or built_by in known.gone:
            return "orphan"
        return "theirs"


def clean(
    engine: Engine,
    build_dir: Path,
    *,
    scope: Scope,
    repository: str,
    planned: Collection[str] | None,
    everything: bool,
    dry_run: bool,
    planned_lines: Collection[str] | None = None,
) -> Removed:
    """Remove this workspace's leftovers: dead runs' containers and contexts, untagged images its
    builds left (unfinished steps, superseded images). With `planned` (the plan's tags) also its
    images of `repository` that the plan no longer lists; with `everything` all its images of
    `repository` and the bootstrapped bases nothing else is built on. With `scope.orphans` also what
    no workspace owns any more (images of a checkout that is gone, and untagged images older
    versions left), in `orphans`. Another live workspace's images are never touched."""
    sweep = _Sweep(engine, scope, dry_run)
    _dead_runs(sweep, build_dir)
    known = Workspaces.known()
    busy = other_active_runs()
    if busy:
        sweep.removed.skipped.append(f"build-stage and unfinished images: {len(busy)} other run(s) are building now ({', '.join(busy)})")
    else:
        _unfinished(sweep, known)
        _stages(sweep)
    for image in engine.images(HASH_LABEL):  # not the intermediates: a build's label steps but the last are no image of their own
        _finished(sweep, image, known, repository, planned, everything)
    if everything or planned_lines is not None:
        _lines(sweep, None if everything else planned_lines)
    if everything:
        _bases(sweep)
    if not dry_run:
        forget_steps(scope.owner.ledger, [i for i in sweep.removed.images if len(i) == 12])
    sweep.removed.skipped += sweep.kept_notes()
    return sweep.removed


@dataclass
class _Sweep:
    """One clean: its engine, scope and mode, what it removed and how many images it left, by why
    (another workspace's, one no workspace owns, a tagged one an older version built)."""

    engine: Engine
    scope: Scope
    dry_run: bool
    removed: Removed = field(default_factory=Removed)
    kept: dict[str, int] = field(default_factory=lambda: {"theirs": 0, "orphan": 0, "legacy": 0})

    def remove(self, ref: str) -> bool:
        return _remove(self.engine, ref, self.dry_run)

    def orphan(self, ref: str) -> None:
        """An image no workspace owns: removed with `scope.orphans`, else counted."""
        if not self.scope.orphans:
            self.kept["orphan"] += 1
        elif self.remove(ref):
            self.removed.orphans.append(_short(ref))

    def kept_notes(self) -> list[str]:
        notes = []
        if self.kept["theirs"]:
            notes.append(f"{self.kept['theirs']} image(s) of other workspaces on this engine: their own `builder clean` removes them")
        if self.kept["legacy"]:
            notes.append(
                f"{self.kept['legacy']} tagged image(s) built before images named their workspace (nothing says whose: docker rmi removes one)"
            )
        if self.kept["orphan"]:
            notes.append(
                f"{self.kept['orphan']} image(s) no workspace owns any more (a checkout that is gone, or older versions): `builder clean --orphans` lists and removes them"
            )
        return notes


def _dead_runs(sweep: _Sweep, build_dir: Path) -> None:
    """Dead runs' containers and staged build contexts."""
    for entry in sweep.engine.owned_containers():
        run = entry.labels.get(session.SESSION_LABEL, "")
        if session.session_alive(run) is not True and run != session.SESSION_ID:
            if not sweep.dry_run:
                sweep.engine.remove_container(entry.id)
            sweep.removed.containers.append(entry.id[:12])
    for folder in dead_staging(build_dir):
        if not sweep.dry_run:
            remove_staging(folder)
        sweep.removed.folders.append(str(folder))


def _unfinished(sweep: _Sweep, known: Workspaces) -> None:
    """The untagged steps of unfinished builds: this workspace's (its ledger) removed, a live one's kept."""
    mine = steps_in(sweep.scope.owner.ledger)
    for image_id in unfinished_images(sweep.engine):
        if _short(image_id) in mine:
            if sweep.remove(image_id):
                sweep.removed.images.append(_short(image_id))
        elif _short(image_id) in known.live_steps:
            sweep.kept["theirs"] += 1
        else:
            sweep.orphan(image_id)


def _stages(sweep: _Sweep) -> None:
    for image in sweep.engine.images(STAGE_LABEL, intermediate=True):  # only older versions made these: nobody's
        sweep.orphan(image.id)


def _finished(
    sweep: _Sweep, image: ImageInfo, known: Workspaces, repository: str, planned: Collection[str] | None, everything: bool
) -> None:
    """One finished build's image: another workspace's kept, an untagged one of ours or of a gone
    checkout removed, and of its tags those `_wanted`."""
    whose = sweep.scope.judge(image.labels, known)
    if whose == "theirs":
        sweep.kept["theirs"] += 1
        return
    if whose == "orphan" and image.repo_tags and owner_of(image.labels) is None:
        sweep.kept["legacy"] += 1  # a tagged image older versions built: nothing says whose it is, and it may be in use
        return
    if whose == "orphan" and not sweep.scope.orphans:
        sweep.kept["orphan"] += 1
        return
    found = sweep.removed.images if whose == "ours" else sweep.removed.orphans
    if not image.repo_tags:
        if _finished_here(sweep.engine, image.id) and sweep.remove(image.id):
            found.append(_short(image.id))
        return
    for tag in image.repo_tags:
        if _wanted(tag, whose, image, repository, planned, everything) and sweep.remove(tag):
            found.append(tag)


def _wanted(tag: str, whose: str, image: ImageInfo, repository: str, planned: Collection[str] | None, everything: bool) -> bool:
    if whose == "orphan":  # a gone checkout's: only the names builds give (<repository>:<its id>), never another's tag
        return tag.rsplit(":", 1)[1] == image.labels.get(ID_LABEL)
    return tag.rsplit(":", 1)[0] == repository and (everything or (planned is not None and tag not in planned))


def _lines(sweep: _Sweep, planned: Collection[str] | None) -> None:
    """The CUDA lines' NVIDIA images (engine/line_image.py) the plan no longer names (`planned`: the
    plan's line images), or all of them (None), when nothing else is built on them: like the bases,
    they are this host's, shared by every workspace, so the engine's refusal while any image is built
    on one is what keeps another workspace's."""
    for image in sweep.engine.images(LINE_LABEL):
        tags = [t for t in image.repo_tags if t.startswith(f"{LINE_REPOSITORY}/") and (planned is None or t not in planned)]
        for tag in tags:  # by name: the engine refuses to delete an image another one is built on
            if sweep.dry_run or sweep.engine.remove_image(tag):
                sweep.removed.images.append(f"{tag} (if nothing else is built on it)" if sweep.dry_run else tag)


def _bases(sweep: _Sweep) -> None:
    """The bootstrapped bases, when nothing else is built on them."""
    for image in sweep.engine.images(RECIPE_LABEL):
        tags = [t for t in image.repo_tags if t.startswith("builder-base/")]
        # by id: the engine refuses while any image (another workspace's too) is built on it
        if tags and (sweep.dry_run or sweep.engine.remove_image(image.id)):
            sweep.removed.images += [f"{t} (if nothing else is built on it)" if sweep.dry_run else t for t in tags]
