"""`builder env lock|build|test|shell`: a team's environment on top of a known-good image.

lock: the env file's requirements resolved with uv on the base record's own lock as constraints
(builder/env/), written to gpu-env.lock; a requirement that needs another version of a base package
is refused in one line naming the conflict and the records where it would fit. build: the derived
image through the engine, FROM the base's digest, skipped when its content hash is built. test: the
base's smoke checks in the derived image, whose verdict must be the base's. shell: after the fit
check, `docker run` with the host's GPU options, and .devcontainer/devcontainer.json.

Which record an environment stands on: the one its lock was made on (found by the lock's inputs
among the records the env file's `base:` matches), so a newer record does not move a locked
environment; `lock --upgrade` moves it to the newest and reports what moved.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from builder.catalog.records import KnownGood
from builder.catalog.store import Catalog
from builder.compat.rules import table
from builder.engine import leftovers
from builder.engine import settings as build_settings
from builder.engine.build import git_revision
from builder.engine.client import open_engine
from builder.engine.image_build import BuildResult, Run, build_image
from builder.engine.ownership import Owner
from builder.engine.port import Connect
from builder.env import base as bases
from builder.env import lock as envlock
from builder.env import shell
from builder.env.derive import derived_spec
from builder.env.envfile import EnvFile
from builder.env.render import Context, build_context
from builder.fit import host as fithost
from builder.host import facts as hostinfo
from builder.lock import children
from builder.lock.files import LOCK_NAME, drift
from builder.lock.resolve import LockFailed, resolve, sources, uv_binary
from builder.model.plan import ImageSpec, Lock
from builder.model.results import GpuUse, SmokeResult
from builder.model.sources import Sources
from builder.model.versions import release_line
from builder.publish.signing import Signers
from builder.publish.verify import vouch
from builder.smoke.args import gpu_flags, rocm_flags_note
from builder.smoke.runner import smoke_one
from builder.usecases.catalog import find, no_match_message
from builder.usecases.fit import RecordFit, judge
from builder.usecases.test import refuse_blocked_checks
from builder.util import fsio
from builder.util.errors import RunFailure, UserError
from builder.util.fsio import read_text, write_atomic
from builder.workspace import Workspace

MAX_LOCK = 4 * 2**20
PINNED = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==")  # a pin line of uv's output
NOT_FOUND = re.compile(r"\b(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*) was not found in the (?:package registry|provided package locations)")
NO_SOURCES = Sources()  # the build's defaults: pip's configuration, $PIP_INDEX_URL ...


@dataclass(frozen=True)
class EnvBase:
    record: KnownGood
    lock: bases.BaseLock
    planned: ImageSpec | None  # the base in the workspace's plan, when the matrix still plans it

    @property
    def indexes(self) -> tuple[str, ...]:
        return self.planned.index_urls if self.planned else ()


@dataclass(frozen=True)
class EnvLocked:
    env: str
    status: str  # locked | current
    base: str  # the record's id
    digest: str
    added: tuple[tuple[str, str], ...]  # what the environment adds to the base
    changes: tuple[tuple[str, str | None, str | None], ...] = ()  # pins that moved since the previous lock
    moved_from: str | None = None  # the previous base's digest, when --upgrade (or a re-lock on a changed record) moved it
    trust: str = ""  # what the evidence check said of the base (publish/verify.py's `vouch`)


# -- the base ------------------------------------------------------------------------------------------


def candidates(catalog: Catalog, env: EnvFile) -> list[KnownGood]:
    """The records `base:` names, newest first: one for a digest, every match for a query."""
    digest = env.base_digest
    if digest is not None:
        found = [r for r in catalog.load() if r.digest == digest or r.digest.endswith("@" + digest)]
        if not found:
            raise UserError(f"base: {digest} is no record of {catalog.file}; `builder catalog` lists them", str(env.path), env.base_line)
        return found
    found = find(catalog, env.base)
    if not found:
        raise UserError(f"base: {no_match_message(catalog, env.base)}", str(env.path), env.base_line)
    return found


def base_lock(ws: Workspace, catalog: Catalog, record: KnownGood) -> EnvBase:
    """The record's packages: images/<id>/requirements.lock when it is the published one, else its manifest."""
    planned = _planned(ws, record.id)
    path = ws.images_dir / record.id / LOCK_NAME
    if planned is not None and planned.lock is not None and bases.lock_sha256(planned.lock.text) == record.lock_sha256:
        return EnvBase(record, bases.from_lock(record, planned.lock.text, str(path)), planned)
    if path.is_file():
        text = read_text(path, MAX_LOCK, "lock")
        if bases.lock_sha256(text) == record.lock_sha256:
            return EnvBase(record, bases.from_lock(record, text, str(path)), planned)
    manifest = catalog.root / record.manifest if record.manifest else None
    if manifest is not None and manifest.is_file():
        return EnvBase(record, bases.from_manifest(record, read_text(manifest, MAX_LOCK, "manifest"), str(manifest)), planned)
    raise UserError(
        f"record {record.id}: neither its lock ({path}, sha256 {record.lock_sha256}) nor its manifest is here; "
        "run from the repository that published it (--matrix)"
    )


