"""End-of-life dates (compat/data/lifecycle.yaml): the table's guards, an image's dates, a line past
its date flagged (pull warns; the nightly's part is in test_usecase_nightly.py)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from builder.compat import lifecycle
from builder.errors import UserError
from builder.usecases import pull as pulling
from tests.catalog_fixtures import record


def test_the_shipped_table_has_sourced_dates_for_every_python_and_os_the_matrix_uses() -> None:
    table = lifecycle.load()
    for kind, line in (("python", "3.11"), ("python", "3.12"), ("os", "debian12"), ("os", "ubuntu22.04"), ("os", "ubuntu24.04")):
        found = table.find(kind, line)
        assert found is not None and found.source, (kind, line)
    assert table.find("python", "3.11") == lifecycle.EndOfLife("python", "3.11", dt.date(2027, 10, 31), ("PY_CYCLE",))


def test_an_images_dates_and_an_expired_line_flagged() -> None:
    dates = lifecycle.for_image("3.11.2", "debian12", "13.0", {"x": "1.2.3"})
    assert [(e.kind, e.line) for e in dates] == [("python", "3.11"), ("os", "debian12"), ("cuda", "13.0")], (
        "soonest first; unknown lines have none"
    )
    assert lifecycle.past(dates, dt.date(2027, 10, 31)) == ()
    assert [e.line for e in lifecycle.past(dates, dt.date(2027, 11, 1))] == ["3.11"]
    assert lifecycle.to_json(dates) == {"python 3.11": "2027-10-31", "os debian12": "2028-06-30", "cuda 13.0": "2029-02-28"}
    assert pulling.end_of_life_note(record("numba0.68.0-cpu-py3.11-debian12"), dt.date(2026, 12, 1)) == ""
    note = pulling.end_of_life_note(record("numba0.68.0-cpu-py3.11-debian12"), dt.date(2028, 7, 1))
    assert note.startswith("warning: Python 3.11 (end of life 2027-10-31), debian12 (end of life 2028-06-30) is past")


def test_every_framework_line_the_matrix_plans_has_a_sourced_end_of_life() -> None:
    """A new release line in matrix.yaml without its row (first release date, SPEC 0 window) fails here."""
    from builder.workspace import Workspace

    table = lifecycle.load()
    planned = Workspace.locate(str(Path(__file__).resolve().parents[1] / "matrix.yaml")).plan.images
    lines = {(name, lifecycle.line_of(version)) for spec in planned for name, version in spec.versions.items()}
    missing = sorted(str(line) for line in lines if table.find(line[0], line[1]) is None)
    assert missing == []
    assert table.find("torch", "2.14") == lifecycle.EndOfLife("torch", "2.14", dt.date(2028, 9, 2), ("SPEC0", "PYPI_RELEASES"))
    assert table.find("cuda", "13.0") == lifecycle.EndOfLife("cuda", "13.0", dt.date(2029, 2, 28), ("S4", "S5", "S24"))
    assert table.find("cuda", "12.5") is None, "R555 has no published end of life: no row, never a guess"


def test_a_past_framework_or_cuda_line_is_flagged_by_pull() -> None:
    expired = lifecycle.past(lifecycle.for_image("3.11", "debian12", "12.8.1", {"torch": "2.5.1"}), dt.date(2026, 12, 2))
    assert [str(e) for e in expired] == ["CUDA 12.8 (end of life 2026-08-31)", "torch 2.5 (end of life 2026-10-17)"]


def test_month_arithmetic_clamps_to_the_months_end() -> None:
    assert lifecycle.add_months(dt.date(2024, 2, 29), 24) == dt.date(2026, 2, 28)
    assert lifecycle.add_months(dt.date(2026, 8, 31), 6) == dt.date(2027, 2, 28)
    assert lifecycle.add_months(dt.date(2026, 11, 15), 2) == dt.date(2027, 1, 15)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            'cuda:\n  - {line: "12.8", branch: R570, branch_eol: "2026-02", eol: "2026-09-30", source: [S24]}\nframeworks: {}',
            r"cuda line 12.8: eol 2026-09-30 disagrees with its policy, which gives 2026-08-31",
        ),
        (
            'cuda: []\nframeworks:\n  torch:\n    - {line: "2.5", released: "2024-10-17", eol: "2026-10-18", source: [SPEC0]}',
            r"torch line 2.5: eol 2026-10-18 disagrees",
        ),
        (
            'cuda: []\nframeworks:\n  torch:\n    - {line: "2.5", released: "Oct 2024", eol: "2026-10-18", source: [SPEC0]}',
            r"released 'Oct 2024' is not a date",
        ),
        (
            'cuda: []\nframeworks:\n  torch:\n    - {line: "2.5", released: "2024W427", eol: "2026-10-18", source: [SPEC0]}',
            r"released '2024W427' is not a date",
        ),
        (
            'cuda:\n  - {line: "12.8", branch: R570, branch_eol: "202602", eol: "2026-09-30", source: [S24]}\nframeworks: {}',
            r"branch_eol '202602' is not a date",
        ),
        ('cuda: []\nframeworks:\n  pytorch:\n    - {line: "2.5", eol: "2026-10-18", source: [SPEC0]}', r"unknown framework 'pytorch'"),
    ],
)
def test_a_date_that_disagrees_with_its_policy_or_an_unknown_framework_is_refused(tmp_path: Path, section: str, message: str) -> None:
    path = tmp_path / "lifecycle.yaml"
    path.write_text(f"schema: 1\npython: []\nos: []\n{section}\n")
    with pytest.raises(UserError, match=message) as caught:
        lifecycle.load(path)
    assert caught.value.file == str(path) and caught.value.line is not None


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ('  - {line: "3.11", eol: "2027-10"}', r"row has no source"),
        ('  - {line: "3.11", eol: "Oct 2027", source: [PY_CYCLE]}', r"eol 'Oct 2027' is not a date like 2027-10-31"),
        ('  - {line: "3.11", eol: "2027-10-31", source: [NOPE]}', r"unknown source 'NOPE'"),
        # issue 37: what date.fromisoformat takes besides YYYY-MM-DD (the week date as a day nobody wrote)
        ('  - {line: "3.11", eol: "20271031", source: [PY_CYCLE]}', r"eol '20271031' is not a date like 2027-10-31"),
        ('  - {line: "3.11", eol: 20271031, source: [PY_CYCLE]}', r"eol 20271031 is not a date like 2027-10-31"),
        ('  - {line: "3.11", eol: "2027-W44-7", source: [PY_CYCLE]}', r"eol '2027-W44-7' is not a date like 2027-10-31"),
        ('  - {line: "3.11", eol: "２０２７-10-31", source: [PY_CYCLE]}', r"is not a date like 2027-10-31"),
    ],
)
def test_a_broken_table_is_refused_naming_the_line(tmp_path: Path, row: str, message: str) -> None:
    path = tmp_path / "lifecycle.yaml"
    path.write_text(f"schema: 1\npython:\n{row}\nos: []\ncuda: []\nframeworks: {{}}\n")
    with pytest.raises(UserError, match=message) as caught:
        lifecycle.load(path)
    assert caught.value.line == 3


def test_a_line_listed_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lifecycle.yaml"
    row = '  - {line: debian12, eol: "2028-06-30", source: [DEB_LTS]}'
    path.write_text(f"schema: 1\npython: []\nos:\n{row}\n{row}\ncuda: []\nframeworks: {{}}\n")
    with pytest.raises(UserError, match="os line debian12 appears twice"):
        lifecycle.load(path)


def test_the_plan_json_shows_each_images_end_of_life_but_image_json_does_not() -> None:
    from builder.render.formats import image_entry, plan_json
    from builder.workspace import Workspace

    ws = Workspace.locate(str(Path(__file__).resolve().parents[1] / "matrix.yaml"))
    (spec,) = ws.selected("id=numba0.68.0-cpu-py3.11-debian12", use_default=False)
    (entry,) = plan_json((spec,), ())["images"]
    assert entry["end_of_life"] == {"python 3.11": "2027-10-31", "os debian12": "2028-06-30", "numba 0.68": "2028-09-30"}
    assert "end_of_life" not in image_entry(spec), "a date passing never changes images/ or a content hash"


def test_the_report_lists_the_planned_lines_end_of_life_and_flags_a_past_one() -> None:
    from builder.report.markdown import render_markdown
    from builder.report.model import EndOfLifeRow, build_report
    from builder.workspace import Workspace

    ws = Workspace.locate(str(Path(__file__).resolve().parents[1] / "matrix.yaml"))
    specs = ws.selected("id=numba0.68.0-cpu-py3.11-debian12", use_default=False)
    report = build_report(ws.decided, specs, {}, [], {}, today=dt.date(2027, 11, 1))
    assert report.end_of_life == (
        EndOfLifeRow("Python 3.11", "2027-10-31", 1, True),
        EndOfLifeRow("debian12", "2028-06-30", 1, False),
        EndOfLifeRow("numba 0.68", "2028-09-30", 1, False),
    )
    text = render_markdown(report)
    assert "## End of life" in text and "| Python 3.11 | 2027-10-31 | 1 | past |" in text and "| debian12 | 2028-06-30 | 1 |  |" in text
