"""The `builder lock` use-case: resolve the selected images (in parallel), then write the new locks
into images/ through render (so the Dockerfiles that install from them, their content hashes and
the manifest change with them), or, with `check`, compare every lock with its inputs, offline.

A lock that cannot be made is never half-written: its image keeps its old lock (or none), and the
result says why (an index that cannot be reached, or the resolver's own reason).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from builder.compat.rules import table
from builder.engine import settings as build_settings
from builder.engine import staging
from builder.engine.settings import BuildSettings
from builder.lock import children, line
from builder.lock.claims import refusals, refuse_other_cuda
from builder.lock.files import LOCK_NAME, drift, load, lock_text, verify
from builder.lock.published import Problem, judge_pin, pins_of, published_for
from builder.lock.resolve import LockFailed, resolve, sources, uv_binary
from builder.lock.resolve import Sources as UvSources
from builder.lock.target import lock_state, target_for
from builder.model.locked_fit import FIT_NAME
from builder.model.plan import ImageSpec, Lock
from builder.model.sources import Sources
from builder.render.tree import write_tree
from builder.updates.simple import IndexPages
from builder.usecases import measure as measuring
from builder.util.errors import RunFailure, UserError
from builder.workspace import Workspace

MAX_JOBS = 16
FAILED = ("failed", "unreachable", "unresolvable")


@dataclass(frozen=True)
class LockOptions:
    jobs: int = 2
    upgrade: bool = False
    keep_going: bool = False
    sources: Sources = Sources()
    include_unlocked: bool = False  # also try images matrix.yaml's `unlocked:` names (an explicit --select does)
    measure: bool = True  # then measure each locked CUDA image's fit from its wheels (usecases/measure.py)


@dataclass(frozen=True)
class LockResult:
    id: str
    status: str  # locked | current | unlocked | failed | unreachable | unresolvable | not-locked | missing | stale
    seconds: float = 0.0
    detail: str = ""
    pins: int = 0  # packages in the new lock
    changes: tuple[tuple[str, str | None, str | None], ...] = ()  # (package, old, new) when an existing lock changed
    file: str = LOCK_NAME  # the file of images/<id>/ the status is about (requirements.lock, or fit.json for `check`)

    @property
    def path(self) -> str:
        """Its file below images/: `<id>/requirements.lock`, or a CUDA line's `lines/<line>.lock`."""
        return self.file if self.id.startswith(line.PREFIX) else f"{self.id}/{self.file}"


Done = Callable[[LockResult], None]


def check(specs: Sequence[ImageSpec], images_dir: str = "images") -> list[LockResult]:
    """Offline: every lock against its inputs; a missing lock counts unless matrix.yaml's `unlocked` names the image.
    Every lock must be, line for line, what `builder lock` writes, for this image and (unless stale)
    for its inputs (files.load, files.verify): anything else is a UserError naming the file and line.
    A current lock of a CUDA image must have its fit measured from it (fit.json), and that fit must be
    what its readings give by today's rules (usecases/measure.py `stale`)."""
    out = []
    for spec in specs:
        found = lock_state(spec, table())
        if spec.lock is not None:
            where = f"{images_dir}/{spec.id}/{LOCK_NAME}"
            verify(load(spec.lock.text, where), target_for(spec, table()), where)
        detail = {"stale": "its inputs changed since `builder lock`", "missing": "no requirements.lock", "unlocked": spec.unlocked or ""}
        second = refusals(spec, spec.lock, table()) if found == "locked" and spec.lock is not None else []
        if second:  # one CUDA per image: a lock that carries another is not current, whatever its inputs
            found, detail["stale"] = "stale", f"its lock carries a second CUDA: {second[0]}"
        status = "current" if found == "locked" else found
        fit_problem = measuring.stale(spec, table()) if status == "current" else None
        if fit_problem is not None:
            status = "missing" if spec.locked_fit is None else "stale"
            out.append(
                LockResult(spec.id, status, detail=f"{fit_problem}; `builder lock --select id={spec.id}` measures it", file=FIT_NAME)
            )
            continue
        out.append(LockResult(spec.id, status, detail=detail.get(found, "")))
    return out


