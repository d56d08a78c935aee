"""`builder doctor` as tables: the host section, one row per image, then what was not checked."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from builder.host.doctor import Check, ImageVerdict, Status
from builder.host.facts import HostInfo
from builder.ui.terminal import emit_json, out
from builder.ui.text import markup
from builder.usecases.doctor import HostReport

_STYLE: dict[Status, str] = {
    "ok": "green",
    "warn": "yellow",
    "fail": "bold red",
    "n/a": "dim",
}


def _status(status: Status) -> str:
    return f"[{_STYLE[status]}]{status}[/]"


def render_table(
    console: Console,
    host: HostInfo,
    checks: Sequence[Check],
    verdicts: Sequence[ImageVerdict],
) -> None:
    """Human output: the host section, then one row per image, then what was not checked."""
    del host  # everything shown is already in the checks; kept for symmetry with report_json
    hosts = Table(title="Host", title_justify="left")
    for column in ("check", "status", "detail", "fix"):
        hosts.add_column(column, overflow="fold")
    for check in checks:
        hosts.add_row(markup(check.name), _status(check.status), markup(check.detail), markup(check.fix))
    console.print(hosts)
    if not verdicts:
        return
    images = Table(title="Images", title_justify="left")
    for column in ("image", "status", "reason", "fix"):
        images.add_column(column, overflow="fold")
    for verdict in verdicts:
        images.add_row(
            markup(verdict.image),
            _status(verdict.status),
            markup(verdict.reason),
            markup(verdict.fix),
        )
    console.print(images)
    notes = [verdict for verdict in verdicts if verdict.note]
    if notes:
        console.print("[dim]Building here (another CPU architecture):[/]")
        for verdict in notes:
            console.print(f"[dim]  - {markup(verdict.image)}: {markup(verdict.note)}[/]", highlight=False)
    unchecked = sorted({note for verdict in verdicts for note in verdict.unchecked})
    if unchecked:
        console.print("[dim]Not checked:[/]")
        for note in unchecked:
            console.print(f"[dim]  - {markup(note)}[/]", highlight=False)


def show_host(report: HostReport, fmt: str) -> None:
    if fmt == "json":
        emit_json(report.to_json())
    else:
        render_table(out, report.host, report.checks, report.verdicts)
