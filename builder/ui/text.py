"""Values on the terminal: never as control sequences, never as rich markup.

Catalog fields, index metadata, build logs and error messages carry text other people wrote; printed
raw, an ESC clears the screen or an OSC 8 sequence links to another site, and a `[link=...]` or `[/]`
is read by rich as markup (or crashes it). Every value the ui prints goes through `markup` (for
rich) or `plain` (for plain writes); the tool's own markup (status colours) is added around them.
"""

from __future__ import annotations

import re

from rich.markup import escape

from builder.util.text import CONTROL_CLASS

# builder.util.text's table (C0/C1 controls, DEL, separators, bidi and zero-width characters); tab and
# newline are kept only where asked.
_CONTROL = re.compile(f"[{CONTROL_CLASS}]")
_LINE_BREAKS = re.compile("[\t\n]")
MAX_LINE = 2000  # an error line longer than this is cut: it is read by people, not parsed


def plain(value: object, *, lines: bool = False, limit: int | None = None) -> str:
    """`value` as text with every control character shown as U+FFFD (tab and newline become
    spaces unless `lines`), cut to `limit` characters with a note of how much was cut."""
    text = _CONTROL.sub("\ufffd", str(value))
    if not lines:
        text = _LINE_BREAKS.sub(" ", text)
    if limit is not None and len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit} more characters)"
    return text


def markup(value: object, *, lines: bool = False, limit: int | None = None) -> str:
    """`plain`, then escaped for rich: what is printed is exactly the value's characters."""
    return escape(plain(value, lines=lines, limit=limit))
