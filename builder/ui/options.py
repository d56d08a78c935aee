"""Click options as typed records: each command's options are one frozen dataclass whose fields
carry their click declarations, and `takes` hands the command that record instead of loose keywords.

So an option is added in one place (a field: its click declaration verbatim, read typed by its
name), a command never reads `kwargs["no_publish"]`, and the records' methods are the one mapping
from what a person typed to the use-case's options. Option groups several commands share (the
package sources, the host a fit is judged for, the evidence check) are records of their own, held
as a field where their options stand in the --help.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click

R = TypeVar("R")
_CLICK = "builder.click"  # field metadata: the click decorator that declares the field's parameter
_GROUP = "builder.group"  # field metadata: the record whose options the field holds


def option(*decls: str, **attrs: Any) -> Any:
    """A record field that is this option (click.option's arguments, unchanged)."""
    return dataclasses.field(metadata={_CLICK: click.option(*decls, **attrs)})


def argument(*decls: str, **attrs: Any) -> Any:
    """A record field that is this positional argument (click.argument's arguments, unchanged)."""
    return dataclasses.field(metadata={_CLICK: click.argument(*decls, **attrs)})


def group(record: type[Any]) -> Any:
    """A record field that holds another record's options, at this place of the --help."""
    return dataclasses.field(metadata={_GROUP: record})


def _declared(record: type[Any]) -> Iterator[tuple[str, Callable[[Any], Any]]]:
    """(name, click decorator) of every parameter of `record`, its groups' in place, in field order."""
    for f in dataclasses.fields(record):
        if _GROUP in f.metadata:
            yield from _declared(f.metadata[_GROUP])
        elif _CLICK in f.metadata:
            yield f.name, f.metadata[_CLICK]
        else:
            raise TypeError(f"{record.__name__}.{f.name}: declare it with option(), argument() or group()")


def _made(record: type[R], values: dict[str, Any]) -> R:
    """The record of click's values, its groups built from theirs."""
    fields = dataclasses.fields(record)  # type: ignore[arg-type]  # a dataclass: _declared refused anything else
    return record(**{f.name: _made(f.metadata[_GROUP], values) if _GROUP in f.metadata else values[f.name] for f in fields})


def _parameter_name(declare: Callable[[Any], Any]) -> str:
    def probe() -> None: ...

    declare(probe)
    params: list[click.Parameter] = probe.__click_params__  # type: ignore[attr-defined]
    return str(params[0].name)


def takes(record: type[R]) -> Callable[[Callable[[R], Any]], Callable[..., Any]]:
    """Declare `record`'s options on the command and call it with the record they make.

    Each field's name must be its parameter's name (click's dest), and no two fields of a command
    may name one parameter: both are refused when the command is defined, not when it runs."""
    declared = list(_declared(record))
    names = [name for name, _ in declared]
    for name, declare in declared:
        if _parameter_name(declare) != name:
            raise TypeError(f"{record.__name__}.{name}: the option's parameter is {_parameter_name(declare)!r}; name the field so")
    if len(set(names)) != len(names):
        raise TypeError(f"{record.__name__}: a parameter is declared twice: {sorted(n for n in names if names.count(n) > 1)}")

    def decorate(command: Callable[[R], Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def from_click(**values: Any) -> Any:
            return command(_made(record, values))

        for _, declare in reversed(declared):  # click lists them in the order they are applied, reversed
            declare(from_click)
        return from_click

    return decorate
