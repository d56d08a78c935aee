"""The command line surface: --help everywhere, plan --explain, probe --json."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from builder.cli import main
from builder.compat.rules.python import OS_ONLY
from builder.frameworks import NAMES as FRAMEWORKS
from builder.workspace import Workspace
from tests.conftest import small_matrix_text

RunCli = Callable[..., Result]
WriteMatrix = Callable[..., Path]

# One image (torch 2.5.1 on CUDA 12.4.1, Python 3.11) and one short, known skip (Python 3.12 on Ubuntu 22.04).
EXPLAIN_MATRIX = small_matrix_text(python=("3.11", "3.12"))
SKIP_REASON = "ubuntu22.04 packages Python 3.10, 3.11, not 3.12" + OS_ONLY


def test_top_level_help(cli: RunCli) -> None:
    for flag in ("--help", "-h"):
        result = cli(flag)
        assert result.exit_code == 0, result.output
        assert "Usage:" in result.stdout and "--matrix PATH" in result.stdout
        for name in main.commands:
            assert name in result.stdout


@pytest.mark.parametrize("command", sorted(main.commands))
def test_each_subcommand_has_help(command: str, cli: RunCli) -> None:
    result = cli(command, "--help")
    assert result.exit_code == 0, result.output
    assert f" {command} [OPTIONS]" in result.stdout.splitlines()[0]
    assert "--help" in result.stdout


def test_documented_core_commands_exist() -> None:
    assert {"plan", "render", "probe"} <= set(main.commands)


def test_help_needs_no_matrix(tmp_path: Path, cli: RunCli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no matrix.yaml here
    assert cli("plan", "--help").exit_code == 0
    assert cli("render", "--help").exit_code == 0


def test_plan_explain_prints_skipped_reasons(cli: RunCli, write_matrix: WriteMatrix) -> None:
    matrix = write_matrix(EXPLAIN_MATRIX)
    result = cli("--matrix", str(matrix), "plan", "--explain")
    assert result.exit_code == 0, result.output
    assert "torch2.5.1-cu124-py3.11-ubuntu22.04" in result.stdout
    assert "1 skipped combinations" in result.stdout
    assert SKIP_REASON.removesuffix(OS_ONLY) in result.stdout  # the table folds the rest of the line
    assert "(Python comes from the base's OS here; another Python needs a base that brings" in result.stdout


def test_plan_without_explain_points_at_it(cli: RunCli, write_matrix: WriteMatrix) -> None:
    result = cli("--matrix", str(write_matrix(EXPLAIN_MATRIX)), "plan")
    assert result.exit_code == 0, result.output
    assert SKIP_REASON not in result.stdout
    assert "1 combinations skipped; --explain lists them with reasons" in result.stdout


def test_plan_explain_on_the_embedded_matrix(cli: RunCli, embedded_matrix_path: Path) -> None:
    result = cli("--matrix", str(embedded_matrix_path), "plan", "--explain")
    assert result.exit_code == 0, result.output
    assert "skipped combinations" in result.stdout
    assert "ubuntu24.04 packages Python 3.12, not 3.11" in result.stdout
    assert "numba has no ROCm GPU target" in result.stdout


def test_plan_json_reports_the_skip_reason(cli: RunCli, write_matrix: WriteMatrix) -> None:
    result = cli("--matrix", str(write_matrix(EXPLAIN_MATRIX)), "plan", "--format", "json")
    data = json.loads(result.stdout)
    assert data["skipped"] == [
        {
            "base": "cuda12.4-ubuntu22.04",
            "platform": "linux/amd64",
            "stack": "torch",
            "python": "3.12",
            "frameworks": {"torch": "2.5.1"},
            "reason": SKIP_REASON,
        }
    ]


def test_unknown_command_is_a_usage_error(cli: RunCli) -> None:
    result = cli("plna")
    assert result.exit_code == 2
    assert "No such command" in result.output


def test_python_dash_m_builder(root: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "builder", "--help"], cwd=root, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout


def test_probe_json_without_frameworks(root: Path, tmp_path: Path) -> None:
    """Nothing is installed in the project's venv: every framework is not-installed, and that is exit 0."""
    proc = subprocess.run(
        [str(root / ".venv" / "bin" / "builder"), "probe", "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["probe"] == "hello-gpu"
    statuses = {name: entry["status"] for name, entry in report["frameworks"].items()}
    assert set(statuses) == set(FRAMEWORKS)
    assert set(statuses.values()) == {"not-installed"}, statuses


# -- options are validated before any work ----------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["build", "-j", "0"],
        ["build", "-j", "-3"],
        ["build", "-j", "1000"],
        ["run", "-j", "0"],
        ["test", "--timeout", "0"],
        ["test", "--timeout", "-5"],
        ["run", "--timeout", "0"],
        ["probe", "--timeout", "0"],
    ],
)
def test_out_of_range_options_are_one_line_exit_2(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "builder", *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: Invalid value for") and "is not in the range" in lines[0], done.stderr


def test_a_usage_error_is_one_line(cli: RunCli) -> None:
    result = cli("render", "--bogus")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == ["error: No such option '--bogus'. Did you mean '--out'? (see `builder render --help`)"]


@pytest.mark.parametrize("command", ["build", "test", "run", "plan", "doctor"])
def test_a_selection_matching_nothing_is_exit_2_listing_what_exists(cli: RunCli, root: Path, command: str) -> None:
    result = cli("--matrix", str(root / "matrix.yaml"), command, "--select", "stack=pytorch")
    assert result.exit_code == 2, result.output
    planned = len(Workspace(root / "matrix.yaml").decided.images)
    assert result.stderr.strip().splitlines() == [
        f"error: --select 'stack=pytorch' matches none of the {planned} planned images; stack is one of: cupy, jax, numba, tensorflow, torch"
    ]


def test_a_default_selection_matching_nothing_names_the_matrix_line(
    cli: RunCli, write_matrix: Any, small_matrix: str, in_tmp: Path
) -> None:
    write_matrix(small_matrix + 'defaults:\n  select: "base=nope*"\n')
    result = cli("build")
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: matrix.yaml:14: defaults.select 'base=nope*' matches none of the 1 planned images; base is one of:"
    )