@dataclass(frozen=True)
class LockCheck:
    """`lock --check`, and with `--index` the sources asked too: what is wrong, and what its summary counts."""

    folder: str  # images/, as the lines name it
    bad: tuple[LockResult, ...]  # missing or stale, offline
    current: int
    unlocked: int  # matrix.yaml's `unlocked:` images
    asked: tuple[LockResult, ...] | None = None  # with --index: each lock the offline check passed, as its sources answered

    @property
    def unpublished(self) -> tuple[LockResult, ...]:
        return tuple(r for r in self.asked or () if r.status in ("unpublished", "unchecked"))

    @property
    def published(self) -> int:
        return sum(r.status == "published" for r in self.asked or ())

    @property
    def ok(self) -> bool:
        return not self.bad and not self.unpublished


def check_locks(ws: Workspace, specs: Sequence[ImageSpec], against_index: bool, chosen_sources: Sources) -> LockCheck:
    """`check` (offline first: a stale lock is that), then with `against_index` `check_index` of the rest."""
    results = check(specs, ws.images_dir.name) + check_lines(ws, specs)
    bad = tuple(r for r in results if r.status in ("missing", "stale"))
    unlocked = sum(r.status == "unlocked" for r in results)
    asked = None
    if against_index:
        asked = tuple(check_index(ws, [s for s in specs if s.id not in {r.id for r in bad}], chosen_sources))
    return LockCheck(ws.images_dir.name, bad, len(results) - len(bad) - unlocked, unlocked, asked)


def check_lines(ws: Workspace, specs: Sequence[ImageSpec]) -> list[LockResult]:
    """Offline: the lock of each CUDA line the images are on (lock/line.py), against the line's inputs."""
    lines = ws.line_locks()
    out = []
    for key in sorted({s.line for s in specs if s.line is not None}):
        target, found = lines[key]
        status = "missing" if found is None else "stale" if found.inputs != target.inputs else "current"
        detail = {"missing": f"no {line.rel_path(key)}", "stale": "its members' requirements or constraints changed since `builder lock`"}
        out.append(LockResult(target.image, status, detail=detail.get(status, ""), file=line.rel_path(key)))
    return out


