"""The nightly loop: updates -> plan -> lock -> build what changed -> test -> publish what passed
-> report, then the comparison with the previous run. No printing: progress goes to the events
object, the report comes back typed (the CLI prints it and writes the Markdown summary).

Only what changed is rebuilt: a new release is a new image, a lock that moved changes the image's
content hash; everything else is up to date and keeps its current smoke result. A stage that
cannot run (the index unreachable, a registry down) is a note in the report, never a traceback,
and the stages after it still run on what there is.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import filelock

from builder.catalog.records import KnownGood
from builder.catalog.store import Catalog
from builder.compat import lifecycle
from builder.engine.build import BuildResult
from builder.engine.client import open_engine
from builder.engine.port import Connect
from builder.host import doctor
from builder.host import facts as hostinfo
from builder.model.plan import ImageSpec
from builder.model.results import Diagnosed, SmokeResult, is_good, publishable
from builder.nightly import history, summary
from builder.nightly.compare import BLOCKED, NightlyReport, Outcome, compare
from builder.publish import gate
from builder.publish.publisher import check_repository
from builder.render.tree import write_tree
from builder.report.output import check_summary, write_summary
from builder.updates.releases import Release
from builder.usecases import lock as locking
from builder.usecases.build import BUILT, BuildEvents, BuildOptions, build_images
from builder.usecases.publish import PublishEvents, PublishOptions, publish
from builder.usecases.report import report
from builder.usecases.test import TestEvents, TestOptions, checks_can_run, test_images
from builder.util.errors import RunFailure, UserError
from builder.workspace import Workspace

UNREACHABLE = "unreachable"  # a lock that could not reach its index keeps its old lock: not the image's fault


@dataclass(frozen=True)
class NightlyOptions:
    select: str | None = None
    updates: bool = True  # ask the index for new releases
    apply: bool = True  # add the plannable ones to matrix.yaml
    index_json_url: str | None = None  # the JSON API's base (PyPI's by default)
    build: BuildOptions = field(default_factory=BuildOptions)
    test: TestOptions = field(default_factory=TestOptions)
    lock_jobs: int = 2
    publish: bool = True
    registry: str | None = None
    accept_gpu_skipped: bool = False
    catalog_dir: str | None = None
    rebuild_past_eol: bool = False  # keep rebuilding an image with a line past its end of life (compat/data/lifecycle.yaml)
    check_index: bool = True  # `lock --check --index`: every hash a lock allows is a file its sources publish
    today: dt.date | None = None  # the day end of life is judged on (None: today, UTC)
    summary: str | None = None  # the Markdown summary's file (None: build/nightly/summary.md)


class NightlyEvents(Protocol):
    def stage(self, name: str) -> None: ...
    def info(self, text: str) -> None: ...
    def lock(self, result: locking.LockResult) -> None: ...
    def build(self) -> BuildEvents: ...
    def test(self) -> TestEvents: ...
    def publish(self) -> PublishEvents: ...


# (workspace, options) -> (release rows, matrix.yaml edits); injectable so the loop is testable offline
Updates = Callable[[Workspace, NightlyOptions], tuple[tuple[Release, ...], tuple[str, ...]]]


def nightly(
    ws: Workspace, options: NightlyOptions, events: NightlyEvents, updates: Updates | None = None, connect: Connect = open_engine
) -> NightlyReport:
    """One nightly at a time per workspace: it edits matrix.yaml, images/ and the catalog. The one
    workspace `ws` is read again (Workspace.reread) where the run itself changed what it read."""
    ws.decided  # noqa: B018 - a matrix that does not load or plan stops here, before anything is written
    lock_file = ws.store.nightly / ".nightly.lock"
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(lock_file), timeout=0)
    try:
        lock.acquire()  # first: a second nightly is told that one runs, whatever the engine says
    except filelock.Timeout:
        raise UserError(f"another `builder nightly` is running on this workspace (it holds {lock_file}); wait for it to finish") from None
    try:
        checks_can_run(connect)  # a host whose smoke checks cannot run is refused before anything is written
        return _nightly(ws, options, events, updates, connect)
    finally:
        lock.release()


def _nightly(ws: Workspace, options: NightlyOptions, events: NightlyEvents, updates: Updates | None, connect: Connect) -> NightlyReport:
    """The stages in order: new releases, plan, lock, build, test, publish, report; each stage's problems
    are notes of the run, never the end of it."""
    date = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    catalog = ws.store.catalog(options.catalog_dir)
    before = history.previous(ws.store.history, catalog.load())
    found = _new_releases(ws, options, events, updates)
    notes = list(found.notes)

    events.stage("plan")
    write_tree(ws.images_dir, ws.rendered_tree())  # new images get their folders; hand edits are refused
    specs, retired = past_end_of_life(ws.selected(options.select, use_default=True), options)
    notes += retired

    locked = _lock(ws, specs, options, events)
    notes += locked.notes
    outcomes, run_notes = _build_and_test(ws, locked, options, events, connect)
    notes += run_notes
    if options.publish:
        events.stage("publish")
        outcomes, publish_notes = _publish(ws, locked.specs, outcomes, options, catalog.load(), events, connect)
        notes += publish_notes

    notes += _report(ws, catalog, events)
    history.save(ws.store.history, date, outcomes)
    changes = tuple(compare(before, outcomes))
    return NightlyReport(date, changes, tuple(outcomes), found.releases, found.applied, locked.drift, tuple(notes), found.checked)


@dataclass(frozen=True)
class NewReleases:
    """The updates stage: release rows, matrix.yaml's edits, whether the index was asked, what went wrong."""

    releases: tuple[Release, ...] = ()
    applied: tuple[str, ...] = ()
    checked: str = "not-checked"  # checked | not-checked (--no-updates) | failed (a note says why)
    notes: tuple[str, ...] = ()


