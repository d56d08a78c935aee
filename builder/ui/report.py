"""`builder report` on the terminal: what was left out, the counts, and the two files written."""

from __future__ import annotations

import click

from builder.ui.text import MAX_LINE, plain
from builder.usecases.report import ReportFiles


def show_report(files: ReportFiles) -> None:
    for note in files.notes:
        click.echo(plain(f"note: {note}", limit=MAX_LINE), err=True)
    click.echo(", ".join(f"{n} {status}" for status, n in files.counts.items()), err=True)
    click.echo(plain(f"wrote {files.markdown} and {files.html}"))
