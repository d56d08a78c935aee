"""How a command ends: what a person can fix is one line `error: ...` with exit code 2 (a usage error
too), exit 1 means "ran, but something failed", a signal exits 128 + its number after every cleanup
ran; never a traceback for anything but a bug."""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, NoReturn, TypeVar

import click

from builder.ui.text import MAX_LINE, plain
from builder.util.errors import Interrupted, RunFailure, UserError
from builder.util.text import redact

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(func: F) -> F:
    """One line on stderr, never a traceback: UserError exits 2, RunFailure and a lost engine exit 1,
    Ctrl-C / SIGTERM / SIGHUP exit 128 + signal after every cleanup ran."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
        for sig in previous:
            signal.signal(sig, _interrupt)
        try:
            return func(*args, **kwargs)
        except UserError as exc:
            click.echo(f"error: {plain(redact(str(exc)), limit=MAX_LINE)}", err=True)
            sys.exit(2)
        except RunFailure as exc:
            click.echo(f"error: {plain(redact(str(exc)), limit=MAX_LINE)}", err=True)
            sys.exit(1)
        except KeyboardInterrupt as exc:
            signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
            click.echo(f"interrupted by {signal.Signals(signum).name}: stopped after cleaning up what this run had started", err=True)
            sys.exit(128 + signum)
        except Exception as exc:
            if "builder.engine.client" in sys.modules and sys.modules["builder.engine.client"].is_engine_fault(exc):
                click.echo(f"error: the Docker engine failed mid-run: {redact(' '.join(str(exc).split()))[:300]}", err=True)
                sys.exit(1)
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    return wrapper  # type: ignore[return-value]


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def exit_for(ok: bool) -> NoReturn:
    """Exit 0 when the command's work is all good, else 1 (\"ran, but something failed\")."""
    sys.exit(0 if ok else 1)


class OneLineGroup(click.Group):
    """Usage errors as one line too (`error: ...`, exit 2), like every other error of the tool."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            return super().main(*args, **kwargs)
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help() if exc.ctx else exc.format_message())
            sys.exit(0)
        except click.exceptions.UsageError as exc:
            # The subcommands after the root's name, whatever the root was called (`builder`, `python -m builder`).
            names = [c.info_name for c in _lineage(exc.ctx)][1:] if exc.ctx else []
            command = " ".join(["builder", *(n for n in names if n), "--help"])
            click.echo(f"error: {exc.format_message()} (see `{command}`)", err=True)
            sys.exit(2)
        except click.exceptions.Abort:
            sys.exit(130)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)


def _lineage(ctx: click.Context) -> list[click.Context]:
    """ctx and its parents, the root first."""
    chain = [ctx]
    while chain[-1].parent is not None:
        chain.append(chain[-1].parent)
    return chain[::-1]