def _new_releases(ws: Workspace, options: NightlyOptions, events: NightlyEvents, updates: Updates | None) -> NewReleases:
    if not options.updates:
        return NewReleases()
    events.stage("updates")
    try:
        releases, applied = (updates or check_updates)(ws, options)
    except RunFailure as exc:
        return NewReleases(checked="failed", notes=(f"updates: {exc.message}",))
    if applied:
        ws.reread()  # matrix.yaml lists the new releases
    return NewReleases(releases, applied, "checked")


@dataclass(frozen=True)
class Locked:
    """The lock stage: the images re-planned on their new locks, those that cannot be built (id -> why),
    what each lock changed, and the notes of the locks kept from an earlier run."""

    specs: list[ImageSpec]
    failed: dict[str, str]
    drift: tuple[tuple[str, tuple[tuple[str, str | None, str | None], ...]], ...]
    notes: list[str]


def _lock(ws: Workspace, specs: list[ImageSpec], options: NightlyOptions, events: NightlyEvents) -> Locked:
    events.stage("lock")
    locked = locking.lock_images(ws, specs, _lock_options(options), events.lock)
    drift = tuple((r.id, r.changes) for r in locked if r.changes)
    failed = {r.id: r.detail for r in locked if r.status in locking.FAILED and r.status != UNREACHABLE}
    notes = [f"lock: {r.id}: {r.detail} (built from its previous lock)" for r in locked if r.status == UNREACHABLE]
    ws.reread()  # the new locks change content hashes
    kept = {s.id for s in specs}
    specs = [s for s in ws.selected(options.select, use_default=True) if s.id in kept]
    if options.check_index:  # a lock whose hashes its sources do not publish is not built (one kept from an earlier run too)
        asked = locking.check_index(ws, [s for s in specs if s.id not in failed], options.build.sources)
        failed |= {r.id: f"its hashes are not what its sources publish: {r.detail}" for r in asked if r.status == "unpublished"}
        notes += [f"lock: {r.id}: not checked against its sources: {r.detail}" for r in asked if r.status == "unchecked"]
    return Locked(specs, failed, drift, notes)