def _planned(ws: Workspace, image: str) -> ImageSpec | None:
    try:
        return next((s for s in ws.decided.images if s.id == image), None)
    except UserError:  # no matrix beside the catalog: the record alone says what the base is
        return None


def _existing_lock(env: EnvFile) -> str | None:
    """The env file's lock, or None where nothing stands (a folder, FIFO or link to nothing there is one line)."""
    return read_text(env.lock_path, MAX_LOCK, "lock") if os.path.lexists(env.lock_path) else None


def locked_base(ws: Workspace, catalog: Catalog, env: EnvFile) -> tuple[EnvBase, Lock]:
    """The record the committed lock names as its base, and the lock; UserError when there is no
    lock or it is stale: `base:` no longer names that record, the catalog's record no longer has the
    digest the lock was made on (a swapped digest is never built FROM), or the inputs changed."""
    text = _existing_lock(env)
    if text is None:
        raise UserError(f"no {env.lock_path.name} beside it; run `builder env lock --file {env.path.name}` first", str(env.path))
    record_id, digest = envlock.locked_on(env, text)
    record = next((r for r in candidates(catalog, env) if r.id == record_id), None)
    if record is None:
        held = any(r.id == record_id for r in catalog.load())
        why = f"`base:` in {env.path.name} no longer names it" if held else f"it is no record of {catalog.file}"
        raise UserError(f"is stale: it was locked on {record_id}, but {why}; run `builder env lock`", str(env.lock_path))
    if record.digest != digest:
        raise UserError(
            f"is stale: it was locked on {record_id} as {digest}, but the catalog's record now names {record.digest}; "
            "if that change is yours run `builder env lock`, else restore the catalog from git",
            str(env.lock_path),
        )
    base = base_lock(ws, catalog, record)
    lock, current = envlock.read(env, base.lock, envlock.target(env, base.lock, base.indexes), text)
    if not current:
        raise UserError(
            f"is stale: {env.path.name} or the lock of {record_id} changed since it was locked; run `builder env lock`", str(env.lock_path)
        )
    return base, lock


@dataclass(frozen=True)
class EnvLockState:
    """`env lock --check`: the committed lock, current on its base's record, or why it is stale."""

    lock: str  # the lock file's name
    stale: str = ""  # why it is stale ("" when current)
    record: KnownGood | None = None  # the base's record, when current
    trust: str = ""  # what the evidence check said of it (publish/verify.py's `vouch`)


def lock_state(ws: Workspace, catalog: Catalog, env: EnvFile, signers: Signers) -> EnvLockState:
    """Offline: `locked_base`'s refusal as the reason it is stale, else its base's evidence checked."""
    try:
        base, _ = locked_base(ws, catalog, env)
    except UserError as exc:
        return EnvLockState(env.lock_path.name, stale=str(exc))
    return EnvLockState(env.lock_path.name, record=base.record, trust=vouch(catalog, base.record, signers))


