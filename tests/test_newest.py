"""matrix.yaml `newest:`: the newest N releases of each framework that install on the bases an entry
selects, planned with no include naming them (builder/spec/newest.py), against the shipped rules."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from builder.compat.rules import table
from builder.model.plan import Plan
from builder.spec.matrix import load_matrix
from builder.spec.plan import make_plan

WriteMatrix = Callable[..., Path]

MATRIX = """\
registry: ghcr.io/example/gpu-images
bases:
  local-debian12:
    vendor: cpu
    os: debian12
    bootstrap: debootstrap
  cpu-ubuntu24.04:
    vendor: cpu
    os: ubuntu24.04
    image: ubuntu:24.04
python: ["3.11", "3.12"]
frameworks:
  torch: ["2.13.0", "2.14.1", "2.15.0"]
  jax: ["0.10.2", "0.12.0.1"]
  numba: ["0.68.0", "0.68.1"]
stacks:
  torch: [torch]
  jax: [jax]
  numba: [numba]
newest:
  - {base: local-debian12, releases: 1}
"""


def plan_of(write_matrix: WriteMatrix, text: str = MATRIX) -> Plan:
    return make_plan(load_matrix(write_matrix(text)), table())


def on(plan: Plan, base: str) -> set[str]:
    return {s.id for s in plan.images if s.base.name == base}


def skipped(plan: Plan, base: str, framework: str, version: str, python: str = "3.11") -> str:
    (found,) = [s for s in plan.skipped if s.base == base and dict(s.frameworks).get(framework) == version and s.python == python]
    return found.reason


def test_the_newest_release_that_installs_is_planned_and_the_older_ones_say_which_line_holds_them(write_matrix: WriteMatrix) -> None:
    plan = plan_of(write_matrix)
    assert on(plan, "local-debian12") == {
        "torch2.15.0-cpu-py3.11-debian12",
        "jax0.10.2-cpu-py3.11-debian12",
        "numba0.68.1-cpu-py3.11-debian12",
    }
    newest_line = MATRIX.splitlines().index("  - {base: local-debian12, releases: 1}") + 1
    for framework, version, kept in (
        ("torch", "2.13.0", "torch 2.15.0"),
        ("torch", "2.14.1", "torch 2.15.0"),
        ("numba", "0.68.0", "numba 0.68.1"),
    ):
        reason = skipped(plan, "local-debian12", framework, version)
        assert reason.startswith("older than the newest release of each framework that install on local-debian12"), reason
        assert f"matrix.yaml:{newest_line} plans ({kept})" in reason
    # jax 0.12 cannot install on Debian 12's Python 3.11: skipped with the rules' reason, and it does not count
    assert "Python" in skipped(plan, "local-debian12", "jax", "0.12.0.1") and "newest" not in skipped(
        plan, "local-debian12", "jax", "0.12.0.1"
    )
    assert "packages Python 3.11, not 3.12" in skipped(plan, "local-debian12", "numba", "0.68.1", python="3.12")


def test_bases_no_entry_selects_plan_every_release(write_matrix: WriteMatrix) -> None:
    ids = on(plan_of(write_matrix), "cpu-ubuntu24.04")
    assert {"numba0.68.0-cpu-py3.12-ubuntu24.04", "numba0.68.1-cpu-py3.12-ubuntu24.04"} <= ids
    assert {"torch2.13.0-cpu-py3.12-ubuntu24.04", "torch2.14.1-cpu-py3.12-ubuntu24.04", "torch2.15.0-cpu-py3.12-ubuntu24.04"} <= ids


def test_releases_2_keeps_the_two_newest(write_matrix: WriteMatrix) -> None:
    plan = plan_of(write_matrix, MATRIX.replace("releases: 1", "releases: 2"))
    assert {i for i in on(plan, "local-debian12") if i.startswith("torch")} == {
        "torch2.14.1-cpu-py3.11-debian12",
        "torch2.15.0-cpu-py3.11-debian12",
    }
    assert "older than the newest 2 releases" in skipped(plan, "local-debian12", "torch", "2.13.0")


def test_a_new_release_in_frameworks_replaces_the_oldest_with_no_other_edit(write_matrix: WriteMatrix) -> None:
    before = plan_of(write_matrix, MATRIX.replace('"2.14.1", "2.15.0"]', '"2.14.1"]'))
    assert "torch2.14.1-cpu-py3.11-debian12" in on(before, "local-debian12")
    after = plan_of(write_matrix)
    assert "torch2.15.0-cpu-py3.11-debian12" in on(after, "local-debian12")
    assert "torch2.14.1-cpu-py3.11-debian12" not in on(after, "local-debian12")


def test_an_include_adds_an_older_release_back_and_an_exact_pin_stays_possible(write_matrix: WriteMatrix) -> None:
    text = MATRIX + 'include:\n  - {base: local-debian12, stack: torch, torch: "2.13.0", python: "3.11"}   # kept for older hosts\n'
    plan = plan_of(write_matrix, text)
    assert {"torch2.13.0-cpu-py3.11-debian12", "torch2.15.0-cpu-py3.11-debian12"} <= on(plan, "local-debian12")
    assert "torch2.14.1-cpu-py3.11-debian12" not in on(plan, "local-debian12")
    assert not [
        s for s in plan.skipped if s.base == "local-debian12" and dict(s.frameworks).get("torch") == "2.13.0" and s.python == "3.11"
    ]


def test_an_exclude_applies_first_so_the_next_newest_is_planned(write_matrix: WriteMatrix) -> None:
    plan = plan_of(write_matrix, MATRIX + 'exclude:\n  - {base: local-debian12, torch: "2.15.0"}\n')
    assert {i for i in on(plan, "local-debian12") if i.startswith("torch")} == {"torch2.14.1-cpu-py3.11-debian12"}
    reason = skipped(plan, "local-debian12", "torch", "2.15.0")
    assert reason.startswith("excluded by ") and reason.endswith(f"matrix.yaml:{MATRIX.count(chr(10)) + 2}"), reason


def test_entries_select_like_excludes_and_the_first_that_selects_decides(write_matrix: WriteMatrix) -> None:
    text = MATRIX.replace(
        "  - {base: local-debian12, releases: 1}\n",
        "  - {base: local-debian12, stack: numba, releases: 2}\n  - {base: 'local-*', releases: 1}\n",
    )
    ids = on(plan_of(write_matrix, text), "local-debian12")
    assert {i for i in ids if i.startswith("numba")} == {"numba0.68.0-cpu-py3.11-debian12", "numba0.68.1-cpu-py3.11-debian12"}
    assert {i for i in ids if i.startswith("torch")} == {"torch2.15.0-cpu-py3.11-debian12"}
