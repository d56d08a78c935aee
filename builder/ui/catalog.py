"""`publish`, `pull` and `catalog` on the terminal."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table

from builder.catalog.records import KnownGood
from builder.catalog.shares import MB, Share
from builder.fit.runs_on import RunsOn
from builder.ui.rows import RICH_ROWS, print_rows
from builder.ui.status import styled
from builder.ui.terminal import emit_json, out
from builder.ui.text import MAX_LINE, markup, plain
from builder.usecases.catalog import Listing, Verified
from builder.usecases.publish import Published
from builder.usecases.pull import Pulled

if TYPE_CHECKING:
    from builder.model.reproduced import Verdict
    from builder.usecases.reproduce import Reproduced


class PublishLines:
    """deliver.PublishEvents as lines on stderr."""

    def __init__(self, err: Console) -> None:
        self.err = err

    def info(self, text: str) -> None:
        return  # the registry's per-layer chatter; the summary says what happened

    def done(self, outcome: Published) -> None:
        self.err.print(f"{styled(outcome.status)} {markup(outcome.id)}: {markup(outcome.digest or outcome.reason)}")


def print_publish_summary(out: Console, outcomes: Sequence[Published]) -> None:
    table = Table(title="publish", title_justify="left")
    for column in ("image", "status", "digest / reason", "tags"):
        table.add_column(column, overflow="fold")
    for o in outcomes:
        table.add_row(markup(o.id), styled(o.status), markup(o.digest or o.reason), "\n".join(markup(t) for t in o.tags))
    out.print(table)


def print_catalog(
    out: Console,
    records: Sequence[KnownGood],
    verified: Sequence[Verified] = (),
    runs_on: Mapping[str, RunsOn] | None = None,
    reproduced: Mapping[str, Verdict] | None = None,
    shares: Mapping[str, Share] | None = None,
) -> None:
    """A rich table; beyond RICH_ROWS records plain aligned lines (2,001 records took rich 3.5 s).
    `runs_on`: what each record runs on, by id (usecases/catalog.py runs_on_each); `reproduced`:
    `builder reproduce`'s verdict of each record checked (a column only when there is one);
    `shares`: of each record's MB, those another record of its line holds (catalog/shares.py)."""
    checks = {v.record.id: v for v in verified}
    runs = runs_on or {}
    title = f"known-good ({len(records)})"
    split = shares or {}
    columns = ["image", "frameworks", "accelerator", "python", "verdict", "runs on", "host", "MB (shared)", "published", "digest"]
    rebuilt = reproduced or {}
    if rebuilt:
        columns.append("reproduced")
    if verified:
        columns.append("verify")
    rows = []
    for r in records:
        a = r.accelerator
        accel: str = a.kind
        if a.cuda:
            accel += f" {a.cuda}" + (f" cuDNN {a.cudnn}" if a.cudnn else "")
        elif a.rocm:
            accel += f" {a.rocm}"
        frameworks = " ".join(f"{k} {v}" for k, v in sorted(r.frameworks.items()))
        where = runs.get(r.id)
        size = size_cell(r, split.get(r.id))
        row = [r.id, frameworks, accel, r.python, r.verdict, where.label if where else "", r.host.gpu, size, r.published, r.digest]
        if rebuilt:
            found = rebuilt.get(r.id)
            row.append(found.short if found else "not checked")
        if verified:
            check = checks.get(r.id)
            more = f" (+{len(check.findings) - 1} more, below)" if check and len(check.findings) > 1 else ""
            row.append(f"ok: {check.detail}" if check and check.ok else f"FAILED: {check.detail if check else ''}{more}")
        rows.append(row)
    if len(rows) > RICH_ROWS:
        print_rows(out, title, columns, rows)  # escapes every cell itself
        return
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        cells = [markup(cell) for cell in row]
        cells[4] = styled(row[4])
        if verified:
            word, _, rest = row[-1].partition(":")
            cells[-1] = f"{'[green]ok[/green]' if word == 'ok' else '[red]FAILED[/red]'}:{markup(rest)}"
        table.add_row(*cells)
    out.print(table)


def size_cell(record: KnownGood, share: Share | None) -> str:
    """`4,512 (3,900)`: the image's MB and, in brackets, those another record of its line holds; a
    record without measured layers shows no bracket (unknown, not zero), one without a size nothing."""
    size = f"{record.size_mb:,.0f}" if record.size_mb is not None else ""
    return f"{size} ({share.shared / MB:,.0f})".strip() if share is not None else size


def show_published(catalog_file: Path, outcomes: Sequence[Published]) -> None:
    print_publish_summary(out, outcomes)
    published = [o for o in outcomes if o.status == "published"]
    if published:
        said = f"recorded {len(published)} image(s) in {catalog_file}; a teammate runs: builder pull id={published[0].id}"
        click.echo(plain(said), err=True)


def show_pulled(pulled: Pulled) -> None:
    """What was checked on stderr; the `docker run` line on stdout."""
    click.echo(plain(pulled.fit, limit=MAX_LINE), err=True)
    click.echo(plain(f"pulled {pulled.record.digest} ({pulled.record.id}): digest checked; {pulled.trust}"), err=True)
    if pulled.runs_on:
        click.echo(plain(f"runs on: {pulled.runs_on}", limit=MAX_LINE), err=True)
    if pulled.note:
        click.echo(pulled.note, err=True)
    click.echo(pulled.run_line)


def show_listing(listing: Listing, fmt: str) -> None:
    """The records (a table, or JSON), then each --verify finding and a query's no-match on stderr."""
    if fmt == "json":
        emit_json(listing.to_json())
    else:
        print_catalog(out, listing.records, listing.verified or (), listing.runs_on, listing.reproduced, listing.shares)
    for v in listing.verified or ():
        for finding in v.findings:
            click.echo(plain(f"{v.record.id}: {finding}", limit=MAX_LINE), err=True)
    if listing.no_match:
        click.echo(f"error: {plain(listing.no_match, limit=MAX_LINE)}", err=True)


def show_reproduced(done: Reproduced) -> None:
    """What was checked and what the rebuild took on stderr; the verdict on stdout."""
    click.echo(plain(f"{done.record.id} ({done.record.digest}): {done.trust}", limit=MAX_LINE), err=True)
    if done.note:
        click.echo(plain(done.note, limit=MAX_LINE), err=True)
    click.echo(plain(done.verdict.line, limit=MAX_LINE))
