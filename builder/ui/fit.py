"""`builder fit` on the terminal: one row per record, then the newest that fits."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from builder.ui.text import markup
from builder.usecases.fit import FitReport

_STYLE = {"fits": "green", "does not fit": "red", "unknown": "yellow"}


def print_fit(out: Console, report: FitReport) -> None:
    host = report.host
    gpus = ", ".join(host.gpus) or "none"
    title = f"fit on {host.arch}, {host.vendor} GPUs: {gpus}, driver: {host.driver or 'unknown'}"
    table = Table(title=markup(title), title_justify="left")
    for column in ("image" if report.catalog else "library", "fit", "reason"):
        table.add_column(column, overflow="fold")
    for row in report.records:
        table.add_row(markup(row.id), f"[{_STYLE[row.status]}]{row.status}[/]", markup(row.reason))
    out.print(table)
    if not report.catalog:
        left = [row.id for row in report.records if row.status != "fits"]
        out.print(markup(f"not all fit this host: {', '.join(left)}") if left else "all fit this host")
    elif report.newest_fit:
        out.print(markup(f"newest that fits: {report.newest_fit} (builder pull id={report.newest_fit})"))
    else:
        out.print("nothing matching fits this host")
