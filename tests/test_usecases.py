"""The use-cases (builder/usecases/) end to end against the in-memory engine (tests/fake_engine.py):
build, test, run, publish, pull, catalog verify, report and the nightly, offline. What only a real
engine shows (a real build, a locked-down run, registry digests, signals) stays in tests/integration/;
everything that is the tool's own logic around the engine is here.

The smoke checks are a pytest run in a subprocess that reaches the container through the engine;
here that subprocess is replaced by one that writes what the real checks write (junit.xml and the
probe's report) after asserting that the container it was given is running.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from builder.catalog.store import Catalog
from builder.engine import bootstrap, push
from builder.engine.build import Builder
from builder.engine.image_build import BuildResult, Run
from builder.engine.port import ContainerEntry, EngineFault, ExecResult, Progress
from builder.engine.session import HOST as HOST_NAME
from builder.engine.session import OWNER_LABEL, SESSION_ID, SESSION_LABEL
from builder.engine.settings import BuildSettings
from builder.host import facts as hostinfo
from builder.model.plan import ImageSpec
from builder.model.results import SmokeResult
from builder.model.sources import Sources
from builder.nightly.compare import BLOCKED
from builder.publish import evidence
from builder.render.labels import HASH_LABEL
from builder.render.tree import write_tree
from builder.usecases import build as building
from builder.usecases import catalog as catalogs
from builder.usecases import lock as locking
from builder.usecases import nightly as nightlies
from builder.usecases import publish as publishing
from builder.usecases import pull as pulling
from builder.usecases import report as reporting
from builder.usecases import run as running
from builder.usecases import test as testing
from builder.util import fsio
from builder.util.errors import RunFailure, UserError
from builder.workspace import Workspace
from tests.catalog_fixtures import SHA, record
from tests.fake_engine import FakeEngine, connect_to
from tests.usecase_fixtures import HOST, REAL_RUN, fake_with_base

TODAY = dt.date(2026, 12, 1)  # the day end of life is judged on: every line of the test matrix is supported then

REPO = "127.0.0.1:5000/uc-images"
MATRIX = f"""\
registry: {REPO}
bases:
  local-debian12: {{vendor: cpu, os: debian12, bootstrap: debootstrap}}
python: ["3.11"]
frameworks:
  numba: ["0.68.0"]
  jax: ["0.10.2"]
stacks:
  numba: [numba]
  jax: [jax]