def _locked_digest(env: EnvFile, text: str | None) -> str | None:
    """The base digest a previous lock names, None when there is none that can be read."""
    try:
        return envlock.locked_on(env, text)[1] if text is not None else None
    except UserError:
        return None


# -- lock ----------------------------------------------------------------------------------------------


def lock_env(
    ws: Workspace, catalog: Catalog, env: EnvFile, signers: Signers, upgrade: bool = False, chosen_sources: Sources = NO_SOURCES
) -> EnvLocked:
    """Resolve the environment on its base (the locked one, or with `upgrade` the newest `base:`
    names), its evidence checked as `pull` checks it, and write the env file's lock; nothing is
    written when it cannot be locked."""
    previous = _existing_lock(env)
    options = candidates(catalog, env)
    old_base = _previous_base(ws, catalog, env, options, previous) if previous is not None else None
    if upgrade and env.base_digest is not None:
        options = newer_in_line(catalog.load(), options[0]) or options
    base = old_base if old_base is not None and not upgrade else base_lock(ws, catalog, options[0])
    trust = vouch(catalog, base.record, signers)
    goal = envlock.target(env, base.lock, base.indexes)
    old_digest = _locked_digest(env, previous)
    if previous is not None and not upgrade and old_digest == base.record.digest:
        lock, current = envlock.read(env, base.lock, goal, previous)
        if current and envlock.locked_on(env, previous)[0] == base.record.id:
            return EnvLocked(env.id, "current", base.record.id, base.record.digest, envlock.added(lock, base.lock), trust=trust)
    if not env.requirements:
        raise UserError(
            "requirements: is empty: an environment adds packages to its base; list one (e.g. - requests==2.32.3), "
            f"or use the base itself (`builder pull id={base.record.id}`)",
            str(env.path),
            env.requirements_line,
        )
    settings = build_settings.for_sources(os.environ, chosen_sources, _ca_bundle(ws))
    cache = ws.build_dir / "uv-cache"
    cache.mkdir(parents=True, exist_ok=True)
    keep = None if upgrade else previous
    try:
        with children.stopped_on_exit():
            resolved = resolve(goal, sources(base.indexes, settings), settings, cache, previous=keep, uv=uv_binary())
    except LockFailed as exc:
        if exc.kind == "unresolvable":
            raise conflict(ws, catalog, env, base, exc.message) from None
        raise RunFailure(f"{env.lock_path.name}: {exc.message}") from None
    if not any(PINNED.match(line) for line in resolved.splitlines()):
        raise UserError(
            f"requirements: none of them applies to python {base.lock.python} on {base.lock.platform} "
            "(each line's marker excludes it), so there is nothing to lock; fix the markers or add a requirement",
            str(env.path),
            env.requirements_line,
        )
    lock = envlock.lock_text(env, base.lock, goal, resolved, base.record.digest)
    old = _parsed(previous)
    write_atomic(env.lock_path, lock.text)
    moved = old_digest if old_digest is not None and old_digest != base.record.digest else None
    if env.base_digest is not None and not base.record.digest.endswith(env.base_digest):  # --upgrade moved a digest base
        _rewrite_base(env, base.record.digest)
    return EnvLocked(
        env.id, "locked", base.record.id, base.record.digest, envlock.added(lock, base.lock), tuple(drift(old, lock)) if old else (), moved,
        trust,
    )  # fmt: skip


def _previous_base(ws: Workspace, catalog: Catalog, env: EnvFile, options: Sequence[KnownGood], previous: str) -> EnvBase | None:
    """The record the existing lock was made on: the one whose inputs it has, else (the env file
    changed since) the newest whose pins hold every base package the lock pinned; None if no lock
    can be read or no record fits it."""
    try:
        return locked_base(ws, catalog, env)[0]
    except UserError:
        pass
    old = _parsed(previous)
    if old is None:
        return None
    for record in options:
        try:
            candidate = base_lock(ws, catalog, record)
        except UserError:
            continue
        pins = dict(candidate.lock.pins)
        if all(pins.get(name, version) == version for name, version in old.pins) and any(name in pins for name, _ in old.pins):
            return candidate
    return None


