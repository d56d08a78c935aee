"""`builder lock` on the terminal: a line per image as it finishes, then the table, and the drift."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console

from builder.ui.rows import print_rows
from builder.ui.status import styled
from builder.ui.text import markup
from builder.usecases.lock import LockResult
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
