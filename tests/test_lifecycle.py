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
    assert [(e.kind, e.line) for e in dates] == [("python", "3.11"), ("os", "debian12")], "soonest first; unknown lines have none"
    assert lifecycle.past(dates, dt.date(2027, 10, 31)) == ()
    assert [e.line for e in lifecycle.past(dates, dt.date(2027, 11, 1))] == ["3.11"]
    assert lifecycle.to_json(dates) == {"python 3.11": "2027-10-31", "os debian12": "2028-06-30"}
    assert pulling.end_of_life_note(record("numba0.68.0-cpu-py3.11-debian12"), dt.date(2026, 12, 1)) == ""
    note = pulling.end_of_life_note(record("numba0.68.0-cpu-py3.11-debian12"), dt.date(2028, 7, 1))
    assert note.startswith("warning: Python 3.11 (end of life 2027-10-31), debian12 (end of life 2028-06-30) is past")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ('  - {line: "3.11", eol: "2027-10"}', r"row has no source"),
        ('  - {line: "3.11", eol: "Oct 2027", source: [PY_CYCLE]}', r"eol 'Oct 2027' is not a date like 2027-10-31"),
        ('  - {line: "3.11", eol: "2027-10-31", source: [NOPE]}', r"unknown source 'NOPE'"),
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
    assert entry["end_of_life"] == {"python 3.11": "2027-10-31", "os debian12": "2028-06-30"}
    assert "end_of_life" not in image_entry(spec), "a date passing never changes images/ or a content hash"


def test_the_report_lists_the_planned_lines_end_of_life_and_flags_a_past_one() -> None:
    from builder.report.markdown import render_markdown
    from builder.report.model import EndOfLifeRow, build_report
    from builder.workspace import Workspace

    ws = Workspace.locate(str(Path(__file__).resolve().parents[1] / "matrix.yaml"))
    specs = ws.selected("id=numba0.68.0-cpu-py3.11-debian12", use_default=False)
    report = build_report(ws.decided, specs, {}, [], {}, today=dt.date(2027, 11, 1))
    assert report.end_of_life == (EndOfLifeRow("Python 3.11", "2027-10-31", 1, True), EndOfLifeRow("debian12", "2028-06-30", 1, False))
    text = render_markdown(report)
    assert "## End of life" in text and "| Python 3.11 | 2027-10-31 | 1 | past |" in text and "| debian12 | 2028-06-30 | 1 |  |" in text
