"""`builder build` on the terminal: live progress on stderr, the summary table on stdout."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from builder.engine.build import BuildResult
from builder.ui.status import styled
from builder.ui.text import markup


class BuildProgress:
    """app.BuildEvents drawn with rich on stderr: one bar overall, one line per image being built."""

    def __init__(self, err: Console) -> None:
        columns = (
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
        )
        self.progress = Progress(*columns, console=err, transient=False)
        self.overall: Any = None
        self.steps: dict[str, Any] = {}

    def begin(self, total: int) -> None:
        self.overall = self.progress.add_task("building", total=total)
        self.progress.start()

    def end(self) -> None:
        self.progress.stop()

    def info(self, text: str) -> None:
        self.progress.console.print(markup(text, lines=True), highlight=False)

    def line(self, image: str, text: str) -> None:
        if text.startswith("Step "):
            task = self.steps.get(image)
            if task is None:
                task = self.steps[image] = self.progress.add_task(markup(image), total=None)
            self.progress.update(task, description=f"{markup(image)}: {markup(text.strip()[:70])}")

    def done(self, result: BuildResult) -> None:
        self.progress.advance(self.overall)
        if result.id in self.steps:
            self.progress.remove_task(self.steps.pop(result.id))
        self.progress.console.print(f"{styled(result.status)} {markup(result.id)} ({result.seconds:.1f}s)")


def print_build_summary(out: Console, results: Sequence[BuildResult]) -> None:
    table = Table(title="build", title_justify="left")
    # shared / own: the MB above the base that another image of its line holds too / that it alone holds
    for column in (
        "image",
        "status",
        "seconds",
        "size MB",
        "venv MB",
        "base MB",
        "ratio",
        "shared MB",
        "own MB",
        "attempts",
        "log / cause",
    ):
        table.add_column(column, overflow="fold")
    for r in results:
        detail = r.cause or r.error or (r.log or "")
        if r.fix:
            detail += f" -> {r.fix}"
        sizes = [f"{r.sizes[k]:.0f}" for k in ("image_mb", "venv_mb", "base_mb")] + [f"{r.sizes['ratio']:.3f}"] if r.sizes else [""] * 4
        sizes += [f"{r.sizes[k]:.0f}" if r.sizes and k in r.sizes else "" for k in ("shared_mb", "own_mb")]
        table.add_row(markup(r.id), styled(r.status), f"{r.seconds:.1f}", *sizes, str(r.attempts), markup(detail))
    out.print(table)
