"""The known-good catalog without Docker: records, the store (atomic, locked, deterministic),
queries, floating tags and the publish gate."""

from __future__ import annotations

import json
import multiprocessing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from builder.catalog.query import closest, matching, parse_query
from builder.catalog.records import KnownGood, RecordError, from_json
from builder.catalog.store import Catalog, render
from builder.model.results import SmokeResult, Verdict
from builder.publish import gate
from builder.publish.tags import floating_tags, newest_of_line
from builder.util.errors import UserError
from builder.util.query import value_matches
from builder.workspace import Workspace
from tests.catalog_fixtures import CUDA13, SHA, record, smoke

ROOT = Path(__file__).resolve().parents[1]
TORCH_CPU = "torch2.13.0-cpu-py3.11-debian12"
TORCH_CUDA = "torch2.14.1-cu130-py3.11-debian12"


# -- records --------------------------------------------------------------------------------------
def test_a_record_round_trips_through_json() -> None:
    one = record(TORCH_CPU, floating=("r:torch2.13-cpu",), notes=("a note",))
    assert from_json(json.loads(json.dumps(one.to_json())), "x") == one


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"digest": "127.0.0.1:5000/gpu-images:latest"}, "is not repository@sha256"),
        ({"verdict": "failed"}, "verdict 'failed' is not one of passed, gpu-skipped"),
        ({"colour": "blue"}, "unknown keys colour"),
    ],
)
def test_a_record_that_cannot_be_trusted_is_refused(change: dict[str, Any], message: str) -> None:
    data = {**record(TORCH_CPU).to_json(), **change}
    with pytest.raises(RecordError, match=message):
        from_json(data, "catalog/known-good.json")


def test_a_record_missing_keys_names_them() -> None:
    data = record(TORCH_CPU).to_json()
    del data["digest"], data["host"]
    with pytest.raises(RecordError, match="lacks digest, host"):
        from_json(data, "c")


# -- store ----------------------------------------------------------------------------------------
def test_store_upserts_by_id_sorted_and_deterministic(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "catalog")
    assert catalog.load() == ()
    catalog.add([record(TORCH_CUDA, accelerator=CUDA13), record(TORCH_CPU)], {TORCH_CPU: "# manifest\n"})
    first = catalog.file.read_bytes()
    assert [r.id for r in catalog.load()] == [TORCH_CPU, TORCH_CUDA]
    assert (catalog.manifests / f"{TORCH_CPU}.txt").read_text() == "# manifest\n"
    newer = record(TORCH_CPU, digest=f"127.0.0.1:5000/gpu-images@sha256:{'f' * 64}")
    catalog.add([newer], {})
    assert [r.digest for r in catalog.load() if r.id == TORCH_CPU] == [newer.digest]
    assert catalog.file.read_bytes() != first
    assert catalog.file.read_text() == render(catalog.load())  # what is on disk is the canonical form
    assert not [p for p in catalog.root.iterdir() if p.name.startswith(".known-good.json.") and not p.name.endswith(".lock")]


def test_a_new_record_takes_its_floating_tags_from_the_old_one(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path)
    line = "127.0.0.1:5000/gpu-images:torch2.13-cpu"
    catalog.add([record("torch2.13.0-cpu-py3.12-debian12", floating=(line,))], {})
    catalog.add([record(TORCH_CPU, floating=(line,))], {})
    assert {r.id: r.floating for r in catalog.load()} == {"torch2.13.0-cpu-py3.12-debian12": (), TORCH_CPU: (line,)}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"schema": 9, "images": []}', 'expected {"schema": 1'),
        ('{"schema": 1, "images": [{"id": "x"}]}', "record 'x' lacks"),
    ],
)
def test_a_corrupt_catalog_is_one_error_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "known-good.json").write_text(text)
    with pytest.raises(UserError, match=message) as caught:
        Catalog(tmp_path).load()
    assert str(tmp_path / "known-good.json") in str(caught.value)


def _add_many(root: str, prefix: str) -> None:
    catalog = Catalog(Path(root))
    for n in range(15):
        catalog.add([record(f"{prefix}{n}-cpu-py3.11-debian12")], {f"{prefix}{n}-cpu-py3.11-debian12": f"{n}\n"})


