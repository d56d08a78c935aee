"""Terminal and Markdown injection (issue 14, finding 9): values from the catalog, results, the
index and the engine never reach the terminal as control sequences or rich markup, and never add
a row, a heading or HTML to the Markdown report or the nightly summary."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from rich.console import Console

from builder.catalog.records import MeasuredAccelerator
from builder.model.results import TestedOn
from builder.nightly.compare import NightlyReport, Outcome, compare
from builder.nightly.summary import render as render_summary
from builder.report.markdown import code, text
from builder.ui.rows import RICH_ROWS, print_rows
from builder.ui.text import markup, plain
from tests.catalog_fixtures import record

RunCli = Callable[..., Result]
CLEAR = "\x1b[2J\x1b[H"
OSC8 = "\x1b]8;;https://evil.example/\x07click me\x1b]8;;\x07"
RICH = "[link=https://evil.example/]x[/link] [/] [bold red] :warning:"
HOSTILE = f"{CLEAR}{OSC8} {RICH}"
IMAGE = "torch2.5.1-cu124-py3.11-ubuntu22.04"  # the one image of the small matrix


def _hostile_record(**changes: Any) -> dict[str, Any]:
    data = record(
        IMAGE,
        host=TestedOn(HOSTILE, "1\x1b[31m", "x"),
        # the kind is one of records.VENDORS (the reader refuses others): the accelerator cell's hostile text rides on cuda
        accelerator=MeasuredAccelerator("cuda", "12.4.1", cuda="12.4[/]\x1b]0;title\x07"),
        frameworks={"torch": "2.5.1\x1b[5m"},
        python="3.11[bold]",
        published="2026 |\n# Owned\n| a | b |",
        notes=(HOSTILE,),
    ).to_json()
    return {**data, "id": IMAGE, **changes}


def _write_catalog(folder: Path, *records: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "known-good.json").write_text(json.dumps({"schema": 1, "images": list(records)}))
    return folder


def _assert_inert(output: str) -> None:
    assert "\x1b" not in output and "\x07" not in output and "\x9b" not in output and "\x9d" not in output


def test_catalog_prints_hostile_fields_as_text(cli: RunCli, tmp_path: Path) -> None:
    # (an id is an image id, refused otherwise since issue 37: the hostile text rides on the other fields)
    folder = _write_catalog(tmp_path / "cat", _hostile_record(), _hostile_record(id="img-2"))
    result = cli("catalog", "--catalog", str(folder))
    assert result.exit_code == 0, result.output
    _assert_inert(result.output)
    # shown, not read as markup or emoji (rich would drop "[bold red]" whole; a narrow column may fold it after "[bold")
    assert "[/]" in result.stdout and "[bold" in result.stdout and "red]" in result.stdout and ":warning:" in result.stdout


def test_no_match_and_unknown_key_messages_are_inert(cli: RunCli, tmp_path: Path) -> None:
    folder = _write_catalog(tmp_path / "cat", _hostile_record(frameworks={"torch": "2.5.1", "t\x1b]8;;http://e/\x07x": "1"}))
    for args in (("torch=9",), ("nokey=1",)):
        result = cli("catalog", "--catalog", str(folder), *args)
        assert result.exit_code in (1, 2) and isinstance(result.exception, SystemExit), result.exception
        assert result.stderr.startswith("error: ")
        _assert_inert(result.output)


def test_a_user_error_line_is_inert_and_short(cli: RunCli, tmp_path: Path) -> None:
    folder = _write_catalog(tmp_path / "cat", {**_hostile_record(), "unknown\x1b]8;;x\x07" + "k" * 5000: 1})
    result = cli("catalog", "--catalog", str(folder))
    assert result.exit_code == 2
    _assert_inert(result.output)
    assert len(result.stderr) < 2100


def _markdown_report(cli: RunCli, write_matrix: Callable[..., Path], tmp_path: Path) -> str:
    matrix = write_matrix()
    folder = _write_catalog(
        tmp_path / "cat",
        _hostile_record(
            host={"gpu": "<img src=x onerror=alert(1)> | `x` [a](http://evil)\n## Heading\n| x |", "driver": None, "engine": None}
        ),
    )
    out = tmp_path / "m.md"
    result = cli("--matrix", str(matrix), "report", "--catalog", str(folder), "--markdown", str(out), "--html", str(tmp_path / "i.html"))
    assert result.exit_code == 0, result.output
    _assert_inert(result.output)
    return out.read_text()


def test_markdown_cells_cannot_add_rows_headings_or_html(cli: RunCli, write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    page = _markdown_report(cli, write_matrix, tmp_path)
    headings = [line for line in page.splitlines() if line.startswith("#")]
    assert headings == [
        "# Support matrix",
        "## Base x stack",
        "## Images",
        "## Skipped by the rules",
        "## End of life",
        "## This project's support window",
    ]
    images = page.split("## Images")[1].split("## Skipped")[0].strip().splitlines()
    assert len(images) == 3  # header, rule, the one image
    assert len(re.findall(r"(?<!\\)\|", images[2])) == 12  # eleven cells, no more
    assert "<img" not in page and "&lt;img" in page
    assert not re.search(r"(?<!\\)\]\(http", page)  # no live link


def test_the_html_page_still_escapes_everything(cli: RunCli, write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    _markdown_report(cli, write_matrix, tmp_path)
    page = (tmp_path / "i.html").read_text()
    assert "<img" not in page and "&lt;img src=x" in page


@dataclass(frozen=True)
class _Release:
    framework: str = "torch"
    version: str = "2.15.0\n# Owned"
    status: str = "needs rules"
    requires_python: str = "| >=3.10 |"
    cuda: str = "<script>alert(1)</script>"
    numpy: str = "`x`"
    reason: str = "a\n\n## Injected heading\n| x | y |"


def test_the_nightly_summary_cannot_be_restructured() -> None:
    outcomes = (Outcome("img\n# x", "failed", "cause |\n## also injected", rebuilt=True),)
    changes = tuple(compare({"img\n# x": "passed"}, outcomes))
    report = NightlyReport(
        "2026-12-01\n# date", changes, outcomes, releases=(_Release(),), applied=("frameworks.torch += `2.15`\n# x",),  # type: ignore[arg-type]  # a stand-in with Release's fields
        drift=(("img`\n# y", (("numpy\n# z", "1|2", "<b>3</b>"),)),), notes=("note\n# heading <script>",),
    )  # fmt: skip
    summary = render_summary(report)
    headings = [line for line in summary.splitlines() if line.startswith("#")]
    assert headings == [
        "# Nightly 2026-12-01 \\# date: 1 regression(s); run failed: 1 problem(s)",
        "## Regressions (passed before, fail now)",
        "## New releases",
        "## Lock drift",
        "## Images",
    ]
    assert "<script>" not in summary and "<b>" not in summary
    for line in summary.splitlines():
        if line.startswith("| "):
            assert line.endswith(" |")


def test_print_rows_escapes_in_both_layouts() -> None:
    for count in (1, RICH_ROWS + 1):
        buffer = io.StringIO()
        console = Console(file=buffer, width=200, force_terminal=False)
        print_rows(console, f"t{CLEAR}", ("a", "b"), [(HOSTILE, f"x{OSC8}")] * count)
        _assert_inert(buffer.getvalue())
        assert "[/]" in buffer.getvalue()


@pytest.mark.parametrize("value", [CLEAR, OSC8, RICH, "a\u202eb", "\x9b31m", "x\\"])
def test_markup_and_plain_leave_no_control_or_markup(value: str) -> None:
    buffer = io.StringIO()
    Console(file=buffer, width=200, force_terminal=True).print(markup(value))  # a real terminal: styles would be ESC codes
    shown = buffer.getvalue()
    assert "\x1b]" not in shown and "\x07" not in shown and "\u202e" not in shown and "\x9b" not in shown
    assert "\x1b" not in plain(value)


def test_markdown_text_and_code() -> None:
    assert text("a|b\n# c <d> `e` [f](g) *h* _i_") == "a\\|b \\# c &lt;d&gt; \\`e\\` \\[f\\](g) \\*h\\* \\_i\\_"
    assert text("- item") == "\\- item" and text("=== ") == "\\==="
    assert code("frameworks.numba += 0.68.0") == "`frameworks.numba += 0.68.0`"
    assert code("a`b") == "a\\`b" and code("a\nb") == "a b"


def test_a_long_catalog_is_plain_lines_and_still_inert(cli: RunCli, tmp_path: Path) -> None:
    """Beyond RICH_ROWS records the catalog is written as plain lines (rich took 3.5 s for 2,001)."""
    records = [_hostile_record(id=f"img{n:04d}") for n in range(RICH_ROWS + 1)]
    result = cli("catalog", "--catalog", str(_write_catalog(tmp_path / "cat", *records)))
    assert result.exit_code == 0, result.output
    _assert_inert(result.output)
    assert result.stdout.count("[/]") >= RICH_ROWS + 1 and "┃" not in result.stdout
