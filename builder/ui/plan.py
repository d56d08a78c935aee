"""`builder plan` as a table, with the skipped combinations when asked (--explain)."""

from __future__ import annotations

import json

import click
from rich.console import Console

from builder.model.plan import ImageSpec, Plan
from builder.render.formats import github_matrix
from builder.ui.rows import print_rows
from builder.ui.terminal import emit_json, out
from builder.ui.text import MAX_LINE, markup, plain
from builder.usecases.plan import Planned


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


def show_plan(found: Planned, fmt: str, explain: bool) -> None:
    """`builder plan --format json|github|table` (bake writes its file: usecases/plan.py `bake`)."""
    if fmt == "json":
        emit_json(found.to_json())
    elif fmt == "github":
        click.echo(json.dumps(github_matrix(found.images), sort_keys=True))
    else:
        print_table(out, found.plan, found.images, explain)


def warn_past_end_of_life(found: Planned) -> None:
    for warning in found.past_end_of_life:
        click.echo(f"warning: {plain(warning, limit=MAX_LINE)}", err=True)