def _ca_bundle(ws: Workspace) -> str | None:
    try:
        return ws.matrix.ca_bundle
    except UserError:
        return None


def _parsed(text: str | None) -> Lock | None:
    from builder.lock.files import parse

    return parse(text) if text else None


def conflict(ws: Workspace, catalog: Catalog, env: EnvFile, base: EnvBase, reason: str) -> UserError:
    """The one line for requirements uv cannot resolve: for a base package they would move, the
    range asked, the base's pin and the records whose pins would take it; for a package no index
    has, that; else uv's own reason."""
    asked = bases.conflicts(reason, base.lock)
    named = [(str(canonicalize_name(Requirement(r).name)), n) for r, n in zip(env.requirements, env.requirement_lines, strict=True)]
    missing = NOT_FOUND.search(reason)
    gone = str(canonicalize_name(missing["name"])) if missing else None
    line = next((n for name, n in named if any(name == asked_name for asked_name, _ in asked)), 0)  # numpy>2 itself
    line = line or next((n for name, n in named if name == gone), 0)  # the package no index has
    line = line or next((n for name, n in named if name in reason.lower()), 0)  # the requirement the resolver names
    line = line or (env.requirement_lines[0] if env.requirement_lines else env.base_line)
    said = " ".join(reason.split())[:400]
    if not asked and missing:
        return UserError(
            f"refused: {missing['name']} is on no package index this lock reads ({said}); check its name, "
            "or name the index that has it (--index-url, --extra-index-url, --wheelhouse)",
            str(env.path),
            line,
        )
    if not asked:
        return UserError(
            f"refused: uv cannot resolve the requirements on {base.record.id}: {said}; change the requirement it names", str(env.path), line
        )
    what = ", ".join(f"{name}{spec} (the base pins {base.lock.version_of(name)})" for name, spec in asked)
    fits = []
    for record in catalog.load():
        if record.id == base.record.id:
            continue
        try:
            other = base_lock(ws, catalog, record)
        except UserError:
            continue
        if bases.fits(other.lock, asked):
            fits.append(record.id)
    where = f"; records where it would fit: {', '.join(fits[:5])}" if fits else "; no record in the catalog would take it"
    return UserError(f"refused: it needs {what}, which would change {base.record.id} ({said}){where}", str(env.path), line)


def newer_in_line(records: Sequence[KnownGood], record: KnownGood) -> list[KnownGood]:
    """Records of the same line as `record`, newer first: the same stack, OS, Python, accelerator and
    frameworks at the same major.minor (a patch release), published after it."""

    def line(r: KnownGood) -> tuple[object, ...]:
        return (
            r.stack, r.os, release_line(r.python), r.accelerator.kind, r.accelerator.version,
            tuple(sorted((n, release_line(v)) for n, v in r.frameworks.items())),
        )  # fmt: skip

    same = [r for r in records if line(r) == line(record) and r.published > record.published]
    return sorted(same, key=lambda r: r.published, reverse=True)


def _rewrite_base(env: EnvFile, digest: str) -> None:
    """--upgrade on a digest base: the env file's base: line names the new digest (the rest untouched)."""
    lines = read_text(env.path, MAX_LOCK, "env file").split("\n")
    index = env.base_line - 1
    if env.base not in lines[index]:
        raise UserError(f"base: is not on one line; write the new base by hand: {digest}", str(env.path), env.base_line)
    lines[index] = lines[index].replace(env.base, digest, 1)
    write_atomic(env.path, "\n".join(lines))


# -- build and test ------------------------------------------------------------------------------------


class EnvEvents(Protocol):
    def line(self, image: str, text: str) -> None: ...


@dataclass(frozen=True)
class Prepared:
    base: EnvBase
    lock: Lock
    context: Context
    spec: ImageSpec
    trust: str = ""  # what the evidence check said of the base (publish/verify.py's `vouch`)


