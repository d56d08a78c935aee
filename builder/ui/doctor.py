"""`builder doctor` as tables: the host section, one row per image, then what was not checked."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from builder.host.doctor import Check, ImageVerdict, Status
from builder.host.facts import HostInfo

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
        hosts.add_row(escape(check.name), _status(check.status), escape(check.detail), escape(check.fix))
    console.print(hosts)
    if not verdicts:
        return
    images = Table(title="Images", title_justify="left")
    for column in ("image", "status", "reason", "fix"):
        images.add_column(column, overflow="fold")
    for verdict in verdicts:
        images.add_row(
            escape(verdict.image),
            _status(verdict.status),
            escape(verdict.reason),
            escape(verdict.fix),
        )
    console.print(images)
    unchecked = sorted({note for verdict in verdicts for note in verdict.unchecked})
    if unchecked:
        console.print("[dim]Not checked:[/]")
        for note in unchecked:
            console.print(f"[dim]  - {escape(note)}[/]", highlight=False)
