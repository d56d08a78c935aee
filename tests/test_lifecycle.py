"""End of life (compat/data/lifecycle.yaml): vendors' dates apart from this project's support window,
the table's guards, an image's dates, a line past its date flagged (pull warns, plan warns; the
nightly's part is in test_usecase_nightly.py)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from builder.compat import lifecycle
from builder.model.plan import Matrix
from builder.usecases import pull as pulling
from builder.util.errors import UserError
from tests.catalog_fixtures import record

ROOT = Path(__file__).resolve().parents[1]
RunCli = Callable[..., Result]
WriteMatrix = Callable[..., Path]


def test_the_shipped_table_has_sourced_dates_for_every_python_and_os_the_matrix_uses() -> None:
    table = lifecycle.load()
    for kind, line in (
        ("python", "3.11"),
        ("python", "3.12"),
        ("python", "3.13"),
        ("os", "debian12"),
        ("os", "debian13"),
        ("os", "ubuntu22.04"),
        ("os", "ubuntu24.04"),
    ):
        found = table.find(kind, line)
        assert found is not None and found.source and not found.policy, (kind, line)
    assert table.find("python", "3.11") == lifecycle.EndOfLife("python", "3.11", dt.date(2027, 10, 31), ("PY_CYCLE",))
    assert table.find("os", "debian12") == lifecycle.EndOfLife("os", "debian12", dt.date(2028, 6, 30), ("DEB_LTS",))
    assert table.find("os", "debian13") == lifecycle.EndOfLife("os", "debian13", dt.date(2030, 6, 30), ("DEB_LTS",))
    assert table.find("driver", "R535") == lifecycle.EndOfLife("driver", "R535", dt.date(2026, 6, 30), ("S24", "S24b"))


def test_no_date_a_vendor_does_not_publish() -> None:
    """NVIDIA publishes no end of life for a CUDA minor (CUDA 12.8's 2026-08-31 was the project's own
    sum of a branch's end and an image-tag retention): the table has no CUDA section at all, and a
    framework line's date is this project's window, never called an end of life."""
    table = lifecycle.load()
    assert not any(kind == "cuda" for kind, _ in table.rows)
    frameworks = [e for e in table.rows.values() if e.kind not in lifecycle.VENDOR_SECTIONS]
    assert frameworks and all(e.policy and "SPEC0" in e.source for e in frameworks)
    assert all("end of life" not in str(e).replace("no vendor end of life", "") for e in frameworks)
    vendor = [e for e in table.rows.values() if e.kind in lifecycle.VENDOR_SECTIONS]
    assert vendor and not any(e.policy or "SPEC0" in e.source for e in vendor)


def test_an_images_dates_and_an_expired_line_flagged() -> None:
    dates = lifecycle.for_image("3.11.2", "debian12", {"x": "1.2.3", "torch": "2.14.1+cu130"})
    assert [(e.kind, e.line) for e in dates] == [("python", "3.11"), ("os", "debian12"), ("torch", "2.14")], (
        "soonest first; unknown lines have none"
    )
    assert lifecycle.past(dates, dt.date(2027, 10, 31)) == ()
    assert [e.line for e in lifecycle.past(dates, dt.date(2027, 11, 1))] == ["3.11"]
    assert lifecycle.to_json(dates) == {"python 3.11": "2027-10-31", "os debian12": "2028-06-30"}
    assert lifecycle.window_json(dates) == {"torch 2.14": "2028-09-02"}
    assert pulling.end_of_life_note(record("numba0.68.0-cpu-py3.11-debian12"), dt.date(2026, 12, 1)) == ""
    note = pulling.end_of_life_note(record("numba0.68.0-cpu-py3.11-debian12"), dt.date(2028, 7, 1))
    assert note.startswith("warning: Python 3.11 (end of life 2027-10-31), debian12 (end of life 2028-06-30) is past")


def test_every_framework_line_the_matrix_plans_has_a_sourced_window() -> None:
    """A new release line in matrix.yaml without its row (first release date, SPEC 0 window) fails here."""
    from builder.workspace import Workspace

    table = lifecycle.load()
    planned = Workspace.locate(str(ROOT / "matrix.yaml")).plan.images
    versions = {(name, version) for spec in planned for name, version in spec.versions.items()}
    missing = sorted(f"{name} {version}" for name, version in versions if table.release(name, version) is None)
    assert missing == []
    assert table.find("torch", "2.14") == lifecycle.EndOfLife("torch", "2.14", dt.date(2028, 9, 2), ("SPEC0", "PYPI_RELEASES"), True)


def test_jax_0_4_35_is_its_own_line() -> None:
    """Before 0.5.0 every jax 0.4.N was a feature release: 0.4.35 (2024-10-22) is not 0.4.0 (2022-12-12)."""
    found = lifecycle.load().release("jax", "0.4.35")
    assert found is not None and (found.line, found.date) == ("0.4.35", dt.date(2026, 10, 22))
    assert lifecycle.load().release("jax", "0.4.30") is None, "no row for another 0.4.N: no date, never a guess"
    assert lifecycle.load().release("jax", "0.12.0.1") == lifecycle.load().find("jax", "0.12")


def test_a_past_window_is_a_note_a_past_vendor_date_a_warning() -> None:
    """pull warns on a vendor's end of life, and only notes this project's window: the image still works."""
    dates = lifecycle.for_image("3.11", "debian12", {"torch": "2.5.1"})
    window = lifecycle.past(dates, dt.date(2026, 12, 2))
    assert [str(e) for e in window] == ["torch 2.5 (this project's 24-month support window ends 2026-10-17; no vendor end of life)"]
    assert lifecycle.past(dates, dt.date(2026, 12, 2), vendor_only=True) == ()
    note = pulling.end_of_life_note(record("torch2.5.1-cpu-py3.11-debian12", frameworks={"torch": "2.5.1"}), dt.date(2026, 12, 2))
    assert note.startswith("note: torch 2.5 (this project's") and "warning" not in note


def test_month_arithmetic_clamps_to_the_months_end() -> None:
    assert lifecycle.add_months(dt.date(2024, 2, 29), 24) == dt.date(2026, 2, 28)
    assert lifecycle.add_months(dt.date(2026, 8, 31), 6) == dt.date(2027, 2, 28)
    assert lifecycle.add_months(dt.date(2026, 11, 15), 2) == dt.date(2027, 1, 15)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            'policy:\n  torch:\n    - {line: "2.5", released: "2024-10-17", until: "2026-10-18", source: [SPEC0]}',
            r"torch line 2.5: until 2026-10-18 is not released \+ 24 months \(2026-10-17\)",
        ),
        (
            'policy:\n  torch:\n    - {line: "2.5", released: "Oct 2024", until: "2026-10-18", source: [SPEC0]}',
            r"released 'Oct 2024' is not a quoted date",
        ),
        (
            'policy:\n  pytorch:\n    - {line: "2.5", released: "2024-10-17", until: "2026-10-17", source: [SPEC0]}',
            r"unknown framework 'pytorch'",
        ),
        ('policy:\n  torch:\n    - {line: "2.5", eol: "2026-10-17", source: [SPEC0]}', r"unknown key\(s\) \['eol'\]"),
        ('cuda:\n  - {line: "12.8", eol: "2026-08-31", source: [S24]}\npolicy: {}', r"unknown key\(s\) \['cuda'\]"),
    ],
)
def test_a_window_that_disagrees_with_its_policy_or_a_section_nobody_publishes_is_refused(
    tmp_path: Path, section: str, message: str
) -> None:
    path = tmp_path / "lifecycle.yaml"
    path.write_text(f"schema: 1\npython: []\nos: []\ndriver: []\n{section}\n")
    with pytest.raises(UserError, match=message) as caught:
        lifecycle.load(path)
    assert caught.value.file == str(path) and caught.value.line is not None


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ('  - {line: "3.11", eol: "2027-10"}', r"row has no source"),
        ('  - {line: "3.11", eol: "Oct 2027", source: [PY_CYCLE]}', r"eol 'Oct 2027' is not a quoted date like \"2027-10-31\""),
        ('  - {line: "3.11", eol: "20271031", source: [PY_CYCLE]}', r"eol '20271031' is not a quoted date"),
        ('  - {line: "3.11", eol: "2027-02-30", source: [PY_CYCLE]}', r"eol '2027-02-30' is not a day of the calendar"),
        ('  - {line: "3.11", eol: 2027-10-31, source: [PY_CYCLE]}', r"is not a quoted date"),
        ('  - {line: "3.11", eol: "2027-10-31", source: [NOPE]}', r"unknown source 'NOPE'"),
        # issue 37: what date.fromisoformat takes besides YYYY-MM-DD (the week date as a day nobody wrote)
        ('  - {line: "3.11", eol: "20271031", source: [PY_CYCLE]}', r"eol '20271031' is not a quoted date like \"2027-10-31\""),
        ('  - {line: "3.11", eol: 20271031, source: [PY_CYCLE]}', r"eol 20271031 is not a quoted date like \"2027-10-31\""),
        ('  - {line: "3.11", eol: "2027-W44-7", source: [PY_CYCLE]}', r"eol '2027-W44-7' is not a quoted date like \"2027-10-31\""),
        ('  - {line: "3.11", eol: "２０２７-10-31", source: [PY_CYCLE]}', r"is not a quoted date like \"2027-10-31\""),
    ],
)
def test_a_broken_table_is_refused_naming_the_line(tmp_path: Path, row: str, message: str) -> None:
    path = tmp_path / "lifecycle.yaml"
    path.write_text(f"schema: 1\npython:\n{row}\nos: []\ndriver: []\npolicy: {{}}\n")
    with pytest.raises(UserError, match=message) as caught:
        lifecycle.load(path)
    assert caught.value.line == 3


def test_a_line_listed_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lifecycle.yaml"
    row = '  - {line: debian12, eol: "2028-06-30", source: [DEB_LTS]}'
    path.write_text(f"schema: 1\npython: []\nos:\n{row}\n{row}\ndriver: []\npolicy: {{}}\n")
    with pytest.raises(UserError, match="os line debian12 appears twice"):
        lifecycle.load(path)


def test_the_plan_json_shows_vendor_dates_apart_from_this_projects_window_but_image_json_does_not() -> None:
    from builder.render.formats import image_entry, plan_json
    from builder.workspace import Workspace

    ws = Workspace.locate(str(ROOT / "matrix.yaml"))
    (spec,) = ws.selected("id=numba0.68.0-cpu-py3.11-debian12", use_default=False)
    (entry,) = plan_json((spec,), ())["images"]
    assert entry["end_of_life"] == {"python 3.11": "2027-10-31", "os debian12": "2028-06-30"}
    assert entry["support_window"] == {"numba 0.68": "2028-09-30"}
    assert "end_of_life" not in image_entry(spec).to_json(), "a date passing never changes images/ or a content hash"


def test_the_report_lists_vendor_dates_apart_from_this_projects_window_and_flags_a_past_one() -> None:
    from builder.report.markdown import render_markdown
    from builder.report.model import EndOfLifeRow, build_report
    from builder.workspace import Workspace

    ws = Workspace.locate(str(ROOT / "matrix.yaml"))
    specs = ws.selected("id=numba0.68.0-cpu-py3.11-debian12", use_default=False)
    report = build_report(ws.decided, specs, {}, [], {}, today=dt.date(2027, 11, 1))
    assert report.end_of_life == (
        EndOfLifeRow("Python 3.11", "2027-10-31", 1, True),
        EndOfLifeRow("debian12", "2028-06-30", 1, False),
        EndOfLifeRow("numba 0.68", "2028-09-30", 1, False, policy=True),
    )
    text = render_markdown(report)
    vendor, window = text.split("## End of life")[1].split("## This project's support window")
    assert "| Python 3.11 | 2027-10-31 | 1 | past |" in vendor and "| debian12 | 2028-06-30 | 1 |  |" in vendor
    assert "numba" not in vendor and "| numba 0.68 | 2028-09-30 | 1 |  |" in window


def test_plan_warns_about_an_image_past_a_vendor_date_and_not_about_a_window() -> None:
    from builder.workspace import Workspace

    ws = Workspace.locate(str(ROOT / "matrix.yaml"))
    specs = ws.selected("id=numba0.68.0-cpu-py3.11-debian12", use_default=False) + ws.selected(
        "id=torch2.5.1-cpu-py3.12-ubuntu24.04", use_default=False
    )
    assert lifecycle.past_vendor_warnings(specs, dt.date(2026, 12, 4)) == []  # torch 2.5's window ended: no warning
    (warning,) = lifecycle.past_vendor_warnings(specs, dt.date(2027, 11, 1))
    assert warning.startswith("Python 3.11 (end of life 2027-10-31) is past: 1 planned image(s) use it (numba0.68.0-cpu-py3.11-debian12)")


def test_the_plan_command_prints_the_warning_on_stderr(cli: RunCli, write_matrix: WriteMatrix) -> None:
    """Python 3.10's end of life (2026-10-31) has passed: a plan with it says so, on stderr, any format."""
    matrix = write_matrix(
        """
registry: reg.example/x
bases:
  cpu-ubuntu22.04: {vendor: cpu, os: ubuntu22.04, image: "ubuntu:22.04"}
python: ["3.10"]
frameworks: {numba: ["0.60.0"]}
stacks: {numba: [numba]}
"""
    )
    if dt.datetime.now(dt.UTC).date() <= dt.date(2026, 10, 31):
        pytest.skip("this machine's clock is before Python 3.10's end of life")
    for fmt in ("table", "json"):
        result = cli("--matrix", str(matrix), "plan", "--format", fmt)
        assert result.exit_code == 0, result.output
        assert "warning: Python 3.10 (end of life 2026-10-31) is past: 1 planned image(s) use it" in result.stderr
        assert "end of life" not in result.stdout


def test_the_support_matrix_of_the_embedded_plan_shows_both_debian_lines(embedded_matrix: Matrix) -> None:
    """Debian 12 (LTS) and Debian 13 both carry images, each with its own end of life (issue 42)."""
    from builder.report.model import end_of_life_rows
    from builder.spec.plan import make_plan

    rows = {row.line: row for row in end_of_life_rows(make_plan(embedded_matrix).images, dt.date(2026, 12, 6))}
    assert (rows["debian12"].date, rows["debian13"].date) == ("2028-06-30", "2030-06-30")
    assert rows["debian12"].images > 0 and rows["debian13"].images > 0 and not rows["debian13"].past
    assert rows["Python 3.13"].date == "2029-10-31"
