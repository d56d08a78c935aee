"""Publish and pull against a hostile user and a broken registry, with a fake engine (tests/fake_engine.py):
a build tag moved while publish runs, a `docker tag` on a push name, a failing or interrupted
floating-tag push, hand-edited and malformed smoke results, crafted catalog records for pull, a
registry that stalls an upload, a deleted digest, a killed publish's manifest container."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from builder.catalog.store import Catalog
from builder.engine import client as engine_client
from builder.engine import push
from builder.engine.port import ContainerEntry, NotFound
from builder.host import facts as hostinfo
from builder.host.facts import AmdInfo, EngineFacts, HostInfo, NvidiaInfo
from builder.model import results
from builder.model.probe_report import FrameworkProbe, ProbeHost, ProbeReport
from builder.model.results import CudaCheck, Diagnosed, GpuUse, SmokeResult, TestCounts, TestedOn
from builder.publish import gate
from builder.publish.verify import signers
from builder.usecases import catalog as catalogs
from builder.usecases import publish as publishing
from builder.usecases import pull as pulling
from builder.util.errors import RunFailure, UserError
from builder.workspace import Store, Workspace
from tests.catalog_fixtures import SHA, record
from tests.fake_engine import FakeEngine, connect_to, digest_of
from tests.fake_registry import FakeRegistry

ROOT = Path(__file__).resolve().parents[1]
TORCH_CPU = "torch2.13.0-cpu-py3.11-debian12"
REPO = "127.0.0.1:5000/h5a-images"
TESTED = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64
HOST = HostInfo(engine=EngineFacts(True, "20.10.24", ()), nvidia=NvidiaInfo(status="absent"), amd=AmdInfo())


@pytest.fixture(scope="module")
def spec() -> Any:
    (chosen,) = Workspace.locate(str(ROOT / "matrix.yaml")).selected(f"id={TORCH_CPU}", use_default=False)
    return chosen


def smoke(spec: Any, **changes: Any) -> SmokeResult:
    base = SmokeResult(
        id=spec.id, tag=spec.tag, verdict="passed", gpu=GpuUse(False, "cpu image: no GPU needed"), seconds=3.5,
        tests=TestCounts(tests=9, failures=0, errors=0, skipped=1), date="2026-12-01T10:00:00Z", content_hash=spec.content_hash,
        image_id=TESTED, host=TestedOn("no GPU", None, "20.10.24"), returncode=0, vendor="cpu",
        probe=ProbeReport(ProbeHost("3.11.2"), {"torch": FrameworkProbe("torch", "passed", version="2.13.0+cpu")}),
    )  # fmt: skip
    return replace(base, **changes)


class Events:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.outcomes: list[publishing.Published] = []

    def info(self, text: str) -> None:
        self.lines.append(text)

    def done(self, outcome: publishing.Published) -> None:
        self.outcomes.append(outcome)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, spec: Any) -> FakeEngine:
    engine = FakeEngine()
    engine.add_image(TESTED, spec.tag)
    engine.add_image(OTHER, spec.base.from_ref)
    monkeypatch.setattr(hostinfo, "gather", lambda **kwargs: HOST)
    return engine


def run_publish(tmp_path: Path, spec: Any, fake: FakeEngine, **options: Any) -> tuple[list[publishing.Published], Catalog]:
    ws = SimpleNamespace(store=Store(tmp_path), matrix=SimpleNamespace(registry=REPO))
    catalog = Catalog(tmp_path / "catalog")
    outcomes = publishing.publish(
        ws,  # type: ignore[arg-type]
        [spec],
        publishing.PublishOptions(registry=REPO, **options),
        catalog,
        Events(),
        connect_to(fake),
    )
    return outcomes, catalog


def bound_result(tmp_path: Path, spec: Any, **changes: Any) -> Path:
    return results.write(tmp_path / "build" / "results", smoke(spec, **changes))


def floating_names(spec: Any) -> list[str]:
    return [f"{REPO}:torch2.13-cpu-py3.11-debian12", f"{REPO}:torch2.13-cpu"]


# -- 13: everything after the gate acts on the approved image id ----------------------------------
def test_a_build_tag_moved_during_publish_never_reaches_the_floating_tags(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    bound_result(tmp_path, spec)

    def rebuild(name: str) -> None:  # `builder build --force` finishing while the immutable tag uploads
        fake.names[spec.tag] = OTHER

    fake.before_push = rebuild
    (outcome,), catalog = run_publish(tmp_path, spec, fake)
    assert outcome.status == "published", outcome.reason
    good = digest_of(TESTED)
    assert fake.registry[f"{REPO}:{TORCH_CPU}"] == good
    assert {name: fake.registry[name] for name in floating_names(spec)} == dict.fromkeys(floating_names(spec), good)
    assert [c.spec.image for c in fake.created] == [TESTED, TESTED], "the manifest and the SBOM's packages are read from the tested image"
    (stored,) = catalog.load()
    assert stored.digest == f"{REPO}@{good}" and set(stored.floating) == set(floating_names(spec))
    assert f"built-from=={TESTED}" in (catalog.manifests / f"{TORCH_CPU}.txt").read_text()
    assert fake.names[spec.tag] == OTHER, "the concurrent build's tag is left as it made it"


def test_a_docker_tag_on_a_push_name_mid_push_is_caught_and_pushed_again(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    bound_result(tmp_path, spec)
    moved: list[str] = []

    def retag_once(name: str) -> None:
        if name.endswith(":torch2.13-cpu") and not moved:
            fake.names[name] = OTHER  # someone's `docker tag` between our tag and the engine's read
            moved.append(name)

    fake.before_push = retag_once
    (outcome,), catalog = run_publish(tmp_path, spec, fake)
    assert moved and outcome.status == "published", outcome.reason
    assert fake.registry[f"{REPO}:torch2.13-cpu"] == digest_of(TESTED), "the wrong image was replaced by the tested one"


def test_a_push_name_that_keeps_moving_fails_and_the_record_says_what_moved(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    bound_result(tmp_path, spec)

    def hostile(name: str) -> None:
        if name.endswith(":torch2.13-cpu"):
            fake.names[name] = OTHER

    fake.before_push = hostile
    (outcome,), catalog = run_publish(tmp_path, spec, fake)
    assert outcome.status == "failed" and "was moved during the push" in outcome.reason and "\n" not in outcome.reason
    (stored,) = catalog.load()
    assert stored.floating == (f"{REPO}:torch2.13-cpu-py3.11-debian12",)
    assert any("not moved" in note and f"{REPO}:torch2.13-cpu " in note for note in stored.notes)


# -- 18: a record for every immutable tag pushed; no stray local names -----------------------------
def test_a_failing_floating_push_leaves_a_record_of_the_immutable_tag(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    bound_result(tmp_path, spec)
    fake.fail_push = lambda name: "manifest invalid: the registry refused it (500)" if name.endswith(":torch2.13-cpu") else None
    (outcome,), catalog = run_publish(tmp_path, spec, fake)
    assert outcome.status == "failed" and "is published and recorded" in outcome.reason
    (stored,) = catalog.load()
    assert stored.digest == f"{REPO}@{digest_of(TESTED)}" == outcome.digest
    assert stored.floating == (f"{REPO}:torch2.13-cpu-py3.11-debian12",)
    assert any(note.startswith(f"floating tags not moved: {REPO}:torch2.13-cpu (") for note in stored.notes)
    assert [n for n in fake.names if n.startswith(REPO)] == [], "no push name is left in the engine"


def test_sigterm_during_a_floating_push_leaves_the_record_and_no_local_names(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    bound_result(tmp_path, spec)

    def interrupt(name: str) -> None:
        if name.endswith(":torch2.13-cpu-py3.11-debian12"):
            raise KeyboardInterrupt  # what the CLI turns SIGTERM into (errors.Interrupted)

    fake.before_push = interrupt
    with pytest.raises(KeyboardInterrupt):
        run_publish(tmp_path, spec, fake)
    (stored,) = Catalog(tmp_path / "catalog").load()
    assert stored.digest == f"{REPO}@{digest_of(TESTED)}" and stored.floating == ()
    assert any("publish interrupted" in note for note in stored.notes)
    assert [n for n in fake.names if n.startswith(REPO)] == []
    assert fake.responses[-1].closed.is_set(), "the interrupted push's stream was shut (the engine cancels it)"


def test_a_push_name_that_held_another_image_gets_it_back(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    bound_result(tmp_path, spec)
    fake.names[f"{REPO}:torch2.13-cpu"] = OTHER  # e.g. an older image pulled under that name
    (outcome,), _ = run_publish(tmp_path, spec, fake)
    assert outcome.status == "published"
    assert {n: i for n, i in fake.names.items() if n.startswith(REPO)} == {f"{REPO}:torch2.13-cpu": OTHER}


# -- 19 and 8: results bound to their run, read by one typed reader ---------------------------------
def test_a_hand_edited_result_is_refused_in_one_line(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    path = bound_result(tmp_path, spec, verdict="failed", returncode=1, tests=TestCounts(tests=9, failures=0, errors=4, skipped=1))
    path.write_text(path.read_text().replace('"verdict": "failed"', '"verdict": "passed"'))
    (outcome,), catalog = run_publish(tmp_path, spec, fake)
    assert outcome.status == "refused" and "changed since the test run wrote it" in outcome.reason and str(path) in outcome.reason
    assert "\n" not in outcome.reason and fake.pushes == [] and not catalog.file.exists()


def test_a_forged_result_with_a_forged_index_is_refused_by_its_own_contents(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    path = bound_result(tmp_path, spec, verdict="failed", returncode=1, tests=TestCounts(tests=9, failures=0, errors=4, skipped=1))
    forged = path.read_text().replace('"verdict": "failed"', '"verdict": "passed"')
    results.write(path.parent, results.from_json(json.loads(forged.replace('"verdict": "passed"', '"verdict": "failed"')), "x"))
    path.write_text(forged)  # then the index rewritten to match, as a determined forger would
    index = json.loads((path.parent / results.INDEX).read_text())
    import hashlib

    index["sha256"][spec.id] = hashlib.sha256(forged.encode()).hexdigest()
    (path.parent / results.INDEX).write_text(json.dumps(index))
    (outcome,), _ = run_publish(tmp_path, spec, fake)
    assert outcome.status == "refused" and "its verdict 'passed' is not what its own contents give ('failed'" in outcome.reason
    assert fake.pushes == []


def _bind(path: Path, text: str) -> None:
    """Write `text` as the result file and record its hash: the reader's checks beyond the binding."""
    import hashlib

    path.write_text(text)
    index = json.loads((path.parent / results.INDEX).read_text())
    index["sha256"][path.stem] = hashlib.sha256(text.encode()).hexdigest()
    (path.parent / results.INDEX).write_text(json.dumps(index))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: "{broken", "not valid JSON"),
        (lambda d: "[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (lambda d: json.dumps({**d, "failures": 5}), "'failures' must be a list of text"),
        (lambda d: json.dumps({**d, "tests": {"errors": "4"}}), "'tests.errors' must be a whole number"),
        (
            lambda d: json.dumps({**d, "probe": {**d["probe"], "frameworks": ["torch"]}}),
            r"\(its 'probe'\): .*'frameworks' must be an object",
        ),
        (lambda d: json.dumps({**d, "probe": {**d["probe"], "cuda": {"checks": "none"}}}), "'cuda.checks' must be a list of objects"),
        (lambda d: json.dumps({**d, "probe": {"cuda": {}}}), "not a hello-gpu report: it lacks 'frameworks' or 'host'"),
        (lambda d: json.dumps({**d, "host": {"gpu": 5}}), "'host.gpu' must be text"),
        (lambda d: json.dumps({**d, "diagnoses": [{"framework": "torch"}]}), "'diagnoses.cause' must be text"),
        (lambda d: json.dumps({**d, "cuda_checks": [{"name": "x", "ok": "yes"}]}), "'cuda_checks.ok' must be true or false"),
        (lambda d: json.dumps({**d, "gpu": "none"}), "'gpu' must be an object"),
        (lambda d: json.dumps([d]), "'the file' must be an object"),
        (lambda d: json.dumps({k: v for k, v in d.items() if k != "returncode"}), "it lacks returncode"),
        (lambda d: json.dumps({**d, "colour": "blue"}), "unknown keys colour"),
        (lambda d: json.dumps({**d, "vendor": "intel"}), "vendor 'intel' is not one of"),
        (lambda d: json.dumps({**d, "verdict": "great"}), "verdict 'great' is not one of"),
        (lambda d: json.dumps({**d, "host": {"gpu": "x", "os": "y"}}), "'host' has unknown keys os"),
        (lambda d: json.dumps({**d, "tests": {"passes": 1}}), "'tests' has unknown keys passes"),
        (lambda d: json.dumps({**d, "cuda_checks": [{"name": "x", "ok": True, "detail": 5}]}), "'cuda_checks.detail' must be text"),
        (lambda d: json.dumps({**d, "fit_error": None}), "'fit_error' must be text"),
    ],
)
def test_a_malformed_result_is_one_line_for_publish_and_none_for_the_report(tmp_path: Path, spec: Any, edit: Any, message: str) -> None:
    path = bound_result(tmp_path, spec)
    _bind(path, edit(json.loads(path.read_text())))
    with pytest.raises(UserError, match=message) as caught:
        results.load(path.parent, spec.id)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)
    assert gate.read_result(path.parent, spec.id) is None


