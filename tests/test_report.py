"""The support matrix from a fixture catalog and fixture results (pure; the browser test is in
tests/test_report_browser.py)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from builder.catalog.records import MeasuredAccelerator
from builder.model import results
from builder.model.results import Diagnosed, GpuUse, SmokeResult, TestedOn, Verdict
from builder.publish import gate
from builder.report.html import render_html
from builder.report.markdown import render_markdown
from builder.report.model import STATUSES, Report, build_report
from builder.util.errors import UserError
from builder.util.fsio import dump_json
from builder.workspace import Workspace
from tests.catalog_fixtures import record, smoke

GOLDEN_MATRIX = Path(__file__).parent / "golden" / "matrix.yaml"
KNOWN_GOOD = "torch2.5.1-cu124-py3.11-ubuntu22.04"
PASSED = "numba0.68.0-cpu-py3.11-debian12"
FAILED = "tensorflow2.21.0-cu128-py3.12-ubuntu24.04"
GPU_SKIPPED = "numba0.68.0-cu130-py3.11-debian12"
NOT_BUILT = "torch2.5.1-rocm6.2-py3.11-ubuntu22.04"
RUNS_ON = "sm 5.0-9.0, driver >= 550.54.14, amd64 (table)"  # cuda>=12.4: the driver CUDA 12.4 shipped with
EXPECTED = {KNOWN_GOOD: "known-good", PASSED: "passed", FAILED: "failed", GPU_SKIPPED: "gpu-skipped", NOT_BUILT: "not-built"}


def fixture_report() -> Report:
    """Every status once: a published pass, a pass not yet published, a failure with its diagnosis,
    a gpu-skipped CUDA image, an image never built, and what the golden matrix skips."""
    ws = Workspace(GOLDEN_MATRIX)
    specs = ws.selected(None, use_default=False)
    hashes = {s.id: s.content_hash for s in specs}

    def result(image_id: str, verdict: Verdict, **extra: Any) -> SmokeResult:
        return smoke(image_id, verdict, content_hash=hashes[image_id], gpu=GpuUse(False, "cpu image"), **extra)

    results = {
        PASSED: result(PASSED, "passed"),
        FAILED: result(FAILED, "failed", diagnoses=(Diagnosed("tensorflow", "the <cuDNN> library is not in the image", ""),)),
        GPU_SKIPPED: result(GPU_SKIPPED, "gpu-skipped"),
        NOT_BUILT: replace(result(NOT_BUILT, "passed"), content_hash="sha256:an-older-build"),
    }
    records = [
        record(
            KNOWN_GOOD,
            stack="torch",
            frameworks={"torch": "2.5.1"},
            host=TestedOn("NVIDIA H200", "580.159.04", "28.0"),
            accelerator=MeasuredAccelerator("cuda", "12.4.1", cuda="12.4", cudnn="9.1.0"),
        )
    ]
    return build_report(ws.decided, specs, results, records, {PASSED: 432.0})


@pytest.fixture(scope="module")
def report() -> Report:
    return fixture_report()


def test_every_planned_image_gets_its_status(report: Report) -> None:
    statuses = {r.id: r.status for r in report.rows if r.status != "skipped"}
    assert statuses == EXPECTED
    skipped = [r for r in report.rows if r.status == "skipped"]
    assert skipped and all(r.detail.startswith("excluded by") for r in skipped)
    assert report.counts() == {"known-good": 1, "passed": 1, "gpu-skipped": 1, "failed": 1, "not-built": 1, "skipped": len(skipped)}
    assert set(report.counts()) == set(STATUSES)


def test_the_known_good_row_carries_digest_and_host(report: Report) -> None:
    row = next(r for r in report.rows if r.id == KNOWN_GOOD)
    assert row.digest.endswith("@sha256:" + "0123456789abcdef" * 4)
    assert row.detail == "on NVIDIA H200, driver 580.159.04"
    assert row.runs_on == RUNS_ON, "torch 2.5.1 cu124's kernels (gpu_arch.yaml), CUDA 12.4's driver floor"
    assert all(r.runs_on == "" for r in report.rows if r.id != KNOWN_GOOD), "only a known-good record says what it runs on"
    failed = next(r for r in report.rows if r.id == FAILED)
    assert "cuDNN" in failed.detail


def test_markdown_has_the_grid_and_is_deterministic(report: Report) -> None:
    text = render_markdown(report)
    assert text == render_markdown(fixture_report())
    grid = [line for line in text.splitlines() if line.startswith("| cuda12.4-ubuntu22.04 |")]
    assert grid and "2.5.1 py3.11 (known-good)" in grid[0]
    assert "| tensorflow2.21.0-cu128-py3.12-ubuntu24.04 | tensorflow 2.21.0 | CUDA 12.8.1 | 3.12 | failed |" in text
    assert "## Skipped by the rules" in text
    assert "| status | runs on | platform | size MB |" in text
    assert f"| known-good | {RUNS_ON.replace('>', '&gt;')} | linux/amd64 | 917 |" in text


def test_html_escapes_what_it_shows(report: Report) -> None:
    page = render_html(report)
    assert "<script" not in page
    assert "the &lt;cuDNN&gt; library" in page and "<cuDNN>" not in page
    assert page.count('data-status="known-good" data-id=') == 1
    assert "<th>runs on</th>" in page and f'<td class="runs-on">{RUNS_ON.replace(">", "&gt;")}</td>' in page


@pytest.mark.parametrize(
    "broken",
    [
        {"diagnoses": ["x"]},
        {"failures": 5},
        {"diagnoses": {"a": 1}, "failures": [{"x": 1}]},
        {"verdict": "passed", "gpu": "x"},
        {"verdict": "passed", "gpu": None},
    ],
)
def test_a_results_file_of_the_wrong_shape_does_not_stop_the_report(broken: dict[str, Any], tmp_path: Path) -> None:
    """A hand-edited build/results/<id>.json was an AttributeError or TypeError traceback: now the
    typed reader refuses it in one line naming the file, and the report shows the image as untested."""
    ws = Workspace(GOLDEN_MATRIX)
    specs = ws.selected(None, use_default=False)
    spec = next(s for s in specs if s.id == FAILED)
    path = results.write(tmp_path, smoke(FAILED, "failed", content_hash=spec.content_hash))
    doc = {**json.loads(path.read_text()), **broken}
    with pytest.raises(UserError) as refused:
        results.from_json(doc, str(path))
    assert str(refused.value).startswith(f"{path}: ") and "\n" not in str(refused.value)
    text = dump_json(doc)  # bound to the run as the test run binds its files: only the shape is wrong
    path.write_text(text)
    (tmp_path / results.INDEX).write_text(json.dumps({"schema": 1, "sha256": {FAILED: hashlib.sha256(text.encode()).hexdigest()}}))
    found = {FAILED: r} if (r := gate.read_result(tmp_path, FAILED)) else {}
    report = build_report(ws.decided, specs, found, [], {})
    row = next(r for r in report.rows if r.id == FAILED)
    assert row.status == "not-built" and len(row.detail) <= 300
    render_markdown(report)


def test_the_size_says_what_the_image_shares_with_its_line() -> None:
    """build.json's shared MB (engine/sizes.py line_shares) beside the size, in both renderings."""
    base = fixture_report()
    ws = Workspace(GOLDEN_MATRIX)
    built = build_report(ws.decided, ws.selected(None, use_default=False), {}, [], {PASSED: 432.0}, shared={PASSED: 120.0})
    assert {r.id: r.shared_mb for r in built.rows if r.shared_mb is not None} == {PASSED: 120.0}
    shared = replace(base, rows=tuple(replace(r, shared_mb=120.0) if r.id == PASSED else r for r in base.rows))
    assert f"| {PASSED} |" in render_markdown(shared) and "| 432 (120 shared) |" in render_markdown(shared)
    assert "432 (120 shared)" in render_html(shared)
    assert "shared)" not in render_markdown(base), "no shared MB said, none shown"
