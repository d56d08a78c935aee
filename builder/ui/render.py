"""`builder render` on the terminal: each stale file on stdout (with --check), the count on stderr."""

from __future__ import annotations

import click

from builder.usecases.render import Rendered


def show_rendered(done: Rendered) -> None:
    if not done.checked:
        click.echo(f"rendered {done.images} images into {done.target}; {done.changed} files changed", err=True)
        return
    for path in done.stale:
        click.echo(f"stale: {done.target.name}/{path}")
    if done.stale:
        click.echo(f"{len(done.stale)} stale files; run `builder render`", err=True)
    else:
        click.echo(f"{done.target.name}/ is current ({done.images} images)", err=True)