def prepare(ws: Workspace, catalog: Catalog, env: EnvFile, signers: Signers) -> Prepared:
    """The locked base (its record's digest still the lock's), its evidence checked as `pull` checks
    it (Unverified, exit 1, before anything is built, tested or opened), and the build context."""
    base, lock = locked_base(ws, catalog, env)
    trust = vouch(catalog, base.record, signers)
    context = build_context(env, base.record.digest, base.record.id, lock, [ws.templates])
    return Prepared(base, lock, context, derived_spec(env, base.record, base.planned, context.content_hash), trust)


def env_build_dir(ws: Workspace, env: EnvFile) -> Path:
    return ws.build_dir / "env" / env.name


def build_env(
    ws: Workspace, catalog: Catalog, env: EnvFile, events: EnvEvents, signers: Signers, force: bool = False,
    chosen_sources: Sources = NO_SOURCES, connect: Connect = open_engine, no_cache: bool = False,
) -> tuple[Prepared, BuildResult]:  # fmt: skip
    """Build the derived image unless an image with its content hash is already tagged."""
    ready = prepare(ws, catalog, env, signers)
    settings = build_settings.for_sources(os.environ, chosen_sources, _ca_bundle(ws))
    owner = Owner(ws.root, ws.build_dir)
    owner.register()
    run = Run(
        settings=settings,
        build_dir=env_build_dir(ws, env),
        lock_dir=fsio.lock_dir(),
        revision=git_revision(env.folder),
        on_line=events.line,
        no_cache=no_cache,
        owner=owner,
    )
    engine = connect(timeout=3600)
    try:
        with leftovers.active_run():
            result = build_image(run, engine, ready.spec, ready.context.files, force=force)
    finally:
        engine.close()
    return ready, result


@dataclass(frozen=True)
class EnvTested:
    smoke: SmokeResult
    base_verdict: str
    same: bool
    note: str


def test_env(
    ws: Workspace, catalog: Catalog, env: EnvFile, signers: Signers, gpu: str = "auto", timeout_s: int = 600,
    connect: Connect = open_engine,
) -> tuple[Prepared, EnvTested]:  # fmt: skip
    """The base's smoke checks (probe verdicts, versions, NumPy pin, pip check, non-root, labels) in
    the derived image; its verdict must be the one the base was published with."""
    ready = prepare(ws, catalog, env, signers)
    engine = connect()
    refuse_blocked_checks(engine)
    try:
        built = engine.inspect_image(ready.spec.tag)
        if built is None or built.labels.get("io.builder.content-hash") != ready.spec.content_hash:
            smoke = SmokeResult(
                ready.spec.id,
                ready.spec.tag,
                "not-built",
                GpuUse(False, "image not built"),
                0.0,
                failures=("run `builder env build` first",),
            )
            return ready, EnvTested(smoke, ready.base.record.verdict, False, "run `builder env build` first")
        host = hostinfo.gather(engine=lambda: hostinfo.EngineFacts(True, engine.version(), engine.gpu_runtimes()))
        results_dir = env_build_dir(ws, env) / "results"
        results_dir.mkdir(parents=True, exist_ok=True)
        with leftovers.active_run():
            smoke = smoke_one(engine, ready.spec, host, gpu, timeout_s, results_dir)
    finally:
        engine.close()
    return ready, compare(smoke, ready.base.record)


def compare(smoke: SmokeResult, record: KnownGood) -> EnvTested:
    """Equal verdicts; a base that passed on a GPU may be gpu-skipped here only because this host has none."""
    if smoke.verdict == record.verdict:
        return EnvTested(smoke, record.verdict, True, f"{smoke.verdict}, as the base")
    if record.verdict == "passed" and smoke.verdict == "gpu-skipped" and not smoke.gpu.attached:
        return EnvTested(smoke, record.verdict, True, f"gpu-skipped: {smoke.gpu.reason} (the base passed on {record.host.gpu})")
    return EnvTested(smoke, record.verdict, False, f"{smoke.verdict}, but the base was {record.verdict}")


