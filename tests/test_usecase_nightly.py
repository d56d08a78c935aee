"""The nightly use-case (builder/usecases/nightly.py) offline, on the in-memory engine: the two nights
of tests/integration/test_nightly_end_to_end.py (a new release planned, locked, built, tested and
published; then a planted breaking update that regresses one image, rebuilt alone and reported
first), and what a run does when a stage cannot run: an index that cannot be reached, a lock that
cannot be made, a registry or an engine that is gone, a report path that is not builder's.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import filelock
import pytest

from builder.catalog.store import Catalog
from builder.engine import push
from builder.engine.port import Connect, Engine, Progress
from builder.host import facts as hostinfo
from builder.lock.resolve import LockFailed
from builder.nightly import history
from builder.nightly.compare import NightlyReport
from builder.nightly.summary import render
from builder.updates.releases import Release
from builder.usecases import lock as locking
from builder.usecases import nightly as nightlies
from builder.usecases.build import BuildOptions
from builder.util.errors import RunFailure, UserError
from builder.workspace import Workspace
from tests.fake_engine import FakeEngine, connect_to
from tests.fake_index import closed_port_url, serve_index
from tests.usecase_fixtures import (
    HOST,
    JAX,
    MATRIX,
    NUMBA,
    OFFLINE,
    REPO,
    Checks,
    NightlyEvents,
    Probe,
    Resolver,
    fake_with_base,
    locations,
    planned,
)

TODAY = dt.date(2026, 12, 1)  # the day end of life is judged on: every line of the test matrix is supported then

OLDER = NUMBA.replace("0.68.0", "0.60.0")
OPTIONS = nightlies.NightlyOptions(check_index=False, updates=False, registry=REPO, build=BuildOptions(sources=OFFLINE), today=TODAY)
BROKEN = Probe("jax", "ImportError: numpy 2.4.99 is broken", cause="numpy 2.4.99 breaks jaxlib's extension", fix="hold numpy<2.4.99")


@dataclass
class Night:
    """One workspace and its stand-ins: the engine, the smoke checks and the resolver."""

    matrix: Path
    fake: FakeEngine
    checks: Checks
    resolver: Resolver

    def run(
        self, options: nightlies.NightlyOptions = OPTIONS, events: NightlyEvents | None = None, updates: nightlies.Updates | None = None
    ) -> NightlyReport:
        return nightlies.nightly(Workspace(self.matrix), options, events or NightlyEvents(), updates, connect_to(self.fake))

    def lock_text(self, image: str) -> str:
        return (self.matrix.parent / "images" / image / "requirements.lock").read_text(encoding="utf-8")

    def records(self) -> dict[str, str]:
        return {r.id: r.digest for r in Catalog(self.matrix.parent / "catalog").load()}


def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str = MATRIX) -> Night:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(text, encoding="utf-8")
    fake = fake_with_base(planned(Workspace(matrix)))
    fake.lock_dirs.append(tmp_path / "images")  # the images' venvs hold what this workspace's locks pin (their SBOMs)
    checks, resolver = Checks(fake), Resolver()
    monkeypatch.setattr(hostinfo, "gather", lambda **kwargs: HOST)
    monkeypatch.setenv("BUILDER_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setattr(subprocess, "run", checks)
    monkeypatch.setattr(locking, "resolve", resolver)
    monkeypatch.setattr(locking, "uv_binary", lambda: "uv")
    monkeypatch.setattr(push, "WAIT_S", 0.001)
    return Night(matrix, fake, checks, resolver)


@pytest.fixture
def night(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Night:
    return workspace(tmp_path, monkeypatch)


def section(text: str, title: str) -> str:
    return text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_night_one_locks_builds_tests_publishes_and_reports_every_image(night: Night) -> None:
    events = NightlyEvents()
    report = night.run(events=events)
    assert events.stages == ["plan", "lock", "build", "test", "publish", "report"]
    assert {(r.id, r.status) for r in events.locks} == {(JAX, "locked"), (NUMBA, "locked")}
    assert "numpy==2.4.6" in night.lock_text(JAX) and "numpy==2.4.6" in night.lock_text(NUMBA)
    assert sorted(night.checks.seen) == [JAX, NUMBA]
    assert [(c.id, c.kind) for c in report.changes] == [(JAX, "new"), (NUMBA, "new")]
    assert all(o.status == "passed" and o.rebuilt and o.published.startswith(f"{REPO}@sha256:") for o in report.outcomes)
    assert night.records() == {o.id: o.published for o in report.outcomes}, "the catalog records what was pushed"
    assert {night.fake.registry[f"{REPO}:{o.id}"] for o in report.outcomes} == {o.published.split("@")[1] for o in report.outcomes}
    assert report.notes == () and report.drift == () and report.updates == "not-checked" and not report.regressed
    docs = night.matrix.parent / "docs" / "support-matrix.md"
    assert JAX in docs.read_text(encoding="utf-8") and (night.matrix.parent / "build" / "report" / "index.html").is_file()
    saved = json.loads(Workspace(night.matrix).store.history.read_text(encoding="utf-8"))
    assert {e["id"]: e["status"] for e in saved["images"]} == {JAX: "passed", NUMBA: "passed"}


def test_night_two_rebuilds_only_the_moved_lock_and_reports_its_regression_first(night: Night) -> None:
    first = night.run()
    numba_lock, builds, pushes, records = night.lock_text(NUMBA), len(night.fake.builds), list(night.fake.pushes), night.records()
    night.checks.seen.clear()
    night.resolver.pins[JAX] = {"numpy": "2.4.99"}  # the planted update: only jax's lock takes it
    night.checks.broken[JAX] = BROKEN

    second = night.run()
    assert second.drift == ((JAX, (("numpy", "2.4.6", "2.4.99"),)),)
    assert "numpy==2.4.99" in night.lock_text(JAX) and night.lock_text(NUMBA) == numba_lock
    assert [r.tag.rpartition(":")[2] for r in night.fake.builds[builds:]] == [JAX], "numba's lock did not move: not rebuilt"
    assert night.checks.seen == [JAX], "numba keeps its smoke result: not tested again"
    by_id = {o.id: o for o in second.outcomes}
    assert by_id[JAX].status == "failed" and by_id[JAX].rebuilt and not by_id[JAX].published
    assert (
        by_id[JAX].detail
        == "jax: ImportError: numpy 2.4.99 is broken (cause: numpy 2.4.99 breaks jaxlib's extension; fix: hold numpy<2.4.99)"
    )
    assert by_id[NUMBA].status == "passed" and not by_id[NUMBA].rebuilt and by_id[NUMBA].held == "this build is already published"
    assert [(c.id, c.kind, c.before, c.now) for c in second.changes] == [
        (JAX, "regression", "passed", "failed"),
        (NUMBA, "passing", "passed", "passed"),
    ]
    assert second.regressed and second.notes == ()
    assert night.fake.pushes == pushes and night.records() == records, "nothing published for the regression, numba not re-pushed"
    assert next(o for o in first.outcomes if o.id == JAX).content_hash != by_id[JAX].content_hash, "a new lock is a new image"

    summary = render(second)
    assert summary.splitlines()[0].endswith("1 regression(s)")
    regressions = section(summary, "Regressions (passed before, fail now)")
    assert f"| {JAX} | passed | failed | jax: ImportError: numpy 2.4.99 is broken (cause: " in regressions and NUMBA not in regressions
    assert "fix: hold numpy&lt;2.4.99)" in regressions, "the diagnosis, Markdown-escaped"
    assert f"- `{JAX}`: numpy 2.4.6 -> 2.4.99" in section(summary, "Lock drift")
    assert f"| {NUMBA} | passing | passed | passed | no | held: this build is already published |" in section(summary, "Images")
    images = section(summary, "Images")
    assert images.index(JAX) < images.index(NUMBA)


def test_a_failure_is_kept_until_its_image_changes(night: Night) -> None:
    """An up-to-date image that failed is neither rebuilt nor retested: its stored result, with its
    diagnosis, is the outcome again (still failing), until its inputs change."""
    night.checks.broken[JAX] = BROKEN
    first = night.run()
    assert {o.id: o.status for o in first.outcomes} == {JAX: "failed", NUMBA: "passed"}
    assert [c.kind for c in first.changes] == ["new-failure", "new"]
    builds = len(night.fake.builds)
    night.checks.seen.clear()

    second = night.run()
    assert len(night.fake.builds) == builds and night.checks.seen == []
    jax = next(o for o in second.outcomes if o.id == JAX)
    assert (jax.status, jax.rebuilt) == ("failed", False) and jax.detail.startswith("jax: ImportError: numpy 2.4.99 is broken (cause: ")
    assert [(c.id, c.kind) for c in second.changes] == [(JAX, "still-failing"), (NUMBA, "passing")]
    assert night.records().keys() == {NUMBA}, "a failed image is never published"


def test_a_selected_nightly_touches_only_its_images_and_records_in_the_named_catalog(night: Night) -> None:
    elsewhere = night.matrix.parent / "published"
    options = nightlies.NightlyOptions(
        check_index=False,
        updates=False,
        select="stack=numba",
        registry=REPO,
        catalog_dir=str(elsewhere),
        build=BuildOptions(sources=OFFLINE),
        today=TODAY,
    )
    events = NightlyEvents()
    report = night.run(options, events)
    assert [o.id for o in report.outcomes] == [NUMBA] and [r.id for r in events.locks] == [NUMBA]
    assert night.resolver.asked == [NUMBA] and night.checks.seen == [NUMBA]
    assert [r.tag.rpartition(":")[2] for r in night.fake.builds if not r.tag.startswith("builder-evidence:")] == [NUMBA]
    assert {r.id for r in Catalog(elsewhere).load()} == {NUMBA} and night.records() == {}


def test_without_publish_nothing_is_pushed_and_the_report_still_comes(night: Night) -> None:
    events = NightlyEvents()
    report = night.run(
        nightlies.NightlyOptions(check_index=False, updates=False, publish=False, build=BuildOptions(sources=OFFLINE), today=TODAY), events
    )
    assert "publish" not in events.stages and events.stages[-1] == "report"
    assert night.fake.pushes == [] and night.records() == {} and not any(o.published or o.held for o in report.outcomes)
    assert {o.status for o in report.outcomes} == {"passed"}
    assert (night.matrix.parent / "docs" / "support-matrix.md").is_file()


# -- updates ----------------------------------------------------------------------------------------

RELEASES = {
    "jax": {"0.10.2": {"requires_python": ">=3.11", "requires_dist": ["jaxlib<=0.10.2,>=0.10.2", "ml_dtypes>=0.5.0", "numpy>=2.0"]}},
    "jaxlib": {"0.10.2": {"requires_python": ">=3.11", "requires_dist": ["ml_dtypes>=0.5.0", "numpy>=2.0", "scipy>=1.13"]}},
    "numba": {
        "0.60.0": {"requires_python": ">=3.9", "requires_dist": ["llvmlite<0.44,>=0.43.0dev0", "numpy<2.1,>=1.22"]},
        "0.68.0": {"requires_python": ">=3.10", "requires_dist": ["llvmlite<0.51,>=0.50.0dev0", "numpy<2.6,>=1.22"]},
    },
}
OLD_NUMBA = MATRIX.replace('numba: ["0.68.0"]', 'numba: ["0.60.0"]  # no wheel for this one; nightly finds 0.68.0') + (
    'exclude:\n  - {numba: "0.60.0"}\n'
)


def test_a_new_release_the_rules_place_is_added_to_the_matrix_and_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    night = workspace(tmp_path, monkeypatch, OLD_NUMBA)
    assert [s.id for s in planned(Workspace(night.matrix))] == [JAX]
    with serve_index(RELEASES) as index:
        events = NightlyEvents()
        report = night.run(
            nightlies.NightlyOptions(
                check_index=False, registry=REPO, index_json_url=index.json_url, build=BuildOptions(sources=OFFLINE), today=TODAY
            ),
            events,
        )
    assert events.stages[0] == "updates" and report.updates == "checked"
    assert report.applied == (f"{night.matrix}: frameworks.numba += 0.68.0",)
    text = night.matrix.read_text(encoding="utf-8")
    assert 'numba: ["0.60.0", "0.68.0"]  # no wheel for this one; nightly finds 0.68.0' in text, "the edit keeps the comments"
    assert any((r.framework, r.version) == ("numba", "0.68.0") for r in report.releases)
    assert {o.id: o.status for o in report.outcomes} == {JAX: "passed", NUMBA: "passed"}, "the new image is planned, built and tested"
    assert "frameworks.numba += 0.68.0" in render(report)


def test_an_unreachable_index_is_a_note_and_the_run_goes_on(night: Night, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BUILDER_INDEX_DEADLINE_S", "1")  # no time for a second try: the note comes at once
    options = nightlies.NightlyOptions(
        check_index=False, registry=REPO, index_json_url=closed_port_url(), build=BuildOptions(sources=OFFLINE), today=TODAY
    )
    before = night.matrix.read_bytes()
    report = night.run(options)
    assert report.updates == "failed" and report.releases == () and report.applied == ()
    assert len(report.notes) == 1 and report.notes[0].startswith("updates: ") and "\n" not in report.notes[0]
    assert night.matrix.read_bytes() == before
    assert {o.status for o in report.outcomes} == {"passed"}, "the stages after it still run"
    assert "updates: " in render(report)


def test_the_updates_step_is_injectable_and_its_edits_are_planned(night: Night) -> None:
    """An Updates that edits matrix.yaml: the run plans, locks and builds the workspace as edited."""
    release = Release("numba", "numba", "0.60.0", ">=3.10", None, "<2.6,>=1.22", "plannable", "")

    def updates(ws: Workspace, options: nightlies.NightlyOptions) -> tuple[tuple[Release, ...], tuple[str, ...]]:
        assert options.apply and ws.matrix_path == night.matrix
        ws.matrix_path.write_text(MATRIX.replace('numba: ["0.68.0"]', 'numba: ["0.60.0", "0.68.0"]'), encoding="utf-8")
        return (release,), ("matrix.yaml: frameworks.numba += 0.60.0",)

    # numba 0.60 is past this project's support window (2026-06-13, compat/data/lifecycle.yaml `policy`)
    # on TODAY: a date no vendor published, which stops no rebuild (issue 38)
    options = nightlies.NightlyOptions(check_index=False, registry=REPO, build=BuildOptions(sources=OFFLINE), today=TODAY)
    report = night.run(options, updates=updates)
    assert report.releases == (release,) and report.applied == ("matrix.yaml: frameworks.numba += 0.60.0",)
    assert {o.id for o in report.outcomes} == {JAX, NUMBA, OLDER}
    assert not any(n.startswith(nightlies.LIFECYCLE_NOTE) for n in report.notes)
    assert set(night.resolver.asked) == {o.id for o in report.outcomes}


def test_a_failing_updates_step_is_a_note(night: Night) -> None:
    def updates(ws: Workspace, options: nightlies.NightlyOptions) -> tuple[tuple[Release, ...], tuple[str, ...]]:
        raise RunFailure("the index answered 503 three times")

    report = night.run(
        nightlies.NightlyOptions(check_index=False, registry=REPO, build=BuildOptions(sources=OFFLINE), today=TODAY), updates=updates
    )
    assert report.updates == "failed" and report.notes == ("updates: the index answered 503 three times",)
    assert len(report.outcomes) == 2


# -- lock -------------------------------------------------------------------------------------------


def test_an_unreachable_index_keeps_the_previous_lock_and_the_image_is_built_from_it(night: Night) -> None:
    night.run()
    old = night.lock_text(JAX)
    night.resolver.pins[JAX] = {"numpy": "2.4.99"}
    night.resolver.fails[JAX] = LockFailed("unreachable", "https://pypi.org/simple: connection refused")
    report = night.run()
    assert night.lock_text(JAX) == old, "no lock is half-written"
    assert report.notes == (f"lock: {JAX}: https://pypi.org/simple: connection refused (built from its previous lock)",)
    assert {o.id: o.status for o in report.outcomes} == {JAX: "passed", NUMBA: "passed"}, "not the image's fault: not a regression"
    assert report.drift == ()


def test_a_lock_that_cannot_be_resolved_fails_its_image_only(night: Night) -> None:
    night.run()
    builds = len(night.fake.builds)
    night.resolver.fails[JAX] = LockFailed("unresolvable", "jax 0.10.2 needs numpy>=2.0, and numpy is held below 2")
    report = night.run()
    jax = next(o for o in report.outcomes if o.id == JAX)
    assert (jax.status, jax.detail) == ("lock-failed", "lock: jax 0.10.2 needs numpy>=2.0, and numpy is held below 2")
    assert [(c.id, c.kind) for c in report.changes][0] == (JAX, "regression")
    assert len(night.fake.builds) == builds and report.notes == (), "an image's own lock failure is its outcome, not a stage failure"


# -- build, publish, report -------------------------------------------------------------------------


def test_an_image_whose_build_fails_is_neither_tested_nor_published(night: Night) -> None:
    night.fake.build_output = lambda request: (
        [Progress(error="ERROR: No matching distribution found for jax==0.10.2")] if JAX in request.tag else [Progress(text="ok\n")]
    )
    report = night.run()
    jax = next(o for o in report.outcomes if o.id == JAX)
    assert jax.status == "build-failed" and "No matching distribution found for jax==0.10.2" in jax.detail
    assert night.checks.seen == [NUMBA] and night.records().keys() == {NUMBA}
    assert report.notes == ()


def test_a_registry_that_refuses_every_push_is_a_note_per_image(night: Night) -> None:
    night.fake.fail_push = lambda name: "denied: requested access to the resource is denied"
    report = night.run()
    assert {o.status for o in report.outcomes} == {"passed"} and not any(o.published for o in report.outcomes)
    assert sorted(n.split(":")[1].strip() for n in report.notes) == [JAX, NUMBA]
    assert all(n.startswith("publish: ") and "denied" in n for n in report.notes)
    assert night.records() == {}, "nothing is recorded that the registry does not hold"
    pushes = len(night.fake.pushes)
    retried = night.run()
    assert not any(o.held for o in retried.outcomes), "not recorded, so the next night tries again"
    assert len(night.fake.pushes) > pushes and len(retried.notes) == 2


def test_an_engine_gone_before_publish_is_a_note_and_the_report_is_still_written(night: Night) -> None:
    events = NightlyEvents()
    real = connect_to(night.fake)

    def connect(timeout: int = 600) -> Engine:
        if "publish" in events.stages:
            raise RunFailure("cannot reach the Docker engine (is it running?)")
        return real(timeout)

    report = nightlies.nightly(Workspace(night.matrix), OPTIONS, events, connect=connect)
    assert report.notes == ("publish: cannot reach the Docker engine (is it running?)",)
    assert {o.status for o in report.outcomes} == {"passed"} and events.stages[-1] == "report"
    assert (night.matrix.parent / "docs" / "support-matrix.md").is_file()


def test_a_report_path_that_is_the_users_is_a_note_and_the_history_is_saved(night: Night) -> None:
    docs = night.matrix.parent / "docs" / "support-matrix.md"
    docs.parent.mkdir()
    docs.write_text("# my own notes\n", encoding="utf-8")
    report = night.run(
        nightlies.NightlyOptions(check_index=False, updates=False, publish=False, build=BuildOptions(sources=OFFLINE), today=TODAY)
    )
    assert len(report.notes) == 1 and report.notes[0].startswith("report: ") and str(docs.name) in report.notes[0]
    assert docs.read_text(encoding="utf-8") == "# my own notes\n"
    assert history.previous(Workspace(night.matrix).store.history, []) == {JAX: "passed", NUMBA: "passed"}


# -- one nightly at a time --------------------------------------------------------------------------


@pytest.fixture
def held(night: Night) -> Iterator[Path]:
    lock = night.matrix.parent / "build" / "nightly" / ".nightly.lock"
    lock.parent.mkdir(parents=True)
    with filelock.FileLock(str(lock)):
        yield lock


def test_a_second_nightly_is_refused_before_it_writes_anything(night: Night, held: Path) -> None:
    with pytest.raises(UserError) as caught:
        night.run()
    assert str(caught.value) == f"another `builder nightly` is running on this workspace (it holds {held}); wait for it to finish"
    assert not (night.matrix.parent / "images").exists() and night.fake.builds == []


def _connect_unused(timeout: int = 600) -> Engine:
    raise AssertionError("a matrix that does not load never reaches the engine")


def test_a_broken_matrix_is_refused_before_the_engine_is_asked(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("registry: x\nbases: [\n", encoding="utf-8")
    connect: Connect = _connect_unused
    with pytest.raises(UserError, match="YAML syntax error"):
        nightlies.nightly(Workspace(matrix), OPTIONS, NightlyEvents(), connect=connect)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["matrix.yaml"]


def test_a_line_past_its_end_of_life_is_not_rebuilt_and_the_run_says_so(night: Night) -> None:
    first = night.run()  # published while every line was supported
    assert night.records().keys() == {JAX, NUMBA} and not any(n.startswith(nightlies.LIFECYCLE_NOTE) for n in first.notes)
    published = night.records()
    builds = len(night.fake.builds)
    later = nightlies.NightlyOptions(
        check_index=False, updates=False, registry=REPO, build=BuildOptions(sources=OFFLINE), today=dt.date(2027, 11, 1)
    )
    report = night.run(later)  # Python 3.11 ended on 2027-10-31
    retired = [n for n in report.notes if n.startswith(nightlies.LIFECYCLE_NOTE)]
    assert sorted(n.split(":")[1].strip() for n in retired) == [JAX, NUMBA]
    assert all("Python 3.11 (end of life 2027-10-31) is past" in n and "--rebuild-past-eol" in n for n in retired)
    assert report.outcomes == () and len(night.fake.builds) == builds, "nothing of a retired line is rebuilt"
    assert night.records() == published, "its published digests and records stay"
    again = night.run(replace(later, rebuild_past_eol=True))
    assert {o.id for o in again.outcomes} == {JAX, NUMBA} and not any(n.startswith(nightlies.LIFECYCLE_NOTE) for n in again.notes)


def test_a_host_whose_checks_cannot_run_is_refused_before_anything_is_written(night: Night) -> None:
    """The smoke checks need the docker CLI: a nightly without it would lock, edit and build, then
    record every image failed. It is refused first, nothing locked, built or written."""
    night.fake.blocked_checks = "no `docker` is on PATH"
    matrix = night.matrix.read_bytes()
    with pytest.raises(UserError, match="docker"):
        night.run()
    assert night.matrix.read_bytes() == matrix and night.fake.builds == [] and night.resolver.asked == []
    assert not (night.matrix.parent / "catalog").exists() and not (night.matrix.parent / "images").exists()


def test_an_arm64_image_on_a_host_without_emulation_is_named_and_the_rest_are_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37: an arm64 image selected on a host that cannot emulate it made `build` refuse the
    whole batch, so the nightly stopped with no summary. Now the rest are built, tested and
    published, and the summary names what could not be built and why."""
    from builder.host.facts import EmulationFacts

    two_platforms = MATRIX.replace("bootstrap: debootstrap}", "bootstrap: debootstrap, platforms: [linux/amd64, linux/arm64]}")
    night = workspace(tmp_path, monkeypatch, two_platforms)
    monkeypatch.setattr(hostinfo, "gather_emulation", lambda *args: EmulationFacts("x86_64", "absent"))
    report = night.run()
    arm = {o.id: o for o in report.outcomes if o.id.endswith("-arm64")}
    assert len(arm) == 2 and all(o.status == "build-blocked" for o in arm.values()), report.outcomes
    assert all("not built on this host: arm64 image needs emulation: install qemu-user-static" in o.detail for o in arm.values())
    assert {o.status for o in report.outcomes if o.id not in arm} == {"passed"} and night.records().keys() == {JAX, NUMBA}
    assert not any(b.platform == "linux/arm64" for b in night.fake.builds), "nothing of arm64 reached the engine"
    summary = render(report)
    assert all(image in summary for image in arm) and "needs emulation" in summary, summary


