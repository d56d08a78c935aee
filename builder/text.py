"""Text from outside (a package index's names, versions, Requires-Python, error bodies and reasons)
made safe to put in a message: no terminal control characters, and no unbounded length.

Why: a mirror answering `Requires-Python: \\x1b]8;;...` or an HTTP reason with `\\x1b[2J` would
otherwise drive the user's terminal through an error line, and a 1 MB "version" would flood it.
Escaping (not dropping) keeps what was sent visible, so the message still says what the mirror did.
"""

from __future__ import annotations

import re

ELLIPSIS = "…"

# C0 controls (newline and tab too: a message is one line), DEL, C1 controls (0x9b is a one-byte
# CSI on some terminals), and the Unicode format characters that reorder or hide text on screen
# (bidi embeddings/overrides/isolates, line and paragraph separators, zero-width and BOM).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """`text` with every control or invisible formatting character written as `\\xNN` / `\\uNNNN`."""
    return _CONTROL.sub(_escape, text) if _CONTROL.search(text) else text


def printable(text: object, limit: int = 200) -> str:
    """`text` (anything from the network) as it may appear in a message: control characters
    escaped, and at most `limit` characters, the rest cut with an ellipsis."""
    shown = escape_controls(str(text))
    return shown if len(shown) <= limit else shown[: max(0, limit - 1)] + ELLIPSIS