# -- shell ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShellPlan:
    image: str
    argv: tuple[str, ...]
    line: str
    fit: RecordFit
    devcontainer: Path
    trust: str = ""
    note: str = ""  # a ROCm base: what each device option is for (smoke/args.py ROCM_FLAGS)


def plan_shell(
    ws: Workspace, catalog: Catalog, env: EnvFile, project: Path, uid: int, gid: int, signers: Signers,
    host: hostinfo.HostInfo | None = None, fit_host: fithost.FitHost | None = None,
) -> ShellPlan:  # fmt: skip
    """The evidence and fit checks, the `docker run` argv and the devcontainer file (checked against
    the schema, written only where builder wrote it before or nothing stands: write_devcontainer)."""
    ready = prepare(ws, catalog, env, signers)
    record = ready.base.record
    found = judge(record, fit_host or fithost.detect(), table())
    if found.status == "does not fit":
        raise RunFailure(f"{record.id} does not fit this host: {found.reason}; `builder fit` says more")
    facts = host or hostinfo.gather()
    flags = gpu_flags(record.accelerator.kind, facts)
    argv = shell.run_argv(env, ready.spec.tag, flags, project, uid, gid)
    doc = shell.devcontainer(env, ready.spec.tag, flags, record.accelerator.kind)
    check_devcontainer(doc)
    path = write_devcontainer(env, shell.devcontainer_text(doc), catalog.root)
    note = rocm_flags_note() if record.accelerator.kind == "rocm" else ""
    return ShellPlan(ready.spec.tag, tuple(argv), shell.run_line(argv), found, path, ready.trust, note)


def write_devcontainer(env: EnvFile, text: str, catalog_root: Path) -> Path:
    """Write the env file's devcontainer.json, replacing only a file that carries builder's marker
    (as `report` replaces only its own pages). Its folders must be folders of the project: one that
    is a file, or a link leading out of the env file's folder (or into the catalog), is one line
    saying what to move, and nothing is written."""
    path = env.devcontainer
    root = env.folder.resolve()
    folder = env.folder
    for part in path.relative_to(env.folder).parts[:-1]:
        folder = folder / part
        try:
            st = folder.lstat()
        except FileNotFoundError:
            break
        if stat.S_ISLNK(st.st_mode):
            target = folder.resolve()
            if not target.is_relative_to(root) or target.is_relative_to(catalog_root.resolve()):
                raise UserError(
                    f"is a link to {target}, {'inside the catalog' if target.is_relative_to(root) else 'outside the project'}; "
                    f"builder writes {path.relative_to(env.folder)} only into the project: replace the link with a folder",
                    str(folder),
                )
        elif not stat.S_ISDIR(st.st_mode):
            raise UserError(
                f"is not a folder; `builder env shell` writes {path.relative_to(env.folder)}: move it away (e.g. to {folder.name}.bak) and run it again",
                str(folder),
            )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fsio.write_generated(path, text, shell.MARKER)
    except UserError as exc:
        if "not written by builder" in exc.message:
            raise UserError(
                f"was not written by builder (it has no {shell.MARKER!r}); it is left as it is: move it away "
                f"(e.g. to {path.name}.mine) and run `builder env shell` again for builder's",
                str(path),
            ) from None
        raise
    return path


def check_devcontainer(doc: dict[str, object]) -> None:
    """Against the Dev Container spec's schema (the subset builder writes, builder/env/data/)."""
    import jsonschema  # type: ignore[import-untyped]

    errors = sorted(jsonschema.Draft201909Validator(shell.schema()).iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        raise RunFailure(f"the devcontainer.json builder made breaks the Dev Container schema: {errors[0].message}")


def open_shell(plan: ShellPlan, connect: Connect = open_engine) -> int:
    """Start the shell (the derived image must be built); its exit status."""
    engine = connect()
    try:
        if engine.inspect_image(plan.image) is None:
            raise UserError(f"{plan.image} is not built; run `builder env build`")
    finally:
        engine.close()
    return subprocess.run(list(plan.argv), check=False).returncode