def test_two_publishers_at_once_lose_nothing(tmp_path: Path) -> None:
    """Two processes upserting at the same time: every record of both lands (the file lock)."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_add_many, args=(str(tmp_path), prefix)) for prefix in ("torch2.13.", "numba0.68.")]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    assert len(Catalog(tmp_path).load()) == 30


# -- queries --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("wanted", "found", "ok"),
    [
        ("2.14", "2.14.1", True),
        ("2.14", "2.140.0", False),
        ("2.14.1", "2.14.1+cu130", True),
        ("13", "13.0", True),
        ("3.11", "3.11.2", True),
        ("3.1", "3.11.2", False),
        ("cpu", "CPU", True),
        ("debian*", "debian12", True),
        ("torch", "tensorflow", False),
    ],
)
def test_value_matching(wanted: str, found: str, ok: bool) -> None:
    assert value_matches(wanted, found) is ok


def test_query_picks_the_newest_matching_record() -> None:
    records = [
        record(TORCH_CPU),
        record(TORCH_CUDA, frameworks={"torch": "2.14.1"}, accelerator=CUDA13),
        record("torch2.14.0-cu130-py3.11-debian12", frameworks={"torch": "2.14.0"}, accelerator=CUDA13),
    ]
    assert [r.id for r in matching(records, parse_query("torch=2.14 cuda=13 python=3.11"))] == [
        TORCH_CUDA,
        "torch2.14.0-cu130-py3.11-debian12",
    ]
    assert [r.id for r in matching(records, parse_query("vendor=cpu"))] == [TORCH_CPU]
    assert matching(records, parse_query("torch=2.15")) == []
    near = closest(records, parse_query("torch=2.15 python=3.11"))
    assert near and all([t.key for t in missed] == ["torch"] for _, missed in near)


@pytest.mark.parametrize("bad", ["torch", "torch==2.14", "=2.14", "Torch=2;rm"])
def test_a_query_term_that_is_not_key_value_is_a_usage_error(bad: str) -> None:
    with pytest.raises(UserError, match="is not key=value"):
        parse_query(bad)


# -- floating tags --------------------------------------------------------------------------------
def test_floating_tags_point_at_the_newest_of_their_line() -> None:
    assert floating_tags(record(TORCH_CUDA).line) == ("torch2.14-cu130-py3.11-debian12", "torch2.14-cu130")
    assert floating_tags(record("torch2.13.0-cu126-on-cu128-py3.11-ubuntu24.04").line) == (
        "torch2.13-cu126-on-cu128-py3.11-ubuntu24.04",
        "torch2.13-cu126",
    )
    assert floating_tags(record("torch2.14.1-jax0.10.2-cu130-py3.11-debian12").line) == (), "several frameworks: no line"
    old = record("torch2.14.0-cu130-py3.11-debian12", frameworks={"torch": "2.14.0"})
    new = record(TORCH_CUDA, frameworks={"torch": "2.14.1"})
    assert newest_of_line("torch2.14-cu130", [old, new]) is new
    assert newest_of_line("torch2.14-cu130", [new, old]) is new  # publishing the older one later does not move it back
    assert newest_of_line("jax0.10-cu130", [old, new]) is None


# -- the publish gate ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def spec() -> Any:
    (chosen,) = Workspace.locate(str(ROOT / "matrix.yaml")).selected(f"id={TORCH_CPU}", use_default=False)
    return chosen


def _result(spec: Any, verdict: Verdict = "passed", **changes: Any) -> SmokeResult:
    return smoke(spec.id, verdict, **{"content_hash": spec.content_hash, **changes})


def test_the_gate_publishes_only_a_pass_of_the_current_build(spec: Any) -> None:
    assert gate.decide(spec, _result(spec), "sha256:img", False).ok
    refused = {
        "not built": gate.decide(spec, _result(spec), None, False),
        "never tested": gate.decide(spec, None, "sha256:img", False),
        "another build": gate.decide(spec, _result(spec, content_hash="sha256:old"), "sha256:img", False),
        "changed since": gate.decide(spec, _result(spec), "sha256:other", False),
        "failed": gate.decide(spec, _result(spec, "failed", failures=("test_x: boom",)), "sha256:img", False),
        "--accept-gpu-skipped": gate.decide(spec, _result(spec, "gpu-skipped"), "sha256:img", False),
    }
    for words, decision in refused.items():
        assert not decision.ok and words in decision.reason, (words, decision.reason)
    accepted = gate.decide(spec, _result(spec, "gpu-skipped"), "sha256:img", True)
    assert accepted.ok and "accepted" in accepted.reason


def test_a_results_file_that_is_not_json_counts_as_never_tested(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("{broken")
    assert gate.read_result(tmp_path, "x") is None
    assert gate.read_result(tmp_path, "absent") is None


def test_sha_fixture_is_a_digest() -> None:
    assert len(SHA) == 64 and isinstance(replace(record(TORCH_CPU)), KnownGood)
