"""A titled table of rows: a rich table while it is small enough to read, plain aligned lines
beyond that (rich lays out every cell; 40,000 rows took half a minute)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from builder.ui.text import markup, plain

RICH_ROWS = 300  # above this, plain lines: the same columns, written at once
MAX_WIDTH = 48  # a plain column is padded to at most this (the last column is never padded)


def print_rows(console: Console, title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    if len(rows) <= RICH_ROWS:
        table = Table(title=markup(title), title_justify="left")
        for header in headers:
            table.add_column(header, overflow="fold")
        for row in rows:
            table.add_row(*(markup(cell) for cell in row))
        console.print(table)
        return
    rows = [[plain(cell) for cell in row] for row in rows]
    widths = [min(MAX_WIDTH, max(len(header), *(len(row[i]) for row in rows))) for i, header in enumerate(headers[:-1])]

    def line(cells: Sequence[str]) -> str:
        return "  ".join([*(cell.ljust(width) for cell, width in zip(cells, widths, strict=False)), cells[-1]]).rstrip() + "\n"

    console.file.write(f"{plain(title)}\n" + line(headers) + "".join(line(row) for row in rows))
    console.file.flush()