def _build_and_test(
    ws: Workspace, locked: Locked, options: NightlyOptions, events: NightlyEvents, connect: Connect
) -> tuple[list[Outcome], list[str]]:
    """Each locked image built (the rest kept going past a failure) and tested unless a result of this
    exact build exists; one outcome per image, and a note for each build that could not run."""
    events.stage("build")
    # an arm64 image on a host that cannot emulate it is not built (build would refuse the whole run): the rest are
    emulation = hostinfo.gather_emulation()
    cannot = {s.id: refusal for s in locked.specs if (refusal := doctor.emulation_refusal((s.platform,), emulation))}
    buildable = tuple(s for s in locked.specs if s.id not in locked.failed and s.id not in cannot)
    built = (
        {r.id: r for r in build_images(ws, buildable, replace(options.build, keep_going=True), events.build(), connect)}
        if buildable
        else {}
    )

    events.stage("test")
    results_dir = ws.store.results
    to_test = tuple(s for s in buildable if built[s.id].status in BUILT and (built[s.id].status == "built" or not _current(results_dir, s)))
    tested = {r.id: r for r in test_images(ws, to_test, options.test, events.test(), connect)} if to_test else {}

    outcomes = [
        Outcome(s.id, BLOCKED, f"not built on this host: {cannot[s.id]}", s.content_hash)
        if s.id in cannot and s.id not in locked.failed
        else _outcome(s, locked.failed, built, tested, results_dir)
        for s in locked.specs
    ]
    notes = [
        f"build: {o.id}: {o.detail} (the build could not run; nothing is known about the image)" for o in outcomes if o.status == BLOCKED
    ]
    return outcomes, notes


def _report(ws: Workspace, catalog: Catalog, events: NightlyEvents) -> list[str]:
    """The support matrix pages rewritten; a report path builder may not replace (a file of the
    user's) is a note, not the loss of the run's history."""
    events.stage("report")
    try:
        written = report(ws, catalog, ws.store.report_markdown, ws.store.report_html)
    except UserError as exc:
        return [f"report: {exc}"]
    return [f"report: {note}" for note in written.notes]


LIFECYCLE_NOTE = "lifecycle: "


@dataclass(frozen=True)
class NightlyRun:
    report: NightlyReport
    summary: Path  # where its Markdown summary was written

    @property
    def ok(self) -> bool:
        """No regression and no stage that could not run; a line retired on its date is news, not a failure."""
        return not self.report.regressed and all(n.startswith(LIFECYCLE_NOTE) for n in self.report.notes)


def run_nightly(ws: Workspace, options: NightlyOptions, events: NightlyEvents, connect: Connect = open_engine) -> NightlyRun:
    """`builder nightly`: what would stop it late refused first (a repository that is none, a summary
    path that cannot be written), then the loop, then its Markdown summary written."""
    if options.publish:
        check_repository(options.registry or ws.matrix.registry)
    target = Path(options.summary) if options.summary else ws.store.nightly_summary
    inputs = (ws.matrix_path, ws.store.catalog(options.catalog_dir).file)
    check_summary(target, inputs)
    report = nightly(ws, options, events, connect=connect)
    write_summary(target, summary.render(report), inputs)
    return NightlyRun(report, target)


def past_end_of_life(specs: Sequence[ImageSpec], options: NightlyOptions) -> tuple[list[ImageSpec], list[str]]:
    """The images the nightly rebuilds, and a note for each it stops rebuilding because one of its
    lines (Python, base OS) is past the end of life its vendor publishes; `rebuild_past_eol` keeps
    them. This project's own support window for a framework line stops nothing (a date nobody
    published must not stop a rebuild). Their published digests and records stay: nothing here deletes anything."""
    today = options.today or dt.datetime.now(dt.UTC).date()
    kept: list[ImageSpec] = []
    notes: list[str] = []
    for spec in specs:
        expired = lifecycle.past(lifecycle.for_image(spec.python, spec.base.os, spec.versions), today, vendor_only=True)
        if expired and not options.rebuild_past_eol:
            notes.append(
                f"{LIFECYCLE_NOTE}{spec.id}: not rebuilt: {', '.join(str(e) for e in expired)} is past; its published digests stay "
                "(--rebuild-past-eol rebuilds it)"
            )
        else:
            kept.append(spec)
    return kept, notes


def check_updates(ws: Workspace, options: NightlyOptions) -> tuple[tuple[Release, ...], tuple[str, ...]]:
    """The default Updates: `builder updates --apply` (the index's JSON API, then matrix.yaml edited for what the rules can place)."""
    from builder.usecases.updates import UpdatesOptions, updates  # the network side, imported only when asked to use it

    asked = UpdatesOptions(apply=options.apply, index_json_url=options.index_json_url, ca_bundle=options.build.sources.ca_bundle)
    found = updates(ws, asked)
    return found.found.releases, found.applied


