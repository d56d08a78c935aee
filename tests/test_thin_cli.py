"""Issue 40, item 2: the command line stays thin. cli.py holds click commands that hand one options
record to a use-case and show what comes back: no command body over 15 lines, cli.py at most 400
lines, no command that takes loose `**kwargs`, no engine opened by the CLI itself; each record's
fields are its parameters (builder/ui/options.py refuses a record that is not)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from builder.cli import main
from builder.ui.options import group, option, takes

CLI = Path(__file__).resolve().parents[1] / "builder" / "cli.py"
MAX_BODY = 15
MAX_LINES = 400


def long_bodies(source: str, limit: int = MAX_BODY) -> list[str]:
    """`name: N lines` for each function whose body (its docstring left out) is longer than `limit`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            lines = body[-1].end_lineno - body[0].lineno + 1 if body and body[-1].end_lineno else 0
            if lines > limit:
                found.append(f"{node.name}: {lines} lines")
    return found


def loose_keywords(source: str) -> list[str]:
    """Each function that takes `**kwargs` or `*args`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (node.args.kwarg or node.args.vararg):
            found.append(node.name)
    return found


def commands(command: click.Command, path: str = "builder") -> Iterator[tuple[str, click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from commands(sub, f"{path} {name}")


def test_no_command_body_is_over_15_lines_and_cli_py_is_at_most_400() -> None:
    source = CLI.read_text(encoding="utf-8")
    assert long_bodies(source) == [], (
        f"move the logic into builder/usecases/ (typed results) and the printing into builder/ui/ (at most {MAX_BODY} lines a body)"
    )
    assert len(source.splitlines()) <= MAX_LINES, f"builder/cli.py has {len(source.splitlines())} lines; at most {MAX_LINES}"


def test_the_length_check_can_fail() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_BODY + 1))
    assert long_bodies(f'def cmd() -> None:\n    """doc\n    more doc"""\n{body}\n') == [f"cmd: {MAX_BODY + 1} lines"]
    assert long_bodies(f'def cmd() -> None:\n    """doc"""\n{body.split(chr(10), 1)[1]}\n') == []


def test_no_command_takes_loose_keywords() -> None:
    assert loose_keywords(CLI.read_text(encoding="utf-8")) == [], "a command takes its options' record (builder/ui/args.py), not **kwargs"
    for path, command in commands(main):
        if command.callback is None or isinstance(command, click.Group):
            continue
        made = inspect.unwrap(command.callback)  # through takes, pass_obj and user_errors to the function written in cli.py
        kinds = [p.kind for p in inspect.signature(made).parameters.values()]
        assert inspect.Parameter.VAR_KEYWORD not in kinds and inspect.Parameter.VAR_POSITIONAL not in kinds, path
        record = inspect.signature(made).parameters["args"].annotation
        assert isinstance(record, str) and record.endswith("Args"), f"{path}: takes {record}, not its options' record"
    assert loose_keywords("def nightly(ws, /, select_expr, **kwargs): ...") == ["nightly"]


def test_every_command_parameter_is_a_field_of_its_record() -> None:
    """What click parses is what the record holds: a parameter without a field would be dropped."""
    for path, command in commands(main):
        if isinstance(command, click.Group) or command.callback is None:
            continue
        made = inspect.unwrap(command.callback)
        module = inspect.getmodule(made)
        record = getattr(module, inspect.signature(made).parameters["args"].annotation)
        assert {p.name for p in command.params} == set(_leaves(record)), path


def _leaves(record: type) -> Iterator[str]:
    for f in dataclasses.fields(record):
        if "builder.group" in f.metadata:
            yield from _leaves(f.metadata["builder.group"])
        else:
            yield f.name


def test_the_cli_opens_no_engine_itself() -> None:
    """`clean` opened the Docker adapter in its body; the use-cases take the engine (engine/port.py's Connect)."""
    imported = []
    for node in ast.walk(ast.parse(CLI.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            imported.append(node.module or "")
        elif isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
    assert [name for name in imported if name.split(".")[:2] == ["builder", "engine"] or name.startswith("docker")] == []


def test_a_record_whose_field_is_not_named_as_its_parameter_is_refused() -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Misnamed:
        select: str | None = option("--select", "select_expr", metavar="EXPR")

    with pytest.raises(TypeError, match=r"^Misnamed\.select: the option's parameter is 'select_expr'; name the field so$"):
        takes(Misnamed)


def test_a_parameter_two_groups_declare_is_refused() -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Flag:
        force: bool = option("--force", is_flag=True)

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Twice:
        one: Flag = group(Flag)
        two: Flag = group(Flag)

    with pytest.raises(TypeError, match=r"^Twice: a parameter is declared twice: \['force', 'force'\]$"):
        takes(Twice)


def test_a_record_hands_the_command_its_groups_built() -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Inner:
        count: int = option("-n", "--count", default=1, type=int)

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Outer:
        name: str = option("--name", default="x")
        inner: Inner = group(Inner)

    got: list[Outer] = []
    command = click.command()(takes(Outer)(got.append))
    assert command.main(["--count", "3", "--name", "y"], standalone_mode=False) is None
    assert got == [Outer(name="y", inner=Inner(count=3))]
    assert [p.name for p in command.params] == ["name", "count"], "the --help lists them in field order"
