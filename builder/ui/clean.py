"""`builder clean` on the terminal: a line per thing removed (or that would be), what was kept and why."""

from __future__ import annotations

import click

from builder.usecases.clean import Cleaned


def show_cleaned(done: Cleaned) -> None:
    verb = "would remove" if done.dry_run else "removed"
    for kind, names in (("container", done.containers), ("image", done.images), ("folder", done.folders)):
        for name in names:
            click.echo(f"{verb} {kind} {name}")
    for name in done.orphans:
        click.echo(f"{verb} orphan image {name}")
    for note in done.kept:
        click.echo(f"kept {note}", err=True)
    click.echo(f"{verb} {done.count()} item(s)", err=True)
