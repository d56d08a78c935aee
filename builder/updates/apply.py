"""`builder updates --apply`: add the plannable releases to matrix.yaml's `frameworks:` lists.

Only those lists change. The file is read with ruamel.yaml's round-trip composer, which knows
where every node starts and ends, and the new versions are spliced in as text right after the
last item of each list: comments, order, quoting, indentation and line endings elsewhere stay
byte for byte as they were (a dump would re-indent and re-flow what it did not understand). A
flow list gets `, "2.14.2"`; a block list a new `- "2.14.2"` line with the last item's indent.

The result is written next to the original and loaded with the project's own matrix loader
before it replaces it (os.replace, same file mode), so an edit that would break the matrix
leaves the original untouched.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from packaging.version import Version
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from builder.spec.matrix import load_matrix
from builder.updates.releases import PLANNABLE, Release, spelling_rank
from builder.util.errors import UserError

_DASH = re.compile(r"[ \t]*-[ \t]+")


MAX_NEW = 3  # releases one --apply adds per framework (the newest): a mirror listing 400 must not make 400 x images overnight


def apply(matrix_path: Path, releases: Iterable[Release], limit: int = MAX_NEW) -> list[str]:
    """Add the plannable releases' versions to frameworks.<framework>; the lines say what was added
    ("matrix.yaml: frameworks.torch += 2.14.2") and what was held back. A release is one version by
    PEP 440 (2.14.2 = 2.14.2.0 = 2.14.02): one already listed in any spelling is not added again, and
    of several spellings one is added. At most `limit` releases per framework are added, the newest."""
    if limit < 1:
        raise UserError(f"the number of releases to add per framework must be at least 1, not {limit}")
    wanted: dict[str, dict[Version | str, str]] = {}
    for release in releases:
        if release.status == PLANNABLE:
            spellings = wanted.setdefault(release.framework, {})
            key = _identity(release.version)
            spellings[key] = min(spellings.get(key, release.version), release.version, key=spelling_rank)
    if not wanted:
        return []
    before = load_matrix(matrix_path)  # refuses a matrix that is invalid already, naming its line
    shown = before.path
    target = matrix_path.resolve()  # a symlinked matrix.yaml: edit the file it points to, keep the link
    text = target.read_bytes().decode("utf-8")
    lists_line, lists = _framework_lists(text, shown)
    listed = dict(before.frameworks)
    inserts: list[tuple[int, str]] = []
    expected = dict(listed)
    added: list[str] = []
    for framework in sorted(wanted):
        have = {_identity(v) for v in listed.get(framework, ())}
        new = sorted((v for key, v in wanted[framework].items() if key not in have), key=_version_key)
        held, new = new[:-limit], new[-limit:]
        if not new:
            continue
        seq = _sequence(lists, lists_line, framework, new, shown)
        inserts.append(_insertion(text, seq, new, framework, shown))
        expected[framework] = (*listed[framework], *new)
        added += [f"{shown}: frameworks.{framework} += {v}" for v in new]
        if held:
            shown_held = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
            added.append(
                f"{shown}: frameworks.{framework}: {len(held)} older plannable release(s) held back, not added ({shown_held}); one --apply "
                f"adds the newest {limit} per framework (--max-new); add others by hand if you want their images"
            )
    if not inserts:
        return []
    for index, piece in sorted(inserts, reverse=True):  # from the end, so earlier offsets stay valid
        text = text[:index] + piece + text[index:]
    _replace_checked(target, text, shown, expected)
    return added


def _identity(version: str) -> Version | str:
    """What makes two spellings one release (PEP 440 equality); an unparsable one is its own text (the loader refuses it)."""
    try:
        return Version(version)
    except ValueError:  # InvalidVersion, or int()'s refusal of a number over 4,300 digits
        return version


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


def _version_key(version: str) -> tuple[int, Version | str]:
    try:
        return (1, Version(version))
    except ValueError:  # InvalidVersion, or int()'s refusal of a number over 4,300 digits
        return (0, version)  # the loader refuses it below, naming the line


def _framework_lists(text: str, shown: str) -> tuple[int, MappingNode]:
    try:
        root = YAML(typ="rt").compose(text)
    except YAMLError as exc:
        raise UserError(f"cannot read it for editing: {' '.join(str(exc).split())}", shown) from None
    if not isinstance(root, MappingNode):
        raise UserError("the top level must be a mapping with a `frameworks:` mapping; nothing was changed", shown, 1)
    for key, value in root.value:
        if isinstance(key, ScalarNode) and key.value == "frameworks":
            if not isinstance(value, MappingNode):
                raise UserError("frameworks must be a mapping of version lists; nothing was changed", shown, _line(key))
            if value.anchor is not None:
                raise UserError("frameworks is an anchored mapping others may share; add the versions by hand", shown, _line(key))
            return _line(key), value
    raise UserError('no `frameworks:` mapping to add versions to; add one (e.g. frameworks: {torch: ["2.5.1"]})', shown, _line(root))


def _sequence(lists: MappingNode, lists_line: int, framework: str, new: list[str], shown: str) -> SequenceNode:
    for key, value in lists.value:
        if isinstance(key, ScalarNode) and key.value == framework:
            if not isinstance(value, SequenceNode):
                raise UserError(f"frameworks.{framework} must be a list to add {', '.join(new)} to; nothing was changed", shown, _line(key))
            if value.anchor is not None:
                raise UserError(
                    f"frameworks.{framework} is an anchored list (&{value.anchor}) others may share; add {', '.join(new)} by hand",
                    shown,
                    _line(key),
                )
            if not value.value or not all(isinstance(item, ScalarNode) for item in value.value):
                raise UserError(f"frameworks.{framework} must be a non-empty list of versions; nothing was changed", shown, _line(key))
            return value
    raise UserError(
        f'frameworks has no `{framework}:` list to add {", ".join(new)} to; add `{framework}: ["{new[0]}"]` by hand if you want it',
        shown,
        lists_line,
    )


def _insertion(text: str, seq: SequenceNode, new: list[str], framework: str, shown: str) -> tuple[int, str]:
    """Where the new items go and their text, in the list's own style."""
    items: list[ScalarNode] = list(seq.value)
    quote = "'" if all(item.style == "'" for item in items) else '"'
    quoted = [f"{quote}{v}{quote}" for v in new]
    last = items[-1]
    if seq.flow_style:
        return int(last.end_mark.index), "".join(f", {q}" for q in quoted)
    start = int(last.start_mark.index)
    prefix = text[text.rfind("\n", 0, start) + 1 : start]
    if not _DASH.fullmatch(prefix):
        raise UserError(f"frameworks.{framework}: cannot tell the list's layout; add {', '.join(new)} by hand", shown, _line(last))
    end = text.find("\n", int(last.end_mark.index))
    end = len(text) if end < 0 else end
    newline = "\n"
    if end > 0 and text[end - 1] == "\r":
        end, newline = end - 1, "\r\n"
    return end, "".join(f"{newline}{prefix}{q}" for q in quoted)


def _replace_checked(target: Path, text: str, shown: str, expected: dict[str, tuple[str, ...]]) -> None:
    """Write beside the original, prove it loads with exactly the expected lists, then replace the original."""
    mode = stat.S_IMODE(target.stat().st_mode)
    fd, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(text.encode("utf-8"))
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, mode)
        try:
            after = load_matrix(temp)
        except UserError as exc:
            where = f" (line {exc.line})" if exc.line else ""
            raise UserError(f"adding the new versions would make it invalid{where}: {exc.message}; nothing was changed", shown) from None
        if dict(after.frameworks) != expected:
            raise UserError("the edit did not come out as planned (the frameworks lists differ); nothing was changed", shown)
        os.replace(temp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
