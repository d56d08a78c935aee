"""Templates are input, and a bad one is a one-line error naming its file and line, never a traceback
or a render that never ends.

What a template may do is bounded: it is read only from inside its templates folder (a link that
leads out of it is refused: templates/ beside the matrix override the shipped ones, and a link to
~/.ssh/id_rsa would otherwise end up in every Dockerfile), as a bounded UTF-8 regular file
(fsio.read_text); it runs in jinja2's sandbox (no private attributes, `range` at most 100000
items), with `*`, `**`, `+` and `~` refused when their result would be huge; its output is bounded in
size, and rendering it in time.
"""

from __future__ import annotations

import os
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.loaders import split_template_path
from jinja2.sandbox import SandboxedEnvironment

from builder.util.errors import UserError
from builder.util.fsio import MiB, read_text

MAX_TEMPLATE = MiB  # one template file; the shipped ones are a few kB
MAX_OUTPUT = 4 * MiB  # one rendered file (render.tree.MAX_FILE: bigger is not render's own)
MAX_ITEMS = 1_000_000  # elements or characters one `*` / `+` may produce
MAX_BITS = 1 << 16  # bits of an integer `*` / `**` may produce
RENDER_TIMEOUT_S = 30.0  # a Dockerfile renders in milliseconds


class Loader(jinja2.BaseLoader):
    """Templates by name from the folders in order (the first that has it wins), each file inside
    its folder after every link is followed."""

    def __init__(self, folders: Iterable[Path]) -> None:
        self.folders = list(folders)
        self.loaded: set[str] = set()  # file names jinja2 puts in tracebacks, to find the template line

    def find(self, name: str) -> Path | None:
        pieces = split_template_path(name)  # refuses `..`
        for folder in self.folders:
            path = folder.joinpath(*pieces)
            if os.path.lexists(path):
                inside(folder, path)
                return path
        return None

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, Callable[[], bool]]:
        path = self.find(template)
        if path is None:
            raise jinja2.TemplateNotFound(template)
        text = read_text(path, MAX_TEMPLATE, "template")
        if "\0" in text:  # it would reach the Dockerfile, where no parser reads past it the same way
            line = text.count("\n", 0, text.index("\0")) + 1
            raise UserError("holds a NUL byte; a template is text: remove it", str(path), line)
        self.loaded.add(str(path))
        return text, str(path), lambda: True


def inside(
    folder: Path, path: Path, fix: str = "a template must be a file inside its templates folder: copy it in instead of linking it"
) -> None:
    """Refuse `path` unless it resolves inside `folder` (both with every link followed)."""
    root, real = os.path.realpath(folder), os.path.realpath(path)
    if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
        raise UserError(f"is a symbolic link (or lies under one) that leads out of {folder} to {real}; {fix}", str(path))


def override_folder(folder: Path) -> Path | None:
    """A templates/ beside the matrix, or None when there is none; a link is followed only to a
    folder inside the matrix's own folder (the repository)."""
    if not os.path.lexists(folder) or not folder.is_dir():
        return None
    inside(folder.parent, folder, "templates/ must be a folder in the repository beside the matrix: copy the templates in")
    return folder


class _Codegen(CodeGenerator):
    """`a ~ b` through Sandbox.concat (jinja2 joins it inline, where no sandbox hook sees it)."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class Sandbox(SandboxedEnvironment):
    """jinja2's sandbox, with the operators that can build a huge value bounded."""

    intercepted_binops = frozenset({"*", "**", "+"})  # also keeps them from being folded at compile time
    code_generator_class = _Codegen

    def concat(self, values: Iterable[Any]) -> str:
        pieces = [str(value) for value in values]
        if sum(map(len, pieces)) > MAX_ITEMS:
            raise jinja2.exceptions.SecurityError("the result of '~' would be too big for a template")
        return "".join(pieces)

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        if _too_big(operator, left, right):
            raise jinja2.exceptions.SecurityError(f"the result of {operator!r} would be too big for a template")
        return super().call_binop(context, operator, left, right)


def _too_big(operator: str, left: Any, right: Any) -> bool:
    sized = (str, bytes, list, tuple)
    if operator == "**":
        return isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and left.bit_length() * right > MAX_BITS
    if operator == "+":
        return isinstance(left, sized) and isinstance(right, sized) and len(left) + len(right) > MAX_ITEMS
    if isinstance(left, sized) and isinstance(right, int):
        return len(left) * right > MAX_ITEMS
    if isinstance(right, sized) and isinstance(left, int):
        return len(right) * left > MAX_ITEMS
    if isinstance(left, int) and isinstance(right, int):
        return left.bit_length() + right.bit_length() > MAX_BITS
    return False


def render(env: jinja2.Environment, name: str, context: Mapping[str, Any]) -> str:
    """The template's output, or a one-line UserError naming the template file and line.

    Rendered in a daemon thread the caller waits for at most RENDER_TIMEOUT_S: a template that never
    finishes (nested loops) is abandoned, and the error ends the command with it."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["text"] = _bounded(env.get_template(name).generate(dict(context)))
        except BaseException as exc:  # handed to the caller, which turns it into one line
            box["error"] = exc

    worker = threading.Thread(target=work, name=f"render {name}", daemon=True)
    worker.start()
    worker.join(RENDER_TIMEOUT_S)
    where = _where(env, name)
    if worker.is_alive():
        raise UserError(
            f"rendering did not finish within {RENDER_TIMEOUT_S:g} s (a loop that never ends?); fix the template or one it includes", where
        )
    if "error" in box:
        raise template_error(box["error"], env, where) from None
    return str(box["text"])


def _bounded(chunks: Iterator[str]) -> str:
    out: list[str] = []
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > MAX_OUTPUT:
            raise jinja2.exceptions.SecurityError(f"the output is larger than {MAX_OUTPUT // MiB} MiB")
        out.append(chunk)
    return "".join(out)


def _where(env: jinja2.Environment, name: str) -> str:
    loader = env.loader
    found = loader.find(name) if isinstance(loader, Loader) else None
    return str(found) if found is not None else name


def template_error(exc: BaseException, env: jinja2.Environment, where: str) -> BaseException:
    """One line for whatever a template raised, at the template line jinja2 put in the traceback."""
    if isinstance(exc, (UserError, KeyboardInterrupt, SystemExit)):
        return exc
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return UserError(f"template syntax: {exc.message}; fix the template", exc.filename or where, exc.lineno)
    file, line = _template_frame(exc, env)
    if isinstance(exc, jinja2.TemplateNotFound):
        what = f"includes {exc.name!r}, which is in no templates folder"
    elif isinstance(exc, jinja2.UndefinedError):
        what = f"{exc.message}; use only the names render passes (spec, base_ref, vendor, frameworks, labels, ...)"
    elif isinstance(exc, jinja2.exceptions.SecurityError):
        what = f"not allowed in a template: {str(exc).rstrip('.')}"
    elif isinstance(exc, RecursionError):
        what = "templates include or call each other without end"
    elif isinstance(exc, MemoryError):
        what = "the template needs more memory than there is"
    elif isinstance(exc, OverflowError):
        what = f"{exc}"
    else:
        what = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return UserError(f"{what.rstrip('.')}; fix the template", file or where, line)


def _template_frame(exc: BaseException, env: jinja2.Environment) -> tuple[str | None, int | None]:
    """The innermost template file and line in the traceback (jinja2 rewrites its frames so)."""
    loaded = env.loader.loaded if isinstance(env.loader, Loader) else set()
    found: tuple[str | None, int | None] = (None, None)
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename in loaded:
            found = (frame.filename, frame.lineno)
    return found
