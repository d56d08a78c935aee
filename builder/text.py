"""Message hygiene in one neutral module: credentials masked in any URL (`redact`), and text from
outside (a package index's names, versions, Requires-Python, error bodies and reasons) made safe to
put in a message (`printable`): no terminal control characters, no unbounded length.

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


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_LINE_END = re.compile(r"[\r\n]")
_AUTHORITY_END = re.compile(r"[/?#]")
_HOST_START = re.compile(r"[\w\[%]")
MASK = "****"


def redact(text: str) -> str:
    """Credentials in URLs (`user:password@`, `token@`) -> `****@`, for anything written to logs,
    results or messages.

    A URL's userinfo is everything from `://` to the LAST `@` before its host, so a user name that is
    an e-mail address (`me@corp.example:pw@host`, usual on Artifactory and Nexus) and a password with
    spaces, `@` or `:` are masked whole. The last `@` is looked for twice, and the later one wins:
    in the authority (up to the first `/`, `?` or `#`; spaces allowed), and in the URL's first
    whitespace-free stretch (a raw `/`, `?` or `#` inside a password, which no client parses but a
    message could still print). It never looks past the end of the line or the next `scheme://`, and
    only at an `@` followed by a host, so `user:password@ in the URL` in prose is left alone. When in
    doubt it masks more (`git+https://host/repo@v1` shows as `git+https://****@v1`): a message with
    less detail is a fair price for a password that never reaches a log."""
    out: list[str] = []
    done = 0
    for match in _SCHEME.finditer(text):
        start = match.end()
        if start < done:
            continue  # a `scheme://` inside what was just masked
        at = _userinfo_end(text, start)
        if at > 0:
            out.append(text[done:start])
            out.append(MASK)
            done = start + at
    out.append(text[done:])
    return "".join(out)


def _userinfo_end(text: str, start: int) -> int:
    """How far past `start` (just after `://`) the `@` that ends the userinfo is, or -1."""
    line = _LINE_END.search(text, start)
    end = line.start() if line else len(text)
    following = _SCHEME.search(text, start, end)  # the authority never runs into the next URL
    cut = _AUTHORITY_END.search(text, start, following.start() if following else end)
    authority = text[start : cut.start() if cut else following.start() if following else end]
    stretch = text[start:end].split(None, 1)[0] if end > start and not text[start].isspace() else ""
    return max(_last_at(authority), _last_at(stretch))


def _last_at(text: str) -> int:
    """The last `@` in `text` that is followed by something a host can start with."""
    at = text.rfind("@")
    while at >= 0 and not _HOST_START.match(text, at + 1):
        at = text.rfind("@", 0, at)
    return at
