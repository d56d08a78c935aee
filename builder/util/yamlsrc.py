"""YAML with line numbers: every mapping and list remembers where its entries were written.

PyYAML's plain loaders forget positions and silently keep the last of two duplicate keys;
users need both (`error: matrix.yaml:12: duplicate key 'torch'`), so we compose nodes and
convert them ourselves.

Bounded by the project, whichever loader PyYAML has (libyaml's, or its pure-Python one where
libyaml is absent), before anything is composed: the file's size (MAX_BYTES), its values (a text
gate at C speed, then the parser's events, MAX_EVENTS) and its nesting (MAX_DEPTH, counted on the
events; the pure-Python scanner also stops there, since its simple-key bookkeeping costs time in
proportion to the depth for every token: 100,000 `[` took 189 s before any event came out).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from builder.util.errors import UserError
from builder.util.fsio import read_text

MAX_BYTES = 16 * 2**20  # a matrix or table bigger than this is a mistake, not a matrix
# Aliases may repeat a value (`*defaults`), but not multiply the document: the values produced may
# exceed the nodes written by this many times (plus a small allowance) before the file is refused.
# The "billion laughs" file (9 aliases of 9 aliases ...) stops here after a few thousand values.
ALIAS_FACTOR = 4
ALIAS_ALLOWANCE = 10_000
# Parser events (each scalar, alias, list or mapping start and end) in one document: matrix.yaml has
# ~300, the largest compat table ~2,200 (tests/test_bounds.py checks the headroom). Counting this
# many takes under a second; composing and converting them a few.
MAX_EVENTS = 200_000
# Levels of nested lists and mappings: matrix.yaml and the compat tables have at most 6
# (tests/test_bounds.py checks the headroom); libyaml's own limit (1,000) is not the project's bound.
MAX_DEPTH = 64


class _TooDeep(yaml.YAMLError):
    def __init__(self, line: int) -> None:
        super().__init__(f"nesting deeper than {MAX_DEPTH} levels")
        self.line = line


class _PureLoader(yaml.SafeLoader):
    """PyYAML's pure-Python loader, stopped in its scanner at MAX_DEPTH levels of flow nesting: it
    keeps a possible simple key per level and walks them all for every token (and looks up to 1,024
    characters ahead), so deep `[[[...` is quadratic there before the parser sees an event."""

    def fetch_flow_collection_start(self, TokenClass: type[yaml.Token]) -> None:
        if self.flow_level >= MAX_DEPTH:
            raise _TooDeep(int(self.get_mark().line) + 1)
        super().fetch_flow_collection_start(TokenClass)


# libyaml's composer when present (about 15x faster); both give the same nodes and marks.
_LOADER = getattr(yaml, "CSafeLoader", _PureLoader)


class LDict(dict[str, Any]):
    """A mapping that knows the line of itself and of each key."""

    line: int
    key_lines: dict[str, int]

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class LFloat(float):
    """A number that was written as text like 3.10: keeps what the user typed for the message."""

    source: str


class LList(list[Any]):
    """A list that knows the line of itself and of each item."""

    line: int
    item_lines: list[int]

    def line_of(self, index: int) -> int:
        return self.item_lines[index] if index < len(self.item_lines) else self.line


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


class _Budget:
    """How many values conversion may still produce (see ALIAS_FACTOR)."""

    def __init__(self, root: yaml.Node, file: str) -> None:
        self.file = file
        self.left = ALIAS_FACTOR * _distinct_nodes(root) + ALIAS_ALLOWANCE

    def spend(self, node: yaml.Node) -> None:
        self.left -= 1
        if self.left < 0:
            raise UserError(
                "YAML aliases expand this file far beyond what is written in it; write the values out instead of nesting aliases",
                self.file,
                _line(node),
            )


def _distinct_nodes(root: yaml.Node) -> int:
    """Nodes as written (an alias counts once, however often it is used)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack += [part for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value
    return len(seen)


def _convert(node: yaml.Node, file: str, constructor: SafeConstructor, budget: _Budget, seen: frozenset[int] = frozenset()) -> Any:
    budget.spend(node)
    if id(node) in seen:
        raise UserError("this alias refers to a value that contains it; write the values out", file, _line(node))
    seen = seen | {id(node)} if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) else seen
    if isinstance(node, yaml.MappingNode):
        out = LDict()
        out.line, out.key_lines = _line(node), {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise UserError("mapping keys must be plain words", file, _line(key_node))
            key = str(_construct(key_node, file, constructor))
            if key in out:
                first = out.key_lines[key]
                raise UserError(
                    f"duplicate key '{key}' (first written on line {first}); keep one of them",
                    file,
                    _line(key_node),
                )
            out[key] = _convert(value_node, file, constructor, budget, seen)
            out.key_lines[key] = _line(key_node)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = LList(_convert(item, file, constructor, budget, seen) for item in node.value)
        items.line, items.item_lines = _line(node), [_line(item) for item in node.value]
        return items
    value = _construct(node, file, constructor)
    if isinstance(value, float) and isinstance(node, yaml.ScalarNode):
        kept = LFloat(value)
        kept.source = str(node.value)
        return kept
    return value


def load(path: Path, display: str | None = None) -> Any:
    """Parse a YAML file into LDict/LList/scalars; YAML errors become one-line UserErrors.

    Read through fsio: a FIFO, a device (`--matrix /dev/zero`) or a file over MAX_BYTES is refused
    in one line instead of hanging or reading until memory runs out."""
    file = display or str(path)
    if not os.path.lexists(path):  # never raises (a name too long is read below, and refused there)
        raise UserError("no such file; pass --matrix PATH or set BUILDER_MATRIX, or run from a folder with matrix.yaml", file)
    try:
        text = read_text(path, MAX_BYTES, "file")
    except UserError as exc:
        raise UserError(exc.message, file) from None
    return loads(text, file)


def loads(text: str, file: str) -> Any:
    if len(text) > MAX_BYTES:
        raise UserError(f"the file is larger than {MAX_BYTES // 2**20} MiB; a matrix this big is a mistake (or split it)", file)
    try:
        _count_events(text, file)
        node = yaml.compose(text, Loader=_LOADER)
    except _TooDeep as exc:
        raise UserError(_DEEP, file, exc.line) from None
    except RecursionError:
        raise UserError("nesting is too deep to read; flatten the structure", file, 1) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = int(mark.line) + 1 if mark is not None else 1
        what = (exc.problem or exc.context or "invalid YAML").strip()
        opened = exc.context_mark
        if exc.context and opened is not None and int(opened.line) + 1 != line:
            what += f" ({exc.context.strip()} opened on line {int(opened.line) + 1})"
        raise UserError(f"YAML syntax error: {what}; check indentation, brackets and quoting", file, line) from None
    except yaml.YAMLError as exc:
        raise UserError(f"YAML error: {exc}".splitlines()[0], file, 1) from None
    if node is None:
        return None
    try:
        return _convert(node, file, SafeConstructor(), _Budget(node, file))
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark
        line = int(mark.line) + 1 if mark is not None else 1
        raise UserError(f"cannot read value: {exc.problem}", file, line) from None
    except RecursionError:
        raise UserError("nesting is too deep or an alias refers to itself; write the values out", file, 1) from None


def text_values(text: str) -> int:
    """How many parser events the text may hold, counted at C speed: a value after the first needs a
    comma (flow style) or a new line (block style), a mapping's value its colon, a flow list or
    mapping its two brackets, a block list entry its `- `. About 1.1 to 1.2 times the events of the
    real files (2.5 for sources.yaml, its URLs' colons): an upper bound for refusing, never a count."""
    brackets = text.count("[") + text.count("{")
    return text.count(",") + text.count("\n") + text.count(":") + 2 * brackets + text.count("- ")


_DEEP = f"nesting depth over {MAX_DEPTH} levels of lists and mappings; flatten the structure"
_OPENS = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSES = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def _count_events(text: str, file: str) -> None:
    """Refuse a document of more than MAX_EVENTS values, or nested deeper than MAX_DEPTH, before any
    node is built.

    Composing and converting cost ~14 us a value: a 15 MiB one-line flow list (7.5 million items)
    took 106 s and 2.9 GB before the matrix checks refused it. First a text gate (C speed,
    `text_values`), since parsing costs too (libyaml reads 200,000 values in about a second, the
    pure-Python parser in 18): a file that may hold that many is refused at once. Then the parser's
    events are counted up to MAX_EVENTS and their depth up to MAX_DEPTH (it streams, so this costs
    time in proportion to the caps, not the file): nested `[[[...]]]` or `- - - x` stop there."""
    message = f"{MAX_EVENTS:,} values or more; a matrix or table this large is a mistake (or split it)"
    if text_values(text) >= MAX_EVENTS:
        raise UserError(message, file)
    depth = 0
    for count, event in enumerate(yaml.parse(text, Loader=_LOADER)):
        if count >= MAX_EVENTS:
            raise UserError(message, file, int(event.start_mark.line) + 1 if event.start_mark else None)
        if isinstance(event, _OPENS):
            depth += 1
            if depth > MAX_DEPTH:
                raise UserError(_DEEP, file, int(event.start_mark.line) + 1 if event.start_mark else None)
        elif isinstance(event, _CLOSES):
            depth -= 1


def _construct(node: yaml.Node, file: str, constructor: SafeConstructor) -> Any:
    """A scalar's value; an explicit tag that does not fit its text (`!!int abc`) is a UserError."""
    try:
        return constructor.construct_object(node)
    except yaml.constructor.ConstructorError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
        raise UserError(
            f"value {node.value!r} does not fit its tag {node.tag}; remove the tag or fix the value", file, _line(node)
        ) from None