def _lock_options(options: NightlyOptions) -> locking.LockOptions:
    b = options.build
    return locking.LockOptions(
        jobs=options.lock_jobs,
        upgrade=True,
        keep_going=True,
        sources=b.sources,
    )


def _current(results_dir: Path, spec: ImageSpec) -> bool:
    """A smoke result for this exact build exists (an up-to-date image is not tested again)."""
    result = gate.read_result(results_dir, spec.id)
    return result is not None and result.content_hash == spec.content_hash and (is_good(result.verdict) or result.verdict == "failed")


def _detail(result: SmokeResult) -> str:
    """What broke, in one line: each failed framework's own error from the probe (with its cause
    chain), else the first failing check; then the known diagnosis, if one matched."""
    frameworks = result.probe.frameworks if result.probe else {}
    broken = [f"{name}: {r.reason}" for name, r in sorted(frameworks.items()) if r.status == "failed"]
    first = "; ".join(broken) or (result.failures[0] if result.failures else "")
    first = " ".join(first.split())[:400]
    diagnosis: Diagnosed | None = next((d for d in result.diagnoses if d.cause), None)
    if diagnosis:
        return f"{first} (cause: {diagnosis.cause}; fix: {diagnosis.fix})" if first else f"{diagnosis.cause}; fix: {diagnosis.fix}"
    return first


def _outcome(
    spec: ImageSpec, lock_failed: dict[str, str], built: dict[str, BuildResult], tested: dict[str, SmokeResult], results_dir: Path
) -> Outcome:
    if spec.id in lock_failed:
        return Outcome(spec.id, "lock-failed", f"lock: {lock_failed[spec.id]}", spec.content_hash)
    b = built[spec.id]
    rebuilt = b.status == "built"
    if b.status not in BUILT:
        reason = " ".join(filter(None, (b.error, f"cause: {b.cause}" if b.cause else "", f"fix: {b.fix}" if b.fix else "")))
        return Outcome(spec.id, BLOCKED if b.blocked_by else "build-failed", reason or b.status, spec.content_hash, rebuilt)
    if spec.id in tested:
        t = tested[spec.id]
        return Outcome(spec.id, t.verdict, _detail(t), spec.content_hash, rebuilt)
    stored = gate.read_result(results_dir, spec.id)
    if stored is None:
        return Outcome(spec.id, "not-run", "", spec.content_hash)
    return Outcome(spec.id, stored.verdict, _detail(stored), spec.content_hash)


def _held(outcome: Outcome, options: NightlyOptions, recorded: bool) -> str:
    """Why an image that passed its tests is not pushed in this run ("" when it is, or failed)."""
    if outcome.status == "gpu-skipped" and not options.accept_gpu_skipped:
        return "tested without a GPU: its GPU checks did not run; --accept-gpu-skipped publishes it anyway"
    if is_good(outcome.status) and recorded:
        return "this build is already published"
    return ""


def _publish(
    ws: Workspace,
    specs: Sequence[ImageSpec],
    outcomes: list[Outcome],
    options: NightlyOptions,
    known: Sequence[KnownGood],
    events: NightlyEvents,
    connect: Connect,
) -> tuple[list[Outcome], list[str]]:
    """Publish what passed and is not already recorded as this very build in this repository."""
    repository = options.registry or ws.matrix.registry
    recorded = {(r.id, r.content_hash) for r in known if r.digest.startswith(f"{repository}@")}
    ok = {o.id for o in outcomes if publishable(o.status, options.accept_gpu_skipped)}
    outcomes = [replace(o, held=_held(o, options, (o.id, o.content_hash) in recorded)) for o in outcomes]
    chosen = [s for s in specs if s.id in ok and (s.id, s.content_hash) not in recorded]
    if not chosen:
        return outcomes, []
    publish_options = PublishOptions(registry=repository, accept_gpu_skipped=options.accept_gpu_skipped)
    try:
        published = publish(ws, chosen, publish_options, ws.store.catalog(options.catalog_dir), events.publish(), connect)
    except RunFailure as exc:
        return outcomes, [f"publish: {exc.message}"]
    digests = {p.id: p.digest or "" for p in published if p.status == "published"}
    notes = [f"publish: {p.id}: {p.reason}" for p in published if p.status == "failed"]
    return [replace(o, published=digests.get(o.id, "")) for o in outcomes], notes