"""
PASSED_SUITE = '<testsuite name="{name}" tests="3" failures="0" errors="0" skipped="0"><testcase name="test_probe"/></testsuite>'
FAILED_SUITE = (
    '<testsuite name="{name}" tests="3" failures="1" errors="0" skipped="0">'
    '<testcase name="test_import"><failure message="import numba failed"/></testcase></testsuite>'
)


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    (tmp_path / "matrix.yaml").write_text(MATRIX, encoding="utf-8")
    workspace = Workspace(tmp_path / "matrix.yaml")
    write_tree(workspace.images_dir, workspace.rendered_tree())
    monkeypatch.setattr(hostinfo, "gather", lambda **kwargs: HOST)
    monkeypatch.setenv("BUILDER_LOCK_DIR", str(tmp_path / "locks"))
    return workspace


@pytest.fixture
def specs(ws: Workspace) -> tuple[ImageSpec, ...]:
    return tuple(ws.selected(None, use_default=False))


@pytest.fixture
def fake(specs: Sequence[ImageSpec]) -> FakeEngine:
    return fake_with_base(specs)


class Checks:
    """Stands in for the smoke checks' pytest subprocess: asserts its container runs, writes its results."""

    def __init__(self, fake: FakeEngine, suite: str = PASSED_SUITE, returncode: int = 0) -> None:
        self.fake = fake
        self.suite = suite
        self.returncode = returncode
        self.seen: list[str] = []

    def __call__(self, argv: list[str], env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if env is None or "BUILDER_SMOKE_CONTAINER" not in env:  # not the checks (git rev-parse...): the real thing
            return REAL_RUN(argv, env=env, **kwargs)
        container = env["BUILDER_SMOKE_CONTAINER"]
        assert self.fake.live[container].started, "the checks run against a started container"
        self.seen.append(container)
        junit = Path(next(a for a in argv if a.startswith("--junitxml=")).split("=", 1)[1])
        junit.write_text(self.suite.format(name=junit.parent.name), encoding="utf-8")
        probe = {"frameworks": {"numba": {"version": "0.68.0", "status": "ok"}}, "host": {"python": "3.11.2"}}
        Path(env["BUILDER_SMOKE_PROBE_OUT"]).write_text(json.dumps(probe), encoding="utf-8")
        return subprocess.CompletedProcess(argv, self.returncode, "3 passed", "")


class BuildEvents:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []
        self.results: list[BuildResult] = []
        self.total = -1

    def begin(self, total: int) -> None:
        self.total = total

    def end(self) -> None: ...
    def info(self, text: str) -> None: ...
    def line(self, image: str, text: str) -> None:
        self.lines.append((image, text))

    def done(self, result: BuildResult) -> None:
        self.results.append(result)


class Tested:
    """The test use-case's events: which images started, what each gave."""

    __test__ = False  # not a pytest class

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.results: list[SmokeResult] = []

    def started(self, spec: ImageSpec) -> None:
        self.ids.append(spec.id)

    def done(self, result: SmokeResult) -> None:
        self.results.append(result)


class RunEvents:
    def __init__(self) -> None:
        self._build = BuildEvents()
        self._test = Tested()
        self.stages: list[str] = []

    @property
    def build(self) -> BuildEvents:
        return self._build

    @property
    def test(self) -> Tested:
        return self._test

    def built(self, results: Sequence[BuildResult]) -> None:
        self.stages.append("built")

    def tested(self, results: Sequence[SmokeResult]) -> None:
        self.stages.append("tested")


class PublishEvents:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.outcomes: list[publishing.Published] = []

    def info(self, text: str) -> None:
        self.lines.append(text)

    def done(self, outcome: publishing.Published) -> None:
        self.outcomes.append(outcome)


OFFLINE = building.BuildOptions(sources=Sources(use_host=False))  # not this host's pip configuration


# -- build ------------------------------------------------------------------------------------
def test_build_builds_what_is_stale_and_then_nothing(ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine) -> None:
    events = BuildEvents()
    results = building.build_images(ws, specs, OFFLINE, events, connect_to(fake))
    assert [r.status for r in results] == ["built", "built"] and events.total == 2 and building.build_ok(results)
    for spec, request in zip(specs, sorted(fake.builds, key=lambda r: [s.tag for s in specs].index(r.tag)), strict=True):
        assert request.tag == spec.tag and request.labels[HASH_LABEL] == spec.content_hash
        assert request.buildargs["BUILDER_PIP_CONF_URL"].startswith("http://127.0.0.1:") and request.network_mode == "host"
        assert "BUILDER_STAGE_OF" not in request.buildargs and "BUILDER_CA_URL" not in request.buildargs  # one stage; no CA given
        assert fake.inspect_image(spec.tag) is not None
    assert {image for image, _ in events.lines} == {s.id for s in specs}, "each build's lines reach the events, by image"
    stored = json.loads((ws.build_dir / "results" / "build.json").read_text())
    assert [e["status"] for e in stored] == ["built", "built"] and stored[0]["sizes"]["base_mb"] == 120.0

    again = building.build_images(ws, specs, OFFLINE, BuildEvents(), connect_to(fake))
    assert [r.status for r in again] == ["up-to-date", "up-to-date"] and len(fake.builds) == 2, "a current image is not built again"
    forced = building.build_images(ws, specs[:1], replace(OFFLINE, force=True), BuildEvents(), connect_to(fake))
    assert forced[0].status == "built" and len(fake.builds) == 3


def test_a_failing_build_stops_the_run_unless_keep_going(ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine) -> None:
    fake.build_output = lambda request: [Progress(text="Step 1/9 : RUN pip install\n"), Progress(error="returned a non-zero code: 1")]
    results = building.build_images(ws, specs, OFFLINE, BuildEvents(), connect_to(fake))
    assert [r.status for r in results] == ["failed", "not-built"] and not building.build_ok(results)
    assert "returned a non-zero code: 1" in (results[0].error or "") and results[0].blocked_by is None
    assert "earlier build failed" in (results[1].error or "")
    kept = building.build_images(ws, specs, replace(OFFLINE, keep_going=True), BuildEvents(), connect_to(fake))
    assert [r.status for r in kept] == ["failed", "failed"]
    assert all(fake.inspect_image(s.tag) is None for s in specs), "a failed build leaves no tag"


def test_a_network_flake_is_retried_and_reported_blocked_when_it_persists(
    ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine
) -> None:
    flaky = [Progress(text="Collecting numba\n"), Progress(error="Could not resolve host: https://user:hunter2@pypi.example/simple")]
    tries: list[str] = []

    def output(request: Any) -> list[Progress]:
        tries.append(request.tag)
        return flaky if len(tries) < 2 else [Progress(text="Successfully built 0123456789ab\n")]

    fake.build_output = output
    run = Run(settings=BuildSettings(), build_dir=ws.build_dir, lock_dir=fsio.lock_dir(), backoff_s=0.001)
    builder = Builder(make_engine=lambda: fake, run=run, contexts=ws.contexts(specs[:1]))
    (result,) = builder.build_all(specs[:1], jobs=1, force=True, keep_going=False)
    assert result.status == "built" and result.attempts == 2 and len(tries) == 2

    fake.build_output = lambda request: flaky
    (result,) = builder.build_all(specs[:1], jobs=1, force=True, keep_going=False)
    assert result.status == "failed" and result.blocked_by == "network" and result.attempts == 3
    assert "network errors in all 3 attempts" in (result.error or "") and "hunter2" not in (result.error or ""), "always redacted"


def test_build_refuses_an_unreachable_engine_before_any_progress(ws: Workspace, specs: tuple[ImageSpec, ...]) -> None:
    def refuse(timeout: int = 600) -> Any:
        raise UserError("no Docker engine answers at unix:///var/run/docker.sock: refused; start one")

    events = BuildEvents()
    with pytest.raises(UserError, match="no Docker engine answers"):
        building.build_images(ws, specs, OFFLINE, events, refuse)
    assert events.total == -1 and not (ws.build_dir / "results" / "build.json").exists()


def test_a_killed_runs_containers_are_swept_before_a_build(ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine) -> None:
    dead = ContainerEntry("dead-runs-step", {OWNER_LABEL: "builder", SESSION_LABEL: f"{HOST_NAME}:999999999:1:dead"})
    other_host = ContainerEntry("another-hosts", {OWNER_LABEL: "builder", SESSION_LABEL: "elsewhere:1:2:x"})
    mine = ContainerEntry("this-runs", {OWNER_LABEL: "builder", SESSION_LABEL: SESSION_ID})
    fake.leftovers = [dead, other_host, mine]
    building.build_images(ws, specs, OFFLINE, BuildEvents(), connect_to(fake))
    assert fake.removed == ["dead-runs-step"], "only a run known to be dead is swept"


def test_a_base_is_bootstrapped_only_when_its_recipe_changed(
    ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planted base carries the recipe's hash: nothing to bootstrap. Without it, bootstrapping needs
    debootstrap; its absence is a one-line UserError for the whole run (never a real debootstrap here)."""
    monkeypatch.setattr(bootstrap, "_tool_binary", lambda: None)
    building.build_images(ws, specs, OFFLINE, BuildEvents(), connect_to(fake))
    assert fake.removed_images == [], "the base was current: nothing was imported or replaced"
    fake.labels["sha256:base-debian12"] = {bootstrap.HASH_LABEL: "sha256:an-older-recipe"}
    with pytest.raises(UserError, match="mmdebstrap is not installed"):
        building.build_images(ws, specs, replace(OFFLINE, force=True), BuildEvents(), connect_to(fake))


# -- test -------------------------------------------------------------------------------------
def test_test_runs_the_checks_in_a_locked_down_container_and_writes_results(
    ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    building.build_images(ws, specs, OFFLINE, BuildEvents(), connect_to(fake))
    checks = Checks(fake)
    monkeypatch.setattr(subprocess, "run", checks)
    fake.exec_result = lambda container, command: ExecResult(0, b'{"frameworks": {}}', b"")
    events = Tested()
    results = testing.test_images(ws, specs, testing.TestOptions(timeout_s=60), events, connect_to(fake))
    assert [r.verdict for r in results] == ["passed", "passed"] and events.ids == [s.id for s in specs]
    for spec, result, container in zip(specs, results, fake.created, strict=True):
        info = fake.inspect_image(spec.tag)
        assert info is not None and result.image_id == info.id and result.content_hash == spec.content_hash
        assert container.spec.image == spec.tag and not container.spec.gpus and container.spec.command == ("sleep", "120")
        assert container.labels[OWNER_LABEL] == "builder" and container.labels[SESSION_LABEL] == SESSION_ID
        assert container.execs and container.execs[0][:4] == ("timeout", "-s", "KILL", "60"), "the probe ran in it"
        assert json.loads((ws.build_dir / "results" / spec.id / "probe-run.json").read_text())["rc"] == 0
    assert checks.seen == [c.id for c in fake.created] and fake.live == {}, "every container is removed after its run"
    assert (ws.build_dir / "results" / "junit.xml").exists()
    from builder.model import results as stored

    assert stored.load(ws.build_dir / "results", specs[0].id) == results[0], "the result is bound to its run"


def test_a_failing_check_fails_the_image_with_its_reason(
    ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    building.build_images(ws, specs[:1], OFFLINE, BuildEvents(), connect_to(fake))
    monkeypatch.setattr(subprocess, "run", Checks(fake, FAILED_SUITE, returncode=1))
    (result,) = testing.test_images(ws, specs[:1], testing.TestOptions(), Tested(), connect_to(fake))
    assert result.verdict == "failed" and any("import numba failed" in f for f in result.failures)


def test_an_image_that_is_not_built_is_not_tested(ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine) -> None:
    (result,) = testing.test_images(ws, specs[:1], testing.TestOptions(), Tested(), connect_to(fake))
    assert result.verdict == "not-built" and fake.created == []


def test_an_engine_that_breaks_mid_test_fails_the_image_in_one_line(ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine) -> None:
    building.build_images(ws, specs[:1], OFFLINE, BuildEvents(), connect_to(fake))

    class Broken(FakeEngine):
        def container(self, spec: Any) -> Any:
            raise EngineFault("('Connection aborted.', RemoteDisconnected('Remote end closed connection'))")

    broken = Broken()
    broken.__dict__.update({k: v for k, v in fake.__dict__.items()})
    (result,) = testing.test_images(ws, specs[:1], testing.TestOptions(), Tested(), connect_to(broken))
    assert result.verdict == "failed" and result.failures[0].startswith("engine connection failed: ('Connection aborted.'")


def test_a_host_whose_checks_cannot_reach_a_container_is_refused_and_nothing_is_recorded(
    ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No docker CLI (pytest-testinfra's transport): every check failed on the host and a good image
    was recorded "failed". Now one line, before any container, and no result file replaced."""
    building.build_images(ws, specs[:1], OFFLINE, BuildEvents(), connect_to(fake))
    monkeypatch.setattr(subprocess, "run", Checks(fake))
    (passed,) = testing.test_images(ws, specs[:1], testing.TestOptions(), Tested(), connect_to(fake))
    saved = (ws.build_dir / "results" / f"{specs[0].id}.json").read_bytes()
    fake.blocked_checks = "no `docker` is on PATH: install it"
    with pytest.raises(UserError, match="^no `docker` is on PATH: install it$"):
        testing.test_images(ws, specs[:1], testing.TestOptions(), Tested(), connect_to(fake))
    assert len(fake.created) == 1 and fake.closed, "no container for the refused run, and the engine closed"
    assert (ws.build_dir / "results" / f"{specs[0].id}.json").read_bytes() == saved and passed.verdict == "passed"
    built = len(fake.builds)
    with pytest.raises(UserError, match="docker"):
        running.run(ws, specs, replace(OFFLINE, force=True), testing.TestOptions(), RunEvents(), connect_to(fake))
    assert len(fake.builds) == built, "`builder run` refuses before building what it could not test"


def test_two_test_runs_of_one_image_take_turns_and_each_judges_its_own_run(
    ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two `builder test`s of an image at once shared build/results/<id>/: the second's start deleted
    the first's probe output and junit.xml mid-run. Now the second waits for the first's lock."""
    import threading

    import filelock

    from builder.smoke import runner

    refused = threading.Event()  # set when the second run has tried the lock and found it held

    class Watched(filelock.FileLock):
        def _acquire(self) -> None:
            super()._acquire()
            if not self.is_locked and threading.current_thread() is not threading.main_thread():
                refused.set()

    monkeypatch.setattr(filelock, "FileLock", Watched)
    building.build_images(ws, specs[:1], OFFLINE, BuildEvents(), connect_to(fake))
    monkeypatch.setattr(subprocess, "run", Checks(fake))
    work = runner.Workdir(ws.build_dir / "results" / specs[0].id)
    finished: list[str] = []

    def second() -> None:
        (result,) = testing.test_images(ws, specs[:1], testing.TestOptions(timeout_s=60), Tested(), connect_to(fake))
        finished.append(result.verdict)

    with runner.image_under_test(work, specs[0].id, timeout_s=60):  # the first run, mid-test
        work.junit.write_text("<testsuite/>", encoding="utf-8")
        thread = threading.Thread(target=second)
        thread.start()
        assert refused.wait(timeout=30), "the second run never asked for the lock"
        assert fake.created == [] and finished == [] and work.junit.read_text() == "<testsuite/>", "the second waits, touching nothing"
    thread.join(timeout=30)
    assert finished == ["passed"] and len(fake.created) == 1

    monkeypatch.setattr(runner, "WAIT_BEYOND_TIMEOUT_S", 0)
    with runner.image_under_test(work, specs[0].id, timeout_s=1):
        out: list[BaseException] = []
        waiting = threading.Thread(target=lambda: out.extend(_raised(lambda: runner.image_under_test(work, specs[0].id, 1).__enter__())))
        waiting.start()
        waiting.join(timeout=30)
    (error,) = out
    assert isinstance(error, UserError) and "another `builder test` has been testing" in str(error) and "run again" in str(error)


def _raised(call: Any) -> list[BaseException]:
    try:
        call()
    except BaseException as exc:  # noqa: BLE001 - the test looks at what was raised
        return [exc]
    return []


# -- run --------------------------------------------------------------------------------------
def test_run_builds_then_tests_what_built(
    ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subprocess, "run", Checks(fake))
    events = RunEvents()
    built, tested = running.run(ws, specs, OFFLINE, testing.TestOptions(), events, connect_to(fake))
    assert [r.status for r in built] == ["built", "built"] and [r.verdict for r in tested] == ["passed", "passed"]
    assert events.stages == ["built", "tested"] and running.run_ok(specs, built, tested)


def test_run_tests_only_what_built(ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "run", Checks(fake))
    fake.build_output = lambda request: [Progress(error="boom")] if "jax" in request.tag else [Progress(text="ok\n")]
    built, tested = running.run(ws, specs, replace(OFFLINE, keep_going=True), testing.TestOptions(), RunEvents(), connect_to(fake))
    assert sorted(r.status for r in built) == ["built", "failed"] and len(tested) == 1 and not running.run_ok(specs, built, tested)


def test_run_refuses_stale_images(ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine) -> None:
    (ws.images_dir / specs[0].id / "Dockerfile").write_text("FROM scratch\n")
    with pytest.raises(UserError, match="images/ is stale"):
        running.run(ws, specs, OFFLINE, testing.TestOptions(), RunEvents(), connect_to(fake))
    assert fake.builds == []


def test_an_engine_gone_after_the_build_is_a_run_failure(ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine) -> None:
    events = RunEvents()

    def connect(timeout: int = 600) -> FakeEngine:
        if events.stages:  # the build is over: then the tests find no engine
            raise UserError("no Docker engine answers at unix:///var/run/docker.sock: gone")
        return fake

    with pytest.raises(RunFailure, match="the smoke tests could not start after the build: no Docker engine answers"):
        running.run(ws, specs, OFFLINE, testing.TestOptions(), events, connect)


# -- publish ----------------------------------------------------------------------------------
def _tested(ws: Workspace, specs: Sequence[ImageSpec], fake: FakeEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "run", Checks(fake))
    running.run(ws, specs, OFFLINE, testing.TestOptions(), RunEvents(), connect_to(fake))


def test_publish_pushes_tested_images_and_records_them(
    ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tested(ws, specs, fake, monkeypatch)
    catalog = Catalog(ws.root / "catalog")
    events = PublishEvents()
    outcomes = publishing.publish(ws, specs, publishing.PublishOptions(registry=REPO), catalog, events, connect_to(fake))
    assert [o.status for o in outcomes] == ["published", "published"] and publishing.publish_ok(outcomes)
    records = {r.id: r for r in catalog.load()}
    for spec in specs:
        info = fake.inspect_image(spec.tag)
        assert info is not None and records[spec.id].digest == f"{REPO}@{fake.registry[f'{REPO}:{spec.id}']}"
        assert records[spec.id].floating and all(fake.registry[t] == fake.registry[f"{REPO}:{spec.id}"] for t in records[spec.id].floating)
        statement = json.loads((ws.root / "catalog" / "evidence" / evidence.statement_name(spec.id)).read_text(encoding="utf-8"))
        built = statement["predicate"]["built"]  # the tested image's ID and layers: what a rebuild compares
        assert built == {"image_id": info.id, "diff_ids": list(info.diff_ids), "canonical": spec.canonical is not None}
    assert [n for n in fake.names if n.startswith(REPO + ":")] == [s.tag for s in specs], "only the build tags stay"
    assert any("digest:" in line for line in events.lines)


def test_publish_dry_run_pushes_nothing(
    ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tested(ws, specs[:1], fake, monkeypatch)
    catalog = Catalog(ws.root / "catalog")
    (outcome,) = publishing.publish(
        ws, specs[:1], publishing.PublishOptions(registry=REPO, dry_run=True), catalog, PublishEvents(), connect_to(fake)
    )
    assert outcome.status == "would-publish" and outcome.tags[0] == f"{REPO}:{specs[0].id}"
    assert fake.pushes == [] and catalog.load() == ()


def test_publish_refuses_an_untested_image_and_a_bad_registry(ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine) -> None:
    building.build_images(ws, specs[:1], OFFLINE, BuildEvents(), connect_to(fake))
    catalog = Catalog(ws.root / "catalog")
    (outcome,) = publishing.publish(ws, specs[:1], publishing.PublishOptions(registry=REPO), catalog, PublishEvents(), connect_to(fake))
    assert outcome.status == "refused" and not publishing.publish_ok([outcome]) and fake.pushes == []
    with pytest.raises(UserError, match="is not a repository like"):
        publishing.publish(ws, specs, publishing.PublishOptions(registry="Bad Registry"), catalog, PublishEvents(), connect_to(fake))


def test_a_registry_500_on_the_digest_fails_the_image_in_one_line(
    ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tested(ws, specs[:1], fake, monkeypatch)
    fake.registry_fault = EngineFault("500 Server Error for http+docker://localhost/distribution: Internal Server Error", 500)
    catalog = Catalog(ws.root / "catalog")
    (outcome,) = publishing.publish(ws, specs[:1], publishing.PublishOptions(registry=REPO), catalog, PublishEvents(), connect_to(fake))
    # the push landed before the registry failed the read: recorded as pushed, and said so (issue 37)
    assert (
        outcome.status == "failed"
        and f"is pushed and recorded, but the registry did not report a digest for {REPO}:{specs[0].id}: 500" in outcome.reason
    )
    (stored,) = catalog.load()
    assert "\n" not in outcome.reason and stored.digest == outcome.digest and any("was not read back" in n for n in stored.notes)


def test_a_push_is_retried_on_a_network_flake_and_gives_up_in_one_redacted_line() -> None:
    fake = FakeEngine()
    fake.add_image("sha256:img", f"{REPO}:x")
    fake.flaky_pushes = 2
    assert push.push_image(fake, f"{REPO}:x", log=lambda line: None, wait_s=0.001) == fake.registry[f"{REPO}:x"]
    assert fake.pushes == [f"{REPO}:x"] * 3

    fake.flaky_pushes = 99
    fake.fail_push = lambda name: None
    with pytest.raises(RunFailure, match=r"failed after 4 tries \(network\): .*Connection reset by peer.*; is the registry up") as caught:
        push.push_image(fake, f"{REPO}:x", log=lambda line: None, wait_s=0.001)
    assert "\n" not in str(caught.value)

    fake.flaky_pushes = 0
    fake.fail_push = lambda name: "Get https://robot:s3cret@127.0.0.1:5000/v2/: dial tcp: connection refused"
    with pytest.raises(RunFailure) as caught:
        push.push_image(fake, f"{REPO}:x", log=lambda line: None, attempts=2, wait_s=0.001)
    assert "s3cret" not in str(caught.value) and "****@127.0.0.1" in str(caught.value), "what a retry reports is redacted"


def test_the_engines_own_upload_retry_is_a_try_of_ours_cancelled_at_once() -> None:
    """A registry answering 503 made the engine retry each layer five times, ~50 s, within one try of
    ours: its first "Retrying in" now ends the try (the push cancelled), and our tries decide."""
    fake = FakeEngine()
    fake.add_image("sha256:img", f"{REPO}:x")
    fake.retrying_pushes = 2
    started = time.monotonic()
    assert push.push_image(fake, f"{REPO}:x", log=lambda line: None, wait_s=0.001) == fake.registry[f"{REPO}:x"]
    assert fake.pushes == [f"{REPO}:x"] * 3 and time.monotonic() - started < 10, "each retrying try was cancelled, not waited out"
    assert all(stream.closed.is_set() for stream in fake.responses[:2]), "the retrying pushes were cancelled"
    fake.retrying_pushes = 99
    with pytest.raises(
        RunFailure, match=r"failed after 4 tries \(network\): the registry failed the upload of layer 8c9e3cdef517 .*; is the registry up"
    ):
        push.push_image(fake, f"{REPO}:x", log=lambda line: None, wait_s=0.001)


def test_push_tries_come_from_the_environment_and_bad_values_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeEngine()
    fake.add_image("sha256:img", f"{REPO}:x")
    fake.flaky_pushes = 99
    fake.fail_push = lambda name: None
    monkeypatch.setenv(push.TRIES_ENV, "1")
    with pytest.raises(RunFailure, match=r"failed after 1 try \(network\)"):
        push.push_image(fake, f"{REPO}:x", log=lambda line: None, wait_s=0.001)
    assert len(fake.pushes) == 1
    monkeypatch.setenv(push.TRIES_ENV, "3")
    assert push.tries() == 3 and push.tries(2) == 2
    for bad in ("0", "21", "-1", "two", " 3"):
        monkeypatch.setenv(push.TRIES_ENV, bad)
        with pytest.raises(UserError, match=rf"^{push.TRIES_ENV}=.* is not a number of tries from 1 to 20 \(e.g. 4\)$"):
            push.tries()
    monkeypatch.delenv(push.TRIES_ENV)
    assert push.tries() == push.ATTEMPTS == 4


def test_a_refused_push_is_not_retried() -> None:
    fake = FakeEngine()
    fake.add_image("sha256:img", f"{REPO}:x")
    fake.fail_push = lambda name: "denied: requested access to the resource is denied"
    with pytest.raises(RunFailure, match="push of .* failed: denied"):
        push.push_image(fake, f"{REPO}:x", log=lambda line: None, wait_s=0.001)
    assert len(fake.pushes) == 1


# -- pull -------------------------------------------------------------------------------------
def _catalog(tmp_path: Path, **changes: Any) -> Catalog:
    catalog = Catalog(tmp_path / "catalog")
    image = "numba0.68.0-cpu-py3.11-debian12"
    fields = {"tag": f"{REPO}:{image}", "digest": f"{REPO}@sha256:{SHA}", "frameworks": {"numba": "0.68.0"}, **changes}
    catalog.add([record(image, **fields)], {})
    return catalog


def test_pull_retries_a_network_flake_and_verifies_the_digest(tmp_path: Path, ws: Workspace) -> None:
    fake = FakeEngine()
    fake.registry[f"{REPO}:numba0.68.0-cpu-py3.11-debian12"] = f"sha256:{SHA}"  # its tag still points at it: no note
    fake.flaky_pulls = 1
    lines: list[str] = []
    pulled = pulling.pull(_catalog(tmp_path), "numba=0.68", log=lines.append, wait_s=0.001, connect=connect_to(fake))
    assert len(fake.pulls) == 2 and pulled.record.digest == f"{REPO}@sha256:{SHA}"
    assert fake.names[pulled.record.tag] == fake.by_digest[pulled.record.digest] and lines == [f"Digest: sha256:{SHA}"]
    assert pulled.run_line == f"docker run --rm -it {pulled.record.digest}" and pulled.note == ""


def test_pull_gives_up_after_its_tries_and_refuses_what_is_not_a_flake(tmp_path: Path, ws: Workspace) -> None:
    fake = FakeEngine()
    fake.flaky_pulls = 9
    with pytest.raises(RunFailure, match=r"failed after 3 tries \(network\): .*; is the registry up\?"):
        pulling.pull(_catalog(tmp_path), "numba=0.68", log=lambda line: None, wait_s=0.001, connect=connect_to(fake))
    assert len(fake.pulls) == 3

    fake = FakeEngine()
    fake.fail_pull = lambda reference: "unauthorized: authentication required for https://robot:s3cret@127.0.0.1:5000"
    with pytest.raises(RunFailure, match="failed: unauthorized") as caught:
        pulling.pull(_catalog(tmp_path), "numba=0.68", log=lambda line: None, wait_s=0.001, connect=connect_to(fake))
    assert len(fake.pulls) == 1 and "s3cret" not in str(caught.value)

    fake.fail_pull = lambda reference: "manifest unknown: manifest unknown"
    with pytest.raises(RunFailure, match=r"no such manifest \(deleted\?\)"):
        pulling.pull(_catalog(tmp_path), "numba=0.68", log=lambda line: None, wait_s=0.001, connect=connect_to(fake))
    fake.fail_pull = lambda reference: "received unexpected HTTP status: 503 Service Unavailable"
    with pytest.raises(RunFailure, match="after 2 tries"):
        pulling.pull(_catalog(tmp_path), "numba=0.68", log=lambda line: None, attempts=2, wait_s=0.001, connect=connect_to(fake))


def test_pull_needs_a_query_that_matches(tmp_path: Path, ws: Workspace) -> None:
    fake = FakeEngine()
    with pytest.raises(UserError, match="give a query"):
        pulling.pull(_catalog(tmp_path), "", log=lambda line: None, connect=connect_to(fake))
    with pytest.raises(RunFailure, match="no known-good image matches"):
        pulling.pull(_catalog(tmp_path), "numba=0.99", log=lambda line: None, connect=connect_to(fake))
    with pytest.raises(UserError, match="query key 'colour' is in no record"):
        pulling.pull(_catalog(tmp_path), "colour=blue", log=lambda line: None, connect=connect_to(fake))
    assert fake.pulls == []


def test_pull_reads_its_query_once_and_the_catalog_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 40: a pull parsed its query 5 times and loaded the catalog twice (the match, the platform
    order, the no-match message each read them again). Counted at the parser and the loader."""
    from builder.util.query import parse_terms

    catalog = _catalog(tmp_path)
    parsed: list[str] = []
    loaded: list[Catalog] = []
    load = Catalog.load

    def parse(text: str, *args: Any) -> Any:
        parsed.append(text)
        return parse_terms(text, *args)

    def read(self: Catalog) -> Any:
        loaded.append(self)
        return load(self)

    monkeypatch.setattr("builder.catalog.query.parse_terms", parse)  # what catalog/query.py's parse_query calls
    monkeypatch.setattr(Catalog, "load", read)
    fake = FakeEngine()
    fake.registry[f"{REPO}:numba0.68.0-cpu-py3.11-debian12"] = f"sha256:{SHA}"
    pulled = pulling.pull(catalog, "numba=0.68", log=lambda line: None, wait_s=0.001, connect=connect_to(fake))
    assert pulled.record.id == "numba0.68.0-cpu-py3.11-debian12"
    assert (parsed, len(loaded)) == (["numba=0.68"], 1)

    parsed.clear()
    loaded.clear()
    with pytest.raises(RunFailure, match="no known-good image matches 'numba=0.99'; closest: numba0.68.0"):
        pulling.pull(catalog, "numba=0.99", log=lambda line: None, connect=connect_to(fake))
    assert (parsed, len(loaded)) == (["numba=0.99"], 1), "the no-match message uses what the match read"


def test_pull_notes_a_gpu_skipped_record() -> None:
    assert "published without a GPU run" in pulling.host_note(record("x", gpu_skipped_accepted=True), HOST)
    assert pulling.host_note(record("x"), HOST) == ""


# -- catalog ----------------------------------------------------------------------------------
# (catalog --verify: tests/test_usecase_catalog.py and tests/test_verify_closed.py)


def test_catalog_queries_and_their_hints(tmp_path: Path) -> None:
    empty = Catalog(tmp_path / "empty")
    assert "is empty" in catalogs.no_match_message(empty, "numba=0.68")
    catalog = _catalog(tmp_path)
    assert [r.id for r in catalogs.find(catalog, "numba=0.68")] == ["numba0.68.0-cpu-py3.11-debian12"]
    assert tuple(catalogs.find(catalog, "")) == catalog.load()
    assert "closest: numba0.68.0-cpu-py3.11-debian12 (differs in" in catalogs.no_match_message(catalog, "numba=0.68 python=3.12")
    named = Workspace(tmp_path / "matrix.yaml").store.catalog(str(tmp_path / "elsewhere"))
    assert named.file.parent == tmp_path / "elsewhere"


# -- report -----------------------------------------------------------------------------------
def test_report_writes_both_pages_with_the_build_sizes(
    ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tested(ws, specs, fake, monkeypatch)
    catalog = Catalog(ws.root / "catalog")
    files = reporting.report(ws, catalog, ws.root / "docs" / "support-matrix.md", ws.build_dir / "report" / "index.html")
    assert files.markdown.exists() and files.html.exists() and sum(files.counts.values()) >= len(specs)
    (ws.build_dir / "results" / "build.json").write_text("[{broken")
    again = reporting.report(ws, catalog, ws.root / "docs" / "support-matrix.md", ws.build_dir / "report" / "index.html")
    assert again.counts == files.counts, "sizes are a nicety: a broken build.json does not stop the report"


# -- nightly ----------------------------------------------------------------------------------
class NightlyEvents:
    def __init__(self) -> None:
        self.stages: list[str] = []

    def stage(self, name: str) -> None:
        self.stages.append(name)

    def info(self, text: str) -> None: ...
    def lock(self, result: locking.LockResult) -> None: ...
    def build(self) -> BuildEvents:
        return BuildEvents()

    def test(self) -> Tested:
        return Tested()

    def publish(self) -> PublishEvents:
        return PublishEvents()


def test_a_nightly_builds_tests_publishes_and_reports_then_rebuilds_nothing(
    ws: Workspace, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subprocess, "run", Checks(fake))
    monkeypatch.setattr(locking, "lock_images", lambda ws, specs, options, done: [])  # resolving needs the index
    options = nightlies.NightlyOptions(check_index=False, updates=False, registry=REPO, build=OFFLINE, today=TODAY)
    events = NightlyEvents()
    first = nightlies.nightly(Workspace(ws.matrix_path), options, events, connect=connect_to(fake))
    assert events.stages == ["plan", "lock", "build", "test", "publish", "report"]
    assert {o.status for o in first.outcomes} == {"passed"} and all(o.published.startswith(f"{REPO}@sha256:") for o in first.outcomes)
    assert first.notes == () and len(Catalog(ws.root / "catalog").load()) == 2
    assert (ws.root / "docs" / "support-matrix.md").exists()

    builds, pushes = len(fake.builds), len(fake.pushes)
    second = nightlies.nightly(Workspace(ws.matrix_path), options, NightlyEvents(), connect=connect_to(fake))
    assert len(fake.builds) == builds and len(fake.pushes) == pushes, "nothing changed: nothing rebuilt, retested or pushed"
    assert {o.status for o in second.outcomes} == {"passed"} and all(o.held == "this build is already published" for o in second.outcomes)


def test_a_nightly_whose_registry_is_down_still_reports(ws: Workspace, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "run", Checks(fake))
    monkeypatch.setattr(locking, "lock_images", lambda ws, specs, options, done: [])
    monkeypatch.setattr(push, "WAIT_S", 0.001)
    fake.fail_push = lambda name: "denied: the registry refused the push"
    options = nightlies.NightlyOptions(check_index=False, updates=False, registry=REPO, build=OFFLINE, today=TODAY)
    report = nightlies.nightly(Workspace(ws.matrix_path), options, NightlyEvents(), connect=connect_to(fake))
    assert {o.status for o in report.outcomes} == {"passed"} and not any(o.published for o in report.outcomes)
    assert report.notes and all(n.startswith("publish: ") and "denied" in n for n in report.notes)


def test_a_nightly_whose_builds_cannot_reach_the_network_says_so(ws: Workspace, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(locking, "lock_images", lambda ws, specs, options, done: [])
    fake.build_output = lambda request: [Progress(error="Temporary failure in name resolution")]
    monkeypatch.setattr(Run, "__init__", _fast_run(Run.__init__))
    options = nightlies.NightlyOptions(check_index=False, updates=False, publish=False, build=OFFLINE, today=TODAY)
    report = nightlies.nightly(Workspace(ws.matrix_path), options, NightlyEvents(), connect=connect_to(fake))
    assert {o.status for o in report.outcomes} == {BLOCKED} and len(report.notes) == 2


def _fast_run(init: Any) -> Any:
    """Run.__init__ with no backoff between a build's tries (the defaults wait 5 s, then 10 s)."""

    def fast(self: Run, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **{**kwargs, "backoff_s": 0.0})

    return fast


def test_a_nightly_whose_index_is_unreachable_notes_it_and_runs_on(
    ws: Workspace, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locking, "lock_images", lambda ws, specs, options, done: [])
    monkeypatch.setattr(subprocess, "run", Checks(fake))

    def unreachable(ws: Workspace, options: nightlies.NightlyOptions) -> Any:
        raise RunFailure("cannot reach the package index https://pypi.org/pypi (timed out; 4 tries)")

    events = NightlyEvents()
    options = nightlies.NightlyOptions(check_index=False, publish=False, build=OFFLINE, today=TODAY)
    report = nightlies.nightly(Workspace(ws.matrix_path), options, events, updates=unreachable, connect=connect_to(fake))
    assert events.stages[0] == "updates" and report.updates == "failed" and report.notes[0].startswith("updates: cannot reach")
    assert {o.status for o in report.outcomes} == {"passed"}, "the stages after it still ran"
