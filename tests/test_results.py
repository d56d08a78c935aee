"""The typed results end to end: one Verdict and one set of good verdicts, the probe's report and
build.json read back by typed readers that refuse a malformed file in one line naming it, and the
Workspace's one results store."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from builder.catalog import records as catalog_records
from builder.model import probe_report, results
from builder.nightly.compare import classify
from builder.probes import hello_gpu
from builder.publish import gate
from builder.util.errors import UserError
from builder.workspace import Workspace

RunCli = Callable[..., Result]


def probe_doc() -> dict[str, Any]:
    """A report with every key hello-gpu writes: torch failed on a CUDA image without a GPU, jax not installed."""
    torch = hello_gpu.framework_result("no-such-framework", 1.0, [], False)  # a not-installed entry: every key
    torch.update(
        framework="torch",
        status="failed",
        version="2.14.1+cu130",
        build={"cuda": "13.0", "hip": None, "cudnn": 92400},
        devices=[{"name": "NVIDIA H200", "capability": "9.0", "memory_gb": 139.8}],
        cpu_check={"ok": True, "max_abs_err": 0.0, "detail": "64x64 float32 matmul on the CPU matches the reference"},
        offline=[{"name": "built for CUDA", "ok": True, "detail": "torch.version.cuda = 13.0"}],
        cuda_build="13.0",
        reason="CUDA check failed without a GPU",
        diagnosis={"cause": "the cuDNN library is not in the image", "fix": "install nvidia-cudnn"},
        seconds=4.2,
    )
    jax = hello_gpu.framework_result("no-such-framework", 1.0, [], False)
    jax.update(
        framework="jax", build={"plugins": {"jax-cuda13-plugin": "0.10.2"}, "default_backend": "cpu", "jaxlib": "0.10.2", "x": ["a"]}
    )
    return {
        "probe": "hello-gpu",
        "schema": hello_gpu.SCHEMA,
        "host": {"python": "3.12.3", "platform": "Linux", "gpu_devices": [], "nvidia_smi": None},
        "frameworks": {"torch": torch, "jax": jax},
        "cuda": {
            "checks": [
                {"name": "cudnn", "expected": "9.24.0.43", "found": "9.24.0", "library": "/x/libcudnn.so.9", "ok": True, "detail": "ok"},
                {"name": "nvrtc compiles a kernel", "ok": False, "detail": "OSError: no"},
            ],
            "ok": False,
            "diagnosis": None,
        },
        "summary": {"passed": 0, "failed": 1, "skipped": 0, "not-installed": 1},
        "ok": False,
    }


def test_the_probe_report_reads_typed_and_writes_the_probes_own_keys() -> None:
    doc = probe_doc()
    report = probe_report.from_json(copy.deepcopy(doc), "probe.json")
    torch = report.frameworks["torch"]
    assert (torch.status, torch.built("cudnn"), torch.built("hip"), torch.cuda_build) == ("failed", "92400", None, "13.0")
    assert torch.diagnosis == probe_report.Diagnosis("the cuDNN library is not in the image", "install nvidia-cudnn")
    jax = report.frameworks["jax"]  # its plugins are name -> version, as hello_gpu.dists() gives them
    assert jax.build["plugins"] == {"jax-cuda13-plugin": "0.10.2"} and jax.build["x"] == ("a",) and jax.built("plugins") is None
    assert [c.name for c in report.cuda.checks] == ["cudnn", "nvrtc compiles a kernel"] and report.cuda.checks[0].found == "9.24.0"
    written = json.loads(json.dumps(report.to_json()))
    assert written["frameworks"] == doc["frameworks"]  # the probe's own keys, each value as it wrote it
    assert {k: v for k, v in written.items() if k != "cuda"} == {k: v for k, v in doc.items() if k != "cuda"}
    nvrtc = written["cuda"]["checks"][1]  # a library check's keys: null where the probe wrote none
    assert (
        written["cuda"]["checks"][0] == doc["cuda"]["checks"][0]
        and {k: v for k, v in nvrtc.items() if v is not None} == doc["cuda"]["checks"][1]
    )
    assert probe_report.from_json(written, "again") == report


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.pop("frameworks"), "it lacks 'frameworks' or 'host'"),
        (lambda d: d["frameworks"]["torch"].update(status="ok"), "frameworks.torch.status 'ok' is not one of"),
        (lambda d: d["frameworks"]["torch"].update(build=["cuda"]), "'frameworks.torch.build' must be an object"),
        (lambda d: d["frameworks"]["jax"]["build"].update(plugins={"p": 1}), "'frameworks.jax.build.plugins.p' must be text"),
        (lambda d: d["frameworks"]["jax"]["build"].update(plugins=[1]), "'frameworks.jax.build.plugins' must be text, a number"),
        (lambda d: d["frameworks"]["torch"].update(offline={"name": "x"}), "'frameworks.torch.offline' must be a list of objects"),
        (lambda d: d["frameworks"]["torch"].update(diagnosis={"cause": 1}), "'frameworks.torch.diagnosis.cause' must be text"),
        (lambda d: d["frameworks"]["torch"].update(seconds=float("inf")), "'frameworks.torch.seconds' must be a number"),
        (lambda d: d["cuda"].update(ok="yes"), "'cuda.ok' must be true or false"),
        (lambda d: d["host"].update(python=3.12), "'host.python' must be text"),
        (lambda d: d.update(summary={"failed": "1"}), "'summary.failed' must be a whole number"),
        (lambda d: d["frameworks"]["torch"].pop("status"), "frameworks.torch.status 'None' is not one of"),
        (lambda d: d["frameworks"]["torch"].update(framework=7), "'frameworks.torch.framework' must be text"),
        (lambda d: d["frameworks"]["torch"].update(devices=[{"memory_gb": "80"}]), "'frameworks.torch.devices.memory_gb' must be a number"),
        (lambda d: d["cuda"].update(checks=[{"name": "cudnn", "library": 1}]), "'cuda.checks.library' must be text"),
        (lambda d: d["host"].update(nvidia_smi={"name": 1}), "'host.nvidia_smi.name' must be text"),
        (lambda d: d.update(schema="1"), "'schema' must be a whole number"),
    ],
)
def test_a_probe_report_of_the_wrong_shape_is_one_line_naming_its_file(edit: Callable[[dict[str, Any]], object], message: str) -> None:
    doc = probe_doc()
    edit(doc)
    with pytest.raises(UserError, match=message) as caught:
        probe_report.from_json(doc, "build/results/x/probe.json")
    assert str(caught.value).startswith("build/results/x/probe.json: not a hello-gpu report: ") and "\n" not in str(caught.value)


def test_the_good_verdicts_are_defined_once() -> None:
    """`builder test`/`run` exit codes, the nightly's comparison, the gate and the catalog all use results.GOOD."""
    assert results.GOOD == ("passed", "gpu-skipped") and set(results.GOOD) < set(results.VERDICTS)
    assert catalog_records.VERDICTS is results.GOOD
    assert [classify("failed", v) for v in results.GOOD] == ["fixed", "fixed"] and classify("passed", "failed") == "regression"
    assert results.publishable("passed", False) and not results.publishable("gpu-skipped", False)
    assert results.publishable("gpu-skipped", True) and not results.publishable("failed", True)