def test_a_lock_its_sources_do_not_publish_is_not_built_and_an_unreadable_source_is_a_note(
    night: Night, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37: the nightly runs `lock --check --index` on what it is about to build."""
    asked: list[list[str]] = []

    def check_index(ws: Workspace, specs: list[Any], sources: Any) -> list[locking.LockResult]:
        asked.append(sorted(s.id for s in specs))
        return [
            locking.LockResult(JAX, "unpublished", detail="numpy==2.4.6: 1 hash(es) the lock allows are of no file published for it"),
            locking.LockResult(NUMBA, "unchecked", detail="numba==0.68.0: cannot be checked: connection refused"),
        ]

    monkeypatch.setattr(locking, "check_index", check_index)
    report = night.run(replace(OPTIONS, check_index=True))
    assert asked == [sorted([JAX, NUMBA])]
    outcomes = {o.id: o for o in report.outcomes}
    assert outcomes[JAX].status == "lock-failed" and "its hashes are not what its sources publish" in outcomes[JAX].detail
    assert outcomes[NUMBA].status == "passed" and any(n.startswith(f"lock: {NUMBA}: not checked against its sources") for n in report.notes)
    assert not any(b.tag.endswith(JAX) for b in night.fake.builds), "a lock its sources do not publish is not built"


# -- one workspace ----------------------------------------------------------------------------------


def test_a_nightly_goes_on_with_its_one_workspace_read_again_where_it_changed(night: Night, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 40: the nightly built its Workspace three times (at its start, after matrix.yaml's
    edits, after the new locks). Now the workspace it is given goes through the whole run, read again
    (Workspace.reread) where the run changed what it had read: the edited matrix plans the new image,
    the new locks give each image the content hash it is built, tested and published under."""
    located = locations(monkeypatch)

    def updates(ws: Workspace, options: nightlies.NightlyOptions) -> tuple[tuple[Release, ...], tuple[str, ...]]:
        ws.matrix_path.write_text(MATRIX.replace('numba: ["0.68.0"]', 'numba: ["0.60.0", "0.68.0"]'), encoding="utf-8")
        return (), ("matrix.yaml: frameworks.numba += 0.60.0",)

    ws = Workspace(night.matrix)
    assert {s.id for s in ws.decided.images} == {JAX, NUMBA}  # read before the run, as the CLI's is
    options = nightlies.NightlyOptions(check_index=False, registry=REPO, build=BuildOptions(sources=OFFLINE), today=TODAY)
    report = nightlies.nightly(ws, options, NightlyEvents(), updates, connect_to(night.fake))
    assert located == [], "no other workspace is made"
    assert {o.id for o in report.outcomes} == {JAX, NUMBA, OLDER}, "the edited matrix.yaml was read again"
    fresh = {s.id: s.content_hash for s in Workspace(night.matrix).plan.images}
    assert {o.id: o.content_hash for o in report.outcomes} == fresh, "the locks it wrote were read again before the build"
    assert {o.id: o.status for o in report.outcomes} == dict.fromkeys(fresh, "passed")
    assert {s.id: s.content_hash for s in ws.plan.images} == fresh
