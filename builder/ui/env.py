"""`builder env lock|build|test|shell` on the terminal: what was checked of the base on stderr, the
result (the lock, the image, the verdict, the `docker run` line) on stdout."""

from __future__ import annotations

import click

from builder.engine.image_build import BuildResult
from builder.ui.text import plain
from builder.usecases.env import EnvLocked, EnvLockState, EnvTested, Prepared, ShellPlan

BUILT = ("built", "up-to-date")


class EnvLines:
    """usecases.env.EnvEvents: nothing on the terminal, the whole log is in build/env/<name>/logs/."""

    def line(self, image: str, text: str) -> None:
        pass


def show_lock_state(state: EnvLockState) -> None:
    if state.record is None:
        click.echo(plain(f"stale: {state.stale}"), err=True)
    else:
        click.echo(plain(f"current: {state.lock} on {state.record.id} ({state.record.digest}); {state.trust}"))


def show_env_locked(lock_name: str, done: EnvLocked) -> None:
    if done.moved_from:
        click.echo(plain(f"base moved: {done.moved_from} -> {done.digest}"))
    added = f"adds {len(done.added)} package(s)"
    click.echo(plain(f"{done.status}: {lock_name} on {done.base} ({done.digest}); {added}; {done.trust}"))
    for name, version in done.added:
        click.echo(plain(f"  + {name}=={version}"))
    for name, old, new in done.changes:
        click.echo(plain(f"  moved {name}: {old or '-'} -> {new or '-'}"))


def show_env_built(ready: Prepared, result: BuildResult) -> None:
    click.echo(plain(f"base {ready.base.record.id}: {ready.trust}"), err=True)
    click.echo(plain(f"{result.status}: {ready.spec.tag} ({ready.spec.content_hash}) FROM {ready.base.record.digest}"))
    if result.status not in BUILT:
        click.echo(plain(f"error: {result.error or ''} {result.cause or ''} {result.fix or ''} (log: {result.log})"), err=True)


def show_env_tested(ready: Prepared, tested: EnvTested) -> None:
    click.echo(plain(f"base {ready.base.record.id}: {ready.trust}"), err=True)
    click.echo(plain(f"{'same' if tested.same else 'DIFFERENT'}: {ready.spec.id}: {tested.note} (base {ready.base.record.id})"))
    for failure in tested.smoke.failures[:5]:
        click.echo(plain(f"  {failure}"), err=True)


def show_shell(plan: ShellPlan) -> None:
    click.echo(plain(f"base: {plan.trust}"), err=True)
    click.echo(plain(f"fit: {plan.fit.status}: {plan.fit.reason}"), err=True)
    click.echo(plain(f"wrote {plan.devcontainer}"), err=True)
    if plan.note:
        click.echo(plain(plan.note, limit=2000), err=True)
    click.echo(plain(plan.line))