TWO_TORCH_DEFAULT = 'defaults:\n  select:\n    - "torch=2.4.1"\n    - "{second}"\n'  # the list's items: lines 15 and 16


def test_a_default_selection_list_is_the_union_of_its_expressions(write_matrix: Any, in_tmp: Path) -> None:
    path = write_matrix(small_matrix_text(torch=("2.4.1", "2.5.0", "2.5.1")) + TWO_TORCH_DEFAULT.format(second="torch=2.5.1"))
    ws = Workspace(path)
    assert ws.matrix.default_select == (("torch=2.4.1", 15), ("torch=2.5.1", 16))
    assert [s.versions["torch"] for s in ws.selected(None, use_default=True)] == ["2.4.1", "2.5.1"]
    assert len(ws.selected(None, use_default=False)) == 3  # no default asked: everything
    assert [s.versions["torch"] for s in ws.selected("torch=2.5.0", use_default=True)] == ["2.5.0"]  # --select wins


def test_a_default_list_expression_matching_nothing_names_its_own_line(cli: RunCli, write_matrix: Any, in_tmp: Path) -> None:
    write_matrix(small_matrix_text(torch=("2.4.1", "2.5.1")) + TWO_TORCH_DEFAULT.format(second="torch=2.6"))
    result = cli("build")
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: matrix.yaml:16: defaults.select 'torch=2.6' matches none of the 2 planned images; torch is one of: 2.4.1, 2.5.1"
    )
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_default_selecting_an_image_that_cannot_be_locked_is_refused(cli: RunCli, write_matrix: Any, in_tmp: Path) -> None:
    """The default job must build on a fresh machine: an image without a lock whose index matrix.yaml
    says is out of reach (`unlocked:`) is not for it. --select still builds it on purpose."""
    unlocked = 'unlocked:\n  - select: "torch=2.5.1"\n    reason: "its index is out of reach"\n'
    path = write_matrix(small_matrix_text(torch=("2.4.1", "2.5.1")) + TWO_TORCH_DEFAULT.format(second="torch=2.5.1") + unlocked)
    for command in ("build", "test", "publish", "run"):
        result = cli(command)
        assert result.exit_code == 2, (command, result.output)
        assert result.stderr.strip().splitlines() == [
            "error: matrix.yaml:16: defaults.select 'torch=2.5.1' selects torch2.5.1-cu124-py3.11-ubuntu22.04, which has no lock"
            " (matrix.yaml unlocked: its index is out of reach); the default job must build on a fresh machine:"
            " narrow the expression to locked images and build that one with --select"
        ], command
    assert [s.id for s in Workspace(path).selected("torch=2.5.1", use_default=True)] == ["torch2.5.1-cu124-py3.11-ubuntu22.04"]


def test_a_usage_error_names_the_help_to_run_under_python_m() -> None:
    """Found by the second hostile pass: run as `python -m builder`, the hint read `builder -m builder lock --help`."""
    done = subprocess.run([sys.executable, "-m", "builder", "lock", "-j", "0"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().endswith("(see `builder lock --help`)"), done.stderr
