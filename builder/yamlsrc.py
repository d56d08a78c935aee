"""YAML with line numbers: every mapping and list remembers where its entries were written.

PyYAML's plain loaders forget positions and silently keep the last of two duplicate keys;
users need both (`error: matrix.yaml:12: duplicate key 'torch'`), so we compose nodes and
convert them ourselves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from builder.errors import UserError


class LDict(dict[str, Any]):
    """A mapping that knows the line of itself and of each key."""

    line: int
    key_lines: dict[str, int]

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class LList(list[Any]):
    """A list that knows the line of itself and of each item."""

    line: int
    item_lines: list[int]

    def line_of(self, index: int) -> int:
        return self.item_lines[index] if index < len(self.item_lines) else self.line


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _convert(node: yaml.Node, file: str, constructor: SafeConstructor) -> Any:
    if isinstance(node, yaml.MappingNode):
        out = LDict()
        out.line, out.key_lines = _line(node), {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise UserError("mapping keys must be plain words", file, _line(key_node))
            key = str(constructor.construct_object(key_node))
            if key in out:
                first = out.key_lines[key]
                raise UserError(
                    f"duplicate key '{key}' (first written on line {first}); keep one of them",
                    file,
                    _line(key_node),
                )
            out[key] = _convert(value_node, file, constructor)
            out.key_lines[key] = _line(key_node)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = LList(_convert(item, file, constructor) for item in node.value)
        items.line, items.item_lines = _line(node), [_line(item) for item in node.value]
        return items
    return constructor.construct_object(node)


def load(path: Path, display: str | None = None) -> Any:
    """Parse a YAML file into LDict/LList/scalars; YAML errors become one-line UserErrors."""
    file = display or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(
            "no such file; pass --matrix PATH or set BUILDER_MATRIX, or run from a folder with matrix.yaml",
            file,
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read: {exc}", file) from None
    return loads(text, file)


def loads(text: str, file: str) -> Any:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = int(mark.line) + 1 if mark is not None else 1
        what = (exc.problem or exc.context or "invalid YAML").strip()
        raise UserError(f"YAML syntax error: {what}; check indentation and quoting", file, line) from None
    except yaml.YAMLError as exc:
        raise UserError(f"YAML error: {exc}".splitlines()[0], file, 1) from None
    if node is None:
        return None
    try:
        return _convert(node, file, SafeConstructor())
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark
        line = int(mark.line) + 1 if mark is not None else 1
        raise UserError(f"cannot read value: {exc.problem}", file, line) from None
