"""`builder plan` as a table, with the skipped combinations when asked (--explain)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from builder.records import ImageSpec, Plan


def _frameworks(frameworks: tuple[tuple[str, str], ...]) -> str:
    return " ".join(f"{n}={v}" for n, v in frameworks)


def print_table(console: Console, plan: Plan, images: tuple[ImageSpec, ...], explain: bool) -> None:
    table = Table(title=f"{len(images)} images", title_justify="left")
    for column in ("id", "frameworks", "variant", "python", "base"):
        table.add_column(column, overflow="fold")
    for spec in images:
        variants = " ".join(sorted({i.variant or "" for i in spec.installs}))
        table.add_row(spec.id, _frameworks(spec.frameworks), variants, spec.python, spec.base.name)
    console.print(table)
    if explain:
        skipped = Table(title=f"{len(plan.skipped)} skipped combinations", title_justify="left")
        for column in ("base", "stack", "python", "frameworks", "reason"):
            skipped.add_column(column, overflow="fold")
        for skip in plan.skipped:
            skipped.add_row(skip.base, skip.stack, skip.python, _frameworks(skip.frameworks), skip.reason)
        console.print(skipped)
    elif plan.skipped:
        console.print(f"{len(plan.skipped)} combinations skipped; --explain lists them with reasons")
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