def test_build_json_is_read_typed_and_a_malformed_one_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "build.json"
    assert results.read_builds(path) == ()
    results.write_builds(
        path, [{"id": "a", "status": "built", "sizes": {"image_mb": 917.0, "venv_mb": 12.0}}, {"id": "b", "status": "failed"}]
    )
    assert results.read_builds(path) == (results.Built("a", "built", 917.0), results.Built("b", "failed", None))
    for text in ('{"id": "a"}', '[{"id": "a", "status": "built", "sizes": {"image_mb": "big"}}]', "[{", '[{"status": "built"}]'):
        path.write_text(text)
        with pytest.raises(UserError) as caught:
            results.read_builds(path)
        assert str(caught.value).startswith(f"{path}") and "\n" not in str(caught.value)


def test_the_report_notes_a_malformed_build_json_instead_of_ignoring_it(
    cli: RunCli, write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    matrix = write_matrix()
    store = Workspace(matrix).store
    store.build_summary.parent.mkdir(parents=True)
    store.build_summary.write_text('[{"id": "x", "sizes": 5}]')
    result = cli("--matrix", str(matrix), "report", "--markdown", str(tmp_path / "m.md"), "--html", str(tmp_path / "i.html"))
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: image sizes left out: ")]
    assert len(notes) == 1 and str(store.build_summary) in notes[0], result.stderr


def test_the_workspace_owns_the_results_store(tmp_path: Path) -> None:
    store = Workspace(tmp_path / "matrix.yaml").store
    assert store.results == tmp_path / "build" / "results" and store.build_summary == store.results / "build.json"
    assert store.history == tmp_path / "build" / "nightly" / "last.json" and store.nightly_summary.parent == store.nightly
    assert store.catalog().root == tmp_path / "catalog" and not store.catalog().named
    assert store.catalog("elsewhere", must_exist=True).named
    assert (store.report_markdown, store.report_html) == (
        tmp_path / "docs" / "support-matrix.md",
        tmp_path / "build" / "report" / "index.html",
    )


def test_a_result_reads_back_typed_from_an_old_file_without_a_host(tmp_path: Path) -> None:
    """Files written before the typed records kept `host: {}` for a run that never started: None now."""
    from tests.catalog_fixtures import smoke

    doc = smoke("x").to_json()
    doc["host"] = {}
    assert results.from_json(doc, "x.json").host is None
    results.write(tmp_path, smoke("x"))
    assert gate.read_result(tmp_path, "x") == smoke("x")


def test_the_report_notes_a_smoke_result_it_cannot_vouch_for(cli: RunCli, write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    """An edited or malformed build/results/<id>.json is shown as untested, and the report says which
    file and why, instead of quietly listing the image as never tested."""
    from tests.catalog_fixtures import smoke

    matrix = write_matrix()
    ws = Workspace(matrix)
    (spec,) = ws.selected(None, use_default=False)
    results.write(ws.store.results, smoke(spec.id))
    path = results.path_of(ws.store.results, spec.id)
    path.write_text(path.read_text().replace('"failures"', ' "failures"'))  # an edit the run index does not know
    args = ("--matrix", str(matrix), "report", "--markdown", str(tmp_path / "m.md"), "--html", str(tmp_path / "i.html"))
    result = cli(*args)
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: smoke result left out, shown as untested: ")]
    assert len(notes) == 1 and str(path) in notes[0] and "changed since the test run wrote it" in notes[0], result.stderr
    results.write(ws.store.results, smoke(spec.id))  # the test run's own file again: no note
    assert "note:" not in cli(*args).stderr
