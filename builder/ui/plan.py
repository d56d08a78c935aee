"""`builder plan` as a table, with the skipped combinations when asked (--explain)."""

from __future__ import annotations

from rich.console import Console

from builder.model.plan import ImageSpec, Plan
from builder.ui.rows import print_rows
from builder.ui.text import markup


def _frameworks(frameworks: tuple[tuple[str, str], ...]) -> str:
    return " ".join(f"{n}={v}" for n, v in frameworks)


def print_table(console: Console, plan: Plan, images: tuple[ImageSpec, ...], explain: bool) -> None:
    rows = [
        (spec.id, _frameworks(spec.frameworks), " ".join(sorted({i.variant or "" for i in spec.installs})), spec.python, spec.base.name)
        for spec in images
    ]
    print_rows(console, f"{len(images)} images", ("id", "frameworks", "variant", "python", "base"), rows)
    if explain:
        skipped = [(s.base, s.platform, s.stack, s.python, _frameworks(s.frameworks), s.reason) for s in plan.skipped]
        print_rows(
            console, f"{len(plan.skipped)} skipped combinations", ("base", "platform", "stack", "python", "frameworks", "reason"), skipped
        )
    elif plan.skipped:
        console.print(f"{len(plan.skipped)} combinations skipped; --explain lists them with reasons")
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/] {markup(warning)}")