def check_index(ws: Workspace, specs: Sequence[ImageSpec], chosen_sources: Sources, backoff_s: float = 1.0) -> list[LockResult]:
    """Online (`lock --check --index`): every hash each lock allows is the sha256 of a file its
    sources publish for that package and version, asked of the same sources `builder lock`
    resolves with (the default index or its mirror, the framework indexes the image still needs,
    local mirrors and wheel folders), each project page read once. `published` when all are;
    `unpublished` naming the first pins that are not; `unchecked` when a source could not be read
    and what it might have held is missing. What the offline check cannot prove (lock/published.py)."""
    chosen = build_settings.for_sources(os.environ, chosen_sources, ws.matrix.ca_bundle)
    pages: dict[tuple[tuple[str, ...], tuple[str, ...]], IndexPages] = {}
    out = []
    for spec in specs:
        if spec.lock is None:
            out.append(LockResult(spec.id, "unlocked" if spec.unlocked else "missing", detail=spec.unlocked or "no requirements.lock"))
            continue
        started = time.monotonic()
        where = sources(staging.needed_indexes(spec, set(staging.local_wheels(spec, chosen.pip.local_dirs))), chosen)
        key = (where.indexes, where.find_links)
        if key not in pages:
            pages[key] = IndexPages(where.indexes, tuple(Path(f) for f in where.find_links), chosen.ca_bundle, backoff_s=backoff_s)
        forged, unread = _unpublished(spec.lock, pages[key])
        problems = forged + unread
        status = "unpublished" if forged else "unchecked" if unread else "published"
        detail = "; ".join(p.line() for p in problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        out.append(LockResult(spec.id, status, time.monotonic() - started, detail, len(spec.lock.pins)))
    return out


def _unpublished(lock: Lock, pages: IndexPages) -> tuple[list[Problem], list[Problem]]:
    """The pins whose hashes are not all published; and those a source that could not be read may hold."""
    problems: list[Problem] = []
    unread: list[Problem] = []
    looked = " or ".join(pages.names())
    for name, version, allowed in pins_of(lock):
        published: frozenset[str] = frozenset()
        failures: list[str] = []
        for source in range(pages.count()):
            try:
                published |= published_for(name, version, pages.files(name, source))
            except RunFailure as exc:
                failures.append(exc.message)
                continue
            if allowed and set(allowed) <= published:
                break
        problem = judge_pin(name, version, allowed, published, looked)
        if problem is not None and failures:
            unread.append(Problem(name, version, f"cannot be checked: {failures[0]}"))
        elif problem is not None:
            problems.append(problem)
    return problems, unread


def lock_images(ws: Workspace, specs: Sequence[ImageSpec], options: LockOptions, done: Done) -> list[LockResult]:
    """Resolve what needs it (stale or missing locks; everything with `upgrade`), write what resolved."""
    chosen = build_settings.for_sources(os.environ, options.sources, ws.matrix.ca_bundle)
    uv = uv_binary()
    cache = ws.build_dir / "uv-cache"
    cache.mkdir(parents=True, exist_ok=True)
    results: dict[str, LockResult] = {}
    new, broken = _lock_lines(ws, specs, chosen, cache, uv, options, done, results)
    if new:  # the members as they are with their lines' new pins: each re-locked on them
        ws = ws.with_locks(new)
        by_id = {spec.id: spec for spec in ws.decided.images}
        specs = [by_id[spec.id] for spec in specs]
    todo = []
    for spec in specs:
        found = lock_state(spec, table())
        if spec.line in broken:
            results[spec.id] = LockResult(spec.id, "not-locked", detail=f"its CUDA line {spec.line} could not be locked (above)")
        elif (not options.upgrade and found == "locked") or (found == "unlocked" and not options.include_unlocked):
            results[spec.id] = LockResult(spec.id, "current" if found == "locked" else "unlocked", detail=spec.unlocked or "")
        else:
            todo.append(spec)
            continue
        done(results[spec.id])
    failed = bool(broken)
    line_of = {key: found for key, (_, found) in ws.line_locks().items() if found is not None}
    with ThreadPoolExecutor(max_workers=max(1, min(options.jobs, MAX_JOBS))) as pool, children.stopped_on_exit():
        futures = {spec.id: pool.submit(_lock_one, spec, chosen, cache, uv, options.upgrade) for spec in todo}
        for spec in todo:
            future = futures[spec.id]
            if failed and not options.keep_going and future.cancel():
                result, lock = LockResult(spec.id, "not-locked", detail="an earlier lock failed (use --keep-going)"), None
            else:
                result, lock = future.result()
            why = line.differs(lock, line_of[spec.line]) if lock is not None and spec.line in line_of else None
            if why is not None:  # the line's NVIDIA set is a requirement, so only a resolver bug gets here
                result, lock = (
                    replace(result, status="failed", detail=f"{why}; re-lock its line (`builder lock --select line={spec.line}`)"),
                    None,
                )
            results[spec.id] = result
            if lock is not None:
                new[spec.id] = lock
            failed |= result.status in FAILED
            done(result)
    refuse_other_cuda(ws.matrix.path, [s for s in todo if s.id in new], new)
    if new:
        updated = ws.with_locks(new)
        write_tree(ws.images_dir, updated.rendered_tree())
    return [results[s.id] for s in specs if s.id in results] + [r for key, r in results.items() if key.startswith(line.PREFIX)]


def _lock_lines(
    ws: Workspace, specs: Sequence[ImageSpec], chosen: BuildSettings, cache: Path, uv: str, options: LockOptions, done: Done,
    results: dict[str, LockResult],
) -> tuple[dict[str, Lock], set[str]]:  # fmt: skip
    """First the CUDA lines of the images to lock (matrix.yaml `line_layers`): each line whose lock is
    missing or stale (every one with `upgrade`) resolved jointly (lock/line.py); its members then
    lock on its pins. A line that cannot be locked fails its members' locks with it; after one, the
    rest are not resolved unless `keep_going` (as images are not)."""
    wanted = {spec.line for spec in specs if spec.line is not None}
    new: dict[str, Lock] = {}
    broken: set[str] = set()
    for key, (target, found) in sorted(ws.line_locks().items()):
        if key not in wanted or (found is not None and found.inputs == target.inputs and not options.upgrade):
            continue
        if broken and not options.keep_going:
            results[target.image] = LockResult(
                target.image, "not-locked", detail="an earlier lock failed (use --keep-going)", file=line.rel_path(key)
            )
            broken.add(key)
            done(results[target.image])
            continue
        started = time.monotonic()
        members = [s for s in ws.decided.images if s.line == key]
        where = _joint_sources(members, chosen)
        try:
            text = line.line_text(target, lock_text(target.image, target.inputs, target.python, target.platform,
                                                    resolve(target, where, chosen, cache, found.text if found and not options.upgrade else None, uv)))  # fmt: skip
            made = load(text, f"the line lock of {key}")
            status = "locked" if found is None or made.text != found.text else "current"
            result = LockResult(target.image, status, time.monotonic() - started, pins=len(made.pins),
                                changes=tuple(drift(found, made)) if found else (), file=line.rel_path(key))  # fmt: skip
            new[target.image] = made
        except LockFailed as exc:
            result = LockResult(target.image, exc.kind, time.monotonic() - started, exc.message, file=line.rel_path(key))
            broken.add(key)
        except UserError as exc:  # uv's output that is no line lock (none of its wheels NVIDIA's): refused like an image's
            result = LockResult(target.image, "failed", time.monotonic() - started, str(exc), file=line.rel_path(key))
            broken.add(key)
        results[target.image] = result
        done(result)
    return new, broken


def _joint_sources(members: Sequence[ImageSpec], chosen: BuildSettings) -> UvSources:
    """Every source any member of a line resolves from (the default index first)."""
    each = [sources(staging.needed_indexes(s, set(staging.local_wheels(s, chosen.pip.local_dirs))), chosen) for s in members]
    return UvSources(
        default_index=each[0].default_index,
        indexes=tuple(dict.fromkeys(i for w in each for i in w.indexes)),
        find_links=tuple(dict.fromkeys(f for w in each for f in w.find_links)),
    )


def measure_locked(ws: Workspace, specs: Sequence[ImageSpec], options: LockOptions, done: measuring.Done) -> list[measuring.MeasureResult]:
    """After the locks: each selected CUDA image's fit measured from its lock as now on disk, where
    its fit.json is missing or stale (usecases/measure.py), through the same sources as the lock."""
    if not options.measure:
        return []
    chosen = build_settings.for_sources(os.environ, options.sources, ws.matrix.ca_bundle)
    return measuring.measure_workspace(Workspace(ws.matrix_path), [spec.id for spec in specs], chosen, done)


def lock_failed(results: Sequence[LockResult]) -> bool:
    return any(r.status in (*FAILED, "not-locked") for r in results)


def measure_after(
    ws: Workspace, specs: Sequence[ImageSpec], options: LockOptions, locked: Sequence[LockResult], done: measuring.Done
) -> list[measuring.MeasureResult]:
    """`measure_locked` once the locks are written; nothing after a failed lock unless `keep_going`."""
    if lock_failed(locked) and not options.keep_going:
        return []
    return measure_locked(ws, specs, options, done)


def locked_ok(locked: Sequence[LockResult], measured: Sequence[measuring.MeasureResult]) -> bool:
    return not lock_failed(locked) and not any(m.status == "failed" for m in measured)


def _lock_one(spec: ImageSpec, settings: BuildSettings, cache: Path, uv: str, upgrade: bool) -> tuple[LockResult, Lock | None]:
    started = time.monotonic()
    target = target_for(spec, table())
    wheels = staging.local_wheels(spec, settings.pip.local_dirs)
    where = sources(staging.needed_indexes(spec, set(wheels)), settings)
    previous = None if upgrade or spec.lock is None else spec.lock.text
    try:
        resolved = resolve(target, where, settings, cache, previous=previous, uv=uv)
    except LockFailed as exc:
        return LockResult(spec.id, exc.kind, time.monotonic() - started, exc.message), None
    try:
        made = f"uv's lock for {spec.id}"
        lock = load(lock_text(spec.id, target.inputs, target.python, target.platform, resolved), made)
        if not refusals(spec, lock, table()):  # a second CUDA is refused whole by lock_images, in one line
            verify(lock, target, made)
    except UserError as exc:
        return LockResult(spec.id, "failed", time.monotonic() - started, str(exc)), None
    changes = tuple(drift(spec.lock, lock)) if spec.lock else ()
    status = "locked" if spec.lock is None or lock.text != spec.lock.text else "current"
    return LockResult(spec.id, status, time.monotonic() - started, pins=len(lock.pins), changes=changes), lock
