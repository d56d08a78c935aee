"""The nightly's pure parts: the comparison with the previous run, the history file, the summary."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import filelock
import pytest

from builder.engine.image_build import BuildResult
from builder.nightly import history
from builder.nightly.compare import BLOCKED, NightlyReport, Outcome, classify, compare, regressions
from builder.nightly.summary import render
from builder.usecases import lock as locking
from builder.usecases import nightly as loop
from builder.workspace import Workspace
from tests.catalog_fixtures import record
from tests.fake_engine import FakeEngine, connect_to
from tests.usecase_fixtures import locations

WriteMatrix = Callable[..., Path]


@pytest.mark.parametrize(
    ("before", "now", "kind"),
    [
        ("passed", "failed", "regression"),
        ("gpu-skipped", "build-failed", "regression"),
        ("passed", "lock-failed", "regression"),
        ("passed", "passed", "passing"),
        ("failed", "passed", "fixed"),
        ("failed", "failed", "still-failing"),
        (None, "failed", "new-failure"),
        (None, "passed", "new"),
        ("passed", "not-run", "not-run"),
        ("passed", "build-blocked", "not-run"),
        (None, "build-blocked", "not-run"),
    ],
)
def test_classify(before: str | None, now: str, kind: str) -> None:
    assert classify(before, now) == kind


def test_regressions_sort_first_then_by_id() -> None:
    outcomes = [Outcome("a-new", "passed"), Outcome("b-reg", "failed", "boom"), Outcome("c-ok", "passed"), Outcome("d-reg", "build-failed")]
    rows = compare({"b-reg": "passed", "c-ok": "passed", "d-reg": "passed"}, outcomes)
    assert [(r.id, r.kind) for r in rows] == [("b-reg", "regression"), ("d-reg", "regression"), ("a-new", "new"), ("c-ok", "passing")]
    assert [r.id for r in regressions(rows)] == ["b-reg", "d-reg"]


def test_history_round_trip_merges_over_the_last_run_and_the_catalog(tmp_path: Path) -> None:
    known = [record("torch2.14.1-cu130-py3.11-debian12")]
    assert history.previous(tmp_path / "nightly" / "last.json", known) == {"torch2.14.1-cu130-py3.11-debian12": "passed"}
    history.save(tmp_path / "nightly" / "last.json", "2026-12-01T00:00:00Z", [Outcome("x", "passed"), Outcome("y", "failed", "why")])
    history.save(tmp_path / "nightly" / "last.json", "2026-12-02T00:00:00Z", [Outcome("y", "passed"), Outcome("z", "not-run")])
    seen = history.previous(tmp_path / "nightly" / "last.json", known)
    assert seen == {"torch2.14.1-cu130-py3.11-debian12": "passed", "x": "passed", "y": "passed"}
    doc = json.loads((tmp_path / "nightly" / "last.json").read_text())
    assert [e["id"] for e in doc["images"]] == ["x", "y"] and doc["images"][1]["date"] == "2026-12-02T00:00:00Z"


def test_a_corrupt_history_falls_back_to_the_catalog(tmp_path: Path) -> None:
    (tmp_path / "nightly" / "last.json").parent.mkdir(parents=True)
    (tmp_path / "nightly" / "last.json").write_text("{not json")
    assert history.previous(tmp_path / "nightly" / "last.json", []) == {}
    history.save(tmp_path / "nightly" / "last.json", "d", [Outcome("x", "failed")])  # and the next run replaces it whole
    assert history.previous(tmp_path / "nightly" / "last.json", []) == {"x": "failed"}


@dataclass(frozen=True)
class _Release:
    framework: str = "torch"
    version: str = "2.15.0"
    status: str = "needs rules"
    requires_python: str = ">=3.10"
    cuda: str = "cu130"
    numpy: str = ""
    reason: str = "torch 2.15 has no row | add it"


def test_summary_lists_regressions_first_with_the_diagnosis() -> None:
    outcomes = (
        Outcome("jax-img", "failed", "import jax failed (cause: numpy broken; fix: pin it)", rebuilt=True),
        Outcome("numba-img", "passed"),
    )
    changes = tuple(compare({"jax-img": "passed", "numba-img": "passed"}, outcomes))
    report = NightlyReport(
        "2026-12-01T03:00:00Z", changes, outcomes, releases=(_Release(),), applied=("matrix.yaml: frameworks.numba += 0.68.0",),  # type: ignore[arg-type]  # a stand-in with Release's fields
        drift=(("jax-img", (("numpy", "2.4.6", "2.4.99"),)),), notes=("publish: registry down",),
    )  # fmt: skip
    text = render(report)
    lines = text.splitlines()
    assert lines[0] == "# Nightly 2026-12-01T03:00:00Z: 1 regression(s); run failed: 1 problem(s)"
    assert lines[2] == "## Regressions (passed before, fail now)"
    assert "| jax-img | passed | failed | import jax failed (cause: numpy broken; fix: pin it) |" in lines
    assert text.index("## Regressions") < text.index("> publish: registry down") < text.index("## New releases")
    assert "torch 2.15 has no row \\| add it" in text  # a pipe in a cell cannot break the table
    assert "- `jax-img`: numpy 2.4.6 -> 2.4.99" in lines
    assert "`matrix.yaml: frameworks.numba += 0.68.0`" in text
    table = text.split("## Images", 1)[1]
    assert table.index("jax-img") < table.index("numba-img")
    assert report.regressed


def test_summary_without_anything_new() -> None:
    outcomes = (Outcome("a", "passed"),)
    text = render(NightlyReport("d", tuple(compare({"a": "passed"}, outcomes)), outcomes))
    assert text.splitlines()[0] == "# Nightly d: no regressions"
    assert "none newer than matrix.yaml lists" in text and "no lock changed" in text


def _nightly(matrix: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", "--matrix", str(matrix), "nightly", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_second_nightly_on_one_workspace_is_refused(write_matrix: WriteMatrix, tmp_path: Path) -> None:
    matrix = write_matrix()
    lock = tmp_path / "build" / "nightly" / ".nightly.lock"
    lock.parent.mkdir(parents=True)
    with filelock.FileLock(str(lock)):
        done = _nightly(matrix, "--no-updates", "--no-publish")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: another `builder nightly` is running on this workspace (it holds {lock}); wait for it to finish"
    ]
    assert not (tmp_path / "images").exists()  # refused before anything was written


def test_a_bad_registry_is_refused_before_anything_runs(write_matrix: WriteMatrix, tmp_path: Path) -> None:
    done = _nightly(write_matrix(), "--registry", "Not A/Repo:tag", "--no-updates")
    assert done.returncode == 2
    assert done.stderr.startswith("error: --registry 'Not A/Repo:tag' is not a repository") and "Traceback" not in done.stderr
    assert not (tmp_path / "images").exists() and not (tmp_path / "build").exists()


def test_a_broken_matrix_stops_the_nightly_before_anything_is_written(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("registry: x\nbases: [\n", encoding="utf-8")
    done = _nightly(matrix, "--no-publish")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: {matrix}:3: YAML syntax error")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["matrix.yaml"]


# ---------------------------------------------------------------- issue #14, finding 17


class _Events:
    """loop.NightlyEvents that records nothing."""

    def stage(self, name: str) -> None: ...
    def info(self, text: str) -> None: ...
    def lock(self, result: object) -> None: ...
    def build(self) -> object: ...
    def test(self) -> object: ...
    def publish(self) -> object: ...


def _offline_nightly(matrix: Path, monkeypatch: pytest.MonkeyPatch, build: Callable[..., list[BuildResult]]) -> NightlyReport:
    monkeypatch.setattr(locking, "lock_images", lambda *args, **kwargs: [])
    monkeypatch.setattr(loop, "build_images", build)
    monkeypatch.setattr(loop, "test_images", lambda *args, **kwargs: [])
    # Every line of its matrix is supported on that day (torch 2.5 until 2026-10-17).
    options = loop.NightlyOptions(check_index=False, updates=False, publish=False, today=dt.date(2026, 10, 1))
    return loop.nightly(Workspace(matrix), options, _Events(), connect=connect_to(FakeEngine()))  # type: ignore[arg-type]


def test_network_build_failures_fail_the_nightly_and_are_listed(write_matrix: WriteMatrix, monkeypatch: pytest.MonkeyPatch) -> None:
    """Builds that could not download anything said "no regressions" and exited 0."""
    error = "network errors in all 3 attempts: Temporary failure in name resolution"

    def build(ws: object, specs: tuple[object, ...], *args: object) -> list[BuildResult]:
        return [BuildResult(s.id, "failed", error=error, blocked_by="network") for s in specs]  # type: ignore[attr-defined]

    report = _offline_nightly(write_matrix(), monkeypatch, build)
    assert report.outcomes and all(o.status == BLOCKED for o in report.outcomes)
    assert len(report.notes) == len(report.outcomes), "each image the build could not run is listed"
    assert all(n.startswith("build: ") and error in n for n in report.notes)
    assert report.notes, "notes make `builder nightly` exit 1 (cli: not regressed and not notes)"
    title = render(report).splitlines()[0]
    assert f"run failed: {len(report.outcomes)} of {len(report.outcomes)} image(s) could not be built" in title


def test_an_image_that_fails_its_own_build_is_not_a_stage_failure(write_matrix: WriteMatrix, monkeypatch: pytest.MonkeyPatch) -> None:
    def build(ws: object, specs: tuple[object, ...], *args: object) -> list[BuildResult]:
        return [BuildResult(s.id, "failed", error="pip: no matching distribution") for s in specs]  # type: ignore[attr-defined]

    report = _offline_nightly(write_matrix(), monkeypatch, build)
    assert report.outcomes and all(o.status == "build-failed" for o in report.outcomes)
    assert report.notes == ()


def test_a_blocked_build_keeps_the_last_status_in_the_history(tmp_path: Path) -> None:
    history.save(tmp_path / "nightly" / "last.json", "d1", [Outcome("a", "passed")])
    history.save(tmp_path / "nightly" / "last.json", "d2", [Outcome("a", BLOCKED, "network errors")])
    assert history.previous(tmp_path / "nightly" / "last.json", []) == {"a": "passed"}


def test_summary_says_updates_were_not_checked() -> None:
    outcomes = (Outcome("a", "passed"),)
    text = render(NightlyReport("d", tuple(compare({"a": "passed"}, outcomes)), outcomes, updates="not-checked"))
    assert "not checked (--no-updates)" in text
    assert "none newer than matrix.yaml lists" not in text


def test_summary_explains_a_gpu_skipped_hold_back() -> None:
    options = loop.NightlyOptions()
    held = Outcome("cuda-img", "gpu-skipped", content_hash="h")
    ws = type("Ws", (), {"matrix": type("M", (), {"registry": "example.org/images"})()})()
    outcomes, notes = loop._publish(ws, [], [held, Outcome("cpu-img", "passed")], options, [], _Events(), connect_to(FakeEngine()))  # type: ignore[arg-type]
    assert notes == []
    by_id = {o.id: o for o in outcomes}
    assert "without a GPU" in by_id["cuda-img"].held and "--accept-gpu-skipped" in by_id["cuda-img"].held
    assert by_id["cpu-img"].held == ""
    text = render(NightlyReport("d", tuple(compare({}, outcomes)), tuple(outcomes)))
    row = next(line for line in text.splitlines() if line.startswith("| cuda-img |"))
    assert "held: tested without a GPU" in row
    accepted = loop._publish(ws, [], [held], loop.NightlyOptions(accept_gpu_skipped=True), [], _Events(), connect_to(FakeEngine()))[0]  # type: ignore[arg-type]
    assert accepted[0].held == ""


@pytest.mark.parametrize("target", ["matrix", "mine", "folder"])
def test_a_summary_path_builder_may_not_write_stops_the_nightly_before_it_runs(
    write_matrix: WriteMatrix, tmp_path: Path, target: str
) -> None:
    """--summary goes through the report's writer: the matrix, a file of the user's or a folder is
    refused in one line before any stage runs (it used to be replaced, or fail after hours)."""
    matrix = write_matrix()
    mine = tmp_path / "notes.md"
    mine.write_text("mine\n")
    path = {"matrix": matrix, "mine": mine, "folder": tmp_path}[target]
    before = matrix.read_bytes()
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}  # should the check regress: no engine, no builds
    args = [sys.executable, "-m", "builder", "--matrix", str(matrix), "nightly", "--no-updates", "--no-publish", "--summary", str(path)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("error: ")
    assert matrix.read_bytes() == before and mine.read_text() == "mine\n"
    assert not (tmp_path / "images").exists() and not (tmp_path / "build").exists()


def test_an_outcome_reads_the_typed_result_of_this_run_or_the_stored_one(write_matrix: WriteMatrix, tmp_path: Path) -> None:
    """_outcome and _detail read typed fields: the probe's failed frameworks, the diagnosis; an
    up-to-date image keeps its stored result, and one whose file cannot be trusted is not-run."""
    from builder.model import results
    from builder.model.probe_report import Diagnosis, FrameworkProbe, ProbeHost, ProbeReport
    from builder.model.results import Diagnosed
    from builder.workspace import Workspace
    from tests.catalog_fixtures import smoke

    ws = Workspace(write_matrix())
    (spec,) = ws.selected(None, use_default=False)
    probe = ProbeReport(
        ProbeHost("3.11.2"),
        {
            "torch": FrameworkProbe("torch", "failed", reason="ImportError: libcudnn.so.9", diagnosis=Diagnosis("no cuDNN", "install it")),
            "jax": FrameworkProbe("jax", "not-installed"),
        },
    )
    failed = smoke(
        spec.id, "failed", content_hash=spec.content_hash, probe=probe, diagnoses=(Diagnosed("torch", "no cuDNN", "install it"),)
    )
    built = {spec.id: BuildResult(spec.id, "built")}
    now = loop._outcome(spec, {}, built, {spec.id: failed}, tmp_path)
    assert (now.status, now.rebuilt) == ("failed", True)
    assert now.detail == "torch: ImportError: libcudnn.so.9 (cause: no cuDNN; fix: install it)"
    up_to_date = {spec.id: BuildResult(spec.id, "up-to-date")}
    assert loop._outcome(spec, {}, up_to_date, {}, tmp_path).status == "not-run"  # no stored result
    results.write(tmp_path, smoke(spec.id, content_hash=spec.content_hash))
    assert loop._current(tmp_path, spec)
    stored = loop._outcome(spec, {}, up_to_date, {}, tmp_path)
    assert (stored.status, stored.detail, stored.rebuilt) == ("passed", "", False)
    results.path_of(tmp_path, spec.id).write_text("{}")  # edited after the run: not trusted, not shown
    assert loop._outcome(spec, {}, up_to_date, {}, tmp_path).status == "not-run" and not loop._current(tmp_path, spec)
    no_probe = smoke(spec.id, "failed", failures=("test_pip_check_is_clean: boom",))
    assert loop._detail(no_probe) == "test_pip_check_is_clean: boom"


def test_the_command_hands_its_one_workspace_and_its_options_to_the_loop(
    write_matrix: WriteMatrix, tmp_path: Path, cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 40: `builder nightly` located its workspace, then the loop located it twice more, and the
    command read its flags from loose keywords. Now one workspace (the command's) reaches the loop,
    and each flag lands in its field of NightlyOptions (the inverted ones inverted)."""
    matrix = write_matrix()
    located = locations(monkeypatch)
    got: list[tuple[Workspace, loop.NightlyOptions]] = []

    def recorded(ws: Workspace, options: loop.NightlyOptions, events: object, connect: object = None) -> NightlyReport:
        got.append((ws, options))
        return NightlyReport("2026-01-01T00:00:00Z", (), (), updates="not-checked")

    monkeypatch.setattr(loop, "nightly", recorded)
    summary = tmp_path / "summary.md"
    args = ("--no-updates", "--no-apply", "--no-index-check", "--no-publish", "-j", "3", "--gpu", "off", "--timeout", "77")
    done = cli("--matrix", str(matrix), "nightly", *args, "--summary", str(summary), "--rebuild-past-eol", "--wheelhouse", "w")
    assert done.exit_code == 0, done.output
    assert located == [str(matrix)] and len(got) == 1 and got[0][0].matrix_path == matrix
    options = got[0][1]
    assert (options.updates, options.apply, options.check_index, options.publish) == (False, False, False, False)
    assert (options.build.jobs, options.build.sources.wheelhouse, options.test.gpu, options.test.timeout_s) == (3, ("w",), "off", 77)
    assert options.rebuild_past_eol and options.summary == str(summary) and options.select is None
    assert summary.read_text(encoding="utf-8").startswith("# Nightly 2026-01-01T00:00:00Z: no regressions")
    assert done.stderr.strip().splitlines()[-1] == f"summary: {summary}"