def test_results_round_trip_through_the_writer_and_reader(tmp_path: Path, spec: Any) -> None:
    path = bound_result(tmp_path, spec)
    assert results.load(path.parent, spec.id) == smoke(spec)
    assert results.load(path.parent, "absent") is None
    assert json.loads((path.parent / results.INDEX).read_text())["schema"] == 1


def test_a_result_the_index_does_not_know_is_refused(tmp_path: Path, spec: Any) -> None:
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / f"{spec.id}.json").write_text(json.dumps(smoke(spec).to_json()))  # written by hand, not by a test run
    with pytest.raises(UserError, match="no test run recorded it"):
        results.load(folder, spec.id)


# -- 20: leftovers of a killed publish ------------------------------------------------------------
def test_publish_sweeps_a_killed_publishs_manifest_container(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    dead = f"{engine_client.HOST}:999999999:1:deadbeef"  # a pid that cannot exist: that run is gone
    fake.leftovers = [ContainerEntry("manifest-of-a-killed-run", {engine_client.OWNER_LABEL: "builder", engine_client.SESSION_LABEL: dead})]
    bound_result(tmp_path, spec)
    run_publish(tmp_path, spec, fake)
    assert "manifest-of-a-killed-run" in fake.removed
    labels = fake.created[0].labels
    assert labels[engine_client.OWNER_LABEL] == "builder" and labels[engine_client.SESSION_LABEL] == engine_client.SESSION_ID


# -- 16: a registry that stalls an upload ---------------------------------------------------------
def test_a_stalled_push_fails_at_its_deadline_and_is_cancelled(spec: Any) -> None:
    fake = FakeEngine()
    fake.add_image(TESTED, f"{REPO}:x")
    fake.stall = True
    started = time.monotonic()
    with pytest.raises(RunFailure, match=r"did not finish within 0\.5 s .*cancelled"):
        push.push_image(fake, f"{REPO}:x", log=lambda line: None, deadline=0.5, wait_s=0.01)
    assert time.monotonic() - started < 5
    assert fake.responses[0].closed.is_set(), "the stream to the engine was shut, so the engine drops the upload"


def test_the_push_deadline_is_configurable_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(push.DEADLINE_ENV, "42")
    assert push.deadline_s() == 42.0 and push.deadline_s(7) == 7
    monkeypatch.setenv(push.DEADLINE_ENV, "soon")
    with pytest.raises(UserError, match="is not a number of seconds"):
        push.deadline_s()


def test_cancel_shuts_a_connection_a_reader_is_blocked_on() -> None:
    """A close alone does not wake a thread blocked in recv; cancel's shutdown does."""
    import threading

    left, right = socket.socketpair()
    woke = threading.Event()

    def reader() -> None:
        left.recv(1)  # blocks: nothing is ever sent
        woke.set()

    threading.Thread(target=reader, daemon=True).start()
    time.sleep(0.1)
    engine_client.cancel_response(SimpleNamespace(raw=SimpleNamespace(fileno=left.fileno), close=lambda: None))
    assert woke.wait(5)
    left.close()
    right.close()


# -- 14 and 20: pull and the names it gives -------------------------------------------------------
def _pull_catalog(tmp_path: Path, **changes: Any) -> Catalog:
    catalog = Catalog(tmp_path / "catalog")
    catalog.add([record(TORCH_CPU, **{"tag": f"{REPO}:{TORCH_CPU}", "digest": f"{REPO}@sha256:{SHA}", **changes})], {})
    return catalog


@pytest.mark.parametrize(
    "tag",
    ["ghcr.io/example/gpu-images:torch2.13.0-cpu-py3.11-debian12", f"{REPO}-other:x", "no-colon-at-all", f"{REPO}:bad tag", f"{REPO}:"],
)
def test_pull_refuses_a_record_tag_outside_its_digests_repository(tmp_path: Path, fake: FakeEngine, tag: str) -> None:
    catalog = _pull_catalog(tmp_path, tag=tag)
    with pytest.raises(UserError, match=r"is not 127\.0\.0\.1:5000/h5a-images:<tag>") as caught:
        pulling.pull(catalog, "torch=2.13", log=lambda line: None, connect=connect_to(fake))
    assert "\n" not in str(caught.value) and fake.pulls == [], "refused before anything is pulled"


def test_pull_never_moves_a_name_that_holds_another_local_image(tmp_path: Path, fake: FakeEngine) -> None:
    name = f"{REPO}:{TORCH_CPU}"
    fake.names[name] = OTHER  # a local build, never pushed or pulled
    with pytest.raises(RunFailure, match="already names another local image .* it was left alone"):
        pulling.pull(_pull_catalog(tmp_path), "torch=2.13", log=lambda line: None, connect=connect_to(fake))
    assert fake.names[name] == OTHER


def test_pull_never_touches_the_workspaces_build_names(tmp_path: Path, fake: FakeEngine) -> None:
    pulled = pulling.pull(_pull_catalog(tmp_path), "torch=2.13", log=lambda line: None, connect=connect_to(fake), build_repository=REPO)
    assert f"{REPO}:{TORCH_CPU}" not in fake.names and "is a `builder build` name" in pulled.note


def test_pull_moves_a_name_an_earlier_pull_of_that_repository_made(tmp_path: Path, fake: FakeEngine) -> None:
    name = f"{REPO}:{TORCH_CPU}"
    old = "sha256:pulled-earlier"
    fake.add_image(old, name)
    fake.repo_digests[old] = [f"{REPO}@sha256:{'e' * 64}"]
    pulled = pulling.pull(_pull_catalog(tmp_path), "torch=2.13", log=lambda line: None, connect=connect_to(fake))
    assert fake.names[name] == fake.by_digest[pulled.record.digest] != old


def test_pull_of_a_deleted_digest_says_so_at_once(tmp_path: Path, fake: FakeEngine) -> None:
    fake.pull_fault = NotFound("manifest for 127.0.0.1:5000/h5a-images@sha256:0123 not found: manifest unknown: manifest unknown")
    started = time.monotonic()
    with pytest.raises(RunFailure, match=r"the registry has no such manifest \(deleted\?\)") as caught:
        pulling.pull(_pull_catalog(tmp_path), "torch=2.13", log=lambda line: None, connect=connect_to(fake), wait_s=5)
    assert "is the registry up" not in str(caught.value) and len(fake.pulls) == 1 and time.monotonic() - started < 3


def test_what_the_runner_judges_is_what_the_reader_accepts(tmp_path: Path, spec: Any) -> None:
    """The writer's side: a run's own result (failed, with a probe and a diagnosis) reads back equal."""
    from builder.smoke.args import GpuAccess
    from builder.smoke.runner import Workdir, judge

    work = Workdir(tmp_path / spec.id)
    work.path.mkdir()
    work.junit.write_text(
        '<testsuite tests="3" failures="0" errors="1" skipped="0"><testcase name="test_probe"><error message="boom"/></testcase></testsuite>'
    )
    probe = {
        "host": {"python": "3.11.2"},
        "frameworks": {
            "torch": {"status": "failed", "reason": "no", "diagnosis": {"cause": "c", "fix": "f"}, "offline": [{"name": "x", "ok": False}]}
        },
    }
    work.probe_out.write_text(json.dumps(probe))
    result = judge(spec, GpuAccess(False, "cpu image: no GPU needed"), 1, "", work, time.monotonic(), "2026-12-01T10:00:00Z")
    assert (result.verdict, result.returncode, result.vendor) == ("failed", 1, "cpu")
    assert result.diagnoses == (Diagnosed("torch", "c", "f"),) and result.cuda_checks == (CudaCheck("torch", "x", False, ""),)
    results.write(tmp_path, result)
    assert results.load(tmp_path, spec.id) == result


@pytest.mark.parametrize(
    ("probe", "message"),
    [
        ("{broken", "not valid JSON"),
        ("[]", "'the report' must be an object"),
        ('{"host": {"python": "3.11"}, "frameworks": {"torch": {"status": "ok"}}}', "frameworks.torch.status 'ok' is not one of"),
        ('{"host": {}, "frameworks": {}}', "'host.python' must be text"),
        (
            '{"host": {"python": "3.11"}, "frameworks": {"jax": {"status": "passed", "offline": [{"ok": true}]}}}',
            "'frameworks.jax.offline.name'",
        ),
    ],
)
def test_a_malformed_probe_report_is_one_line_naming_its_file(tmp_path: Path, spec: Any, probe: str, message: str) -> None:
    """The probe's JSON edge: what the checks saved is read by one typed reader; a report of the
    wrong shape is one line naming probe.json, kept among the run's failures (not a traceback)."""
    from builder.smoke.args import GpuAccess
    from builder.smoke.runner import Workdir, judge, read_probe

    work = Workdir(tmp_path / spec.id)
    work.path.mkdir()
    work.probe_out.write_text(probe)
    with pytest.raises(UserError, match=message) as caught:
        read_probe(work.probe_out)
    assert "\n" not in str(caught.value) and str(caught.value).startswith(f"{work.probe_out}:")
    result = judge(spec, GpuAccess(False, "cpu image: no GPU needed"), 1, "", work, time.monotonic(), "2026-12-01T10:00:00Z")
    assert result.probe is None and result.failures == (str(caught.value),) and result.verdict == "failed"


def test_catalog_verify_names_a_deleted_digest(tmp_path: Path) -> None:
    catalog = _pull_catalog(tmp_path)
    (checked,) = catalogs.verify(catalog, catalog.load(), signers(catalog, None, True), FakeRegistry())
    assert not checked.ok and checked.detail == f"{REPO}:{TORCH_CPU}: not in the registry (deleted?); publish the record again"


def test_a_manifest_that_cannot_be_read_stops_publish_before_any_push(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    """Everything the record needs from the engine is read first: no immutable tag without its record."""
    bound_result(tmp_path, spec)
    fake.manifest_status = 1
    (outcome,), catalog = run_publish(tmp_path, spec, fake)
    assert outcome.status == "failed" and "reading the package manifest" in outcome.reason
    assert fake.registry == {} and fake.pushes == [] and not catalog.file.exists()
