"""`builder lock` on the terminal: a line per image as it finishes, then the table, and the drift."""

from __future__ import annotations

from collections.abc import Sequence

import click
from rich.console import Console

from builder.ui.rows import print_rows
from builder.ui.status import styled
from builder.ui.terminal import out
from builder.ui.text import markup
from builder.usecases.lock import FAILED, LockCheck, LockResult
from builder.usecases.measure import MeasureResult


class LockLines:
    def __init__(self, err: Console) -> None:
        self.err = err

    def __call__(self, result: LockResult) -> None:
        self.err.print(f"{styled(result.status)} {markup(result.id)} ({result.seconds:.1f}s)")


class MeasureLines:
    """A line per CUDA image as its fit is measured from its locked wheels."""

    def __init__(self, err: Console) -> None:
        self.err = err

    def __call__(self, result: MeasureResult) -> None:
        if result.status == "current":
            return
        fetched = f", {result.fetched} wheel(s) fetched" if result.fetched else ""
        detail = f": {markup(result.detail)}" if result.detail else ""
        self.err.print(f"{styled(result.status)} fit of {markup(result.id)} ({result.seconds:.1f}s{fetched}){detail}")


def print_lock_summary(out: Console, results: Sequence[LockResult]) -> None:
    rows = [
        (
            r.id,
            r.status,
            f"{r.seconds:.1f}",
            (f"{r.pins}" if r.pins else "") + (f", {len(r.changes)} changed" if r.changes else ""),
            r.detail,
        )
        for r in results
    ]
    print_rows(out, "lock", ("image", "status", "seconds", "pins", "detail"), rows)
    for r in results:
        if r.changes:
            out.print(f"[bold]{markup(r.id)}[/]")
            for name, old, new in r.changes:
                out.print(f"  {markup(name)} {markup(old or '(new)')} -> {markup(new or '(removed)')}", highlight=False)


def show_check(checked: LockCheck) -> None:
    """`lock --check` (and `--index`): each lock that is not what it should be on stdout, the count on stderr."""
    for r in checked.bad:
        click.echo(f"{r.status}: {checked.folder}/{r.path} ({r.detail})")
    if checked.asked is None:
        tail = f"; {checked.unlocked} unlocked by matrix.yaml" if checked.unlocked else ""
        click.echo(f"{checked.current} locks current, {len(checked.bad)} missing or stale{tail}", err=True)
        return
    for r in checked.unpublished:
        click.echo(f"{r.status}: {checked.folder}/{r.id}/requirements.lock: {r.detail}")
    summary = f"{checked.published} locks' hashes published by their sources, {len(checked.unpublished)} not"
    click.echo(f"{summary}, {len(checked.bad)} missing or stale", err=True)


def show_locked(results: Sequence[LockResult]) -> None:
    print_lock_summary(out, results)
    for r in results:
        if r.status in FAILED:
            click.echo(f"error: {r.id}: {r.detail}", err=True)


def show_measured(measured: Sequence[MeasureResult]) -> None:
    for m in measured:
        if m.status == "failed":
            click.echo(f"error: {m.id}: fit not measured: {m.detail}", err=True)
