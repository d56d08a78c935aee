"""Message hygiene in one neutral module: credentials masked in any URL (`redact`), and text from
outside (a package index's names, versions, Requires-Python, error bodies and reasons) made safe to
put in a message (`printable`): no terminal control characters, no unbounded length.

Why: a mirror answering `Requires-Python: \\x1b]8;;...` or an HTTP reason with `\\x1b[2J` would
otherwise drive the user's terminal through an error line, and a 1 MB "version" would flood it.
Escaping (not dropping) keeps what was sent visible, so the message still says what the mirror did.
"""

from __future__ import annotations

import bisect
import re
from datetime import UTC, datetime

ELLIPSIS = "…"

# C0 controls but tab and newline, DEL, C1 controls (0x9b is a one-byte CSI on some terminals), and
# the Unicode format characters that reorder or hide text on screen (bidi embeddings/overrides/
# isolates, line and paragraph separators, zero-width and BOM): the one table of characters that
# never reach a terminal as they are (ui/text.py builds its regex from it too).
CONTROL_CLASS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff"
_CONTROL = re.compile(f"[\t\n{CONTROL_CLASS}]")  # a message is one line: tab and newline too


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


_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_HOST_START = re.compile(r"[\w\[%]")
_AT, _BREAK, _SPACE, _DELIMITER = re.compile("@"), re.compile(r"[\r\n]"), re.compile(r"\s"), re.compile("[/?#]")
MASK = "****"


def redact(text: str) -> str:
    """Credentials in URLs (`user:password@`, `token@`) -> `****@`, and every query value
    (`?token=s3cret` -> `?token=****`), for anything written to logs, results or messages.

    A URL's userinfo is everything from `://` to the LAST `@` before its host, so a user name that is
    an e-mail address (`me@corp.example:pw@host`, usual on Artifactory and Nexus) and a password with
    spaces, `@` or `:` are masked whole. The last `@` is looked for twice, and the later one wins:
    in the authority (up to the first `/`, `?` or `#`; spaces allowed), and in the URL's first
    whitespace-free stretch (a raw `/`, `?` or `#` inside a password, which no client parses but a
    message could still print). It never looks past the end of the line or the next `scheme://`, and
    only at an `@` followed by a host, so `user:password@ in the URL` in prose is left alone. When in
    doubt it masks more (`git+https://host/repo@v1` shows as `git+https://****@v1`): a message with
    less detail is a fair price for a password that never reaches a log."""
    schemes = _schemes(text)
    if not schemes:
        return text
    return _mask_queries(_mask_userinfo(text, schemes))


def _mask_userinfo(text: str, schemes: list[tuple[int, int]]) -> str:
    ats = [i for i in _positions(_AT, text) if _HOST_START.match(text, i + 1)]
    breaks, spaces, delimiters = _positions(_BREAK, text), _positions(_SPACE, text), _positions(_DELIMITER, text)
    scheme_starts = [s for s, _ in schemes]
    out: list[str] = []
    done = 0
    for _, start in schemes:
        if start < done:
            continue  # a `scheme://` inside what was just masked
        line_end = _next(breaks, start, len(text))
        following = min(_next(scheme_starts, start, len(text)), line_end)  # the authority never runs into the next URL
        authority_end = min(_next(delimiters, start, len(text)), following)
        stretch_end = min(_next(spaces, start, len(text)), line_end)  # the first whitespace-free stretch
        i = bisect.bisect_left(ats, max(authority_end, stretch_end)) - 1
        if i >= 0 and ats[i] >= start:
            out += [text[done:start], MASK]
            done = ats[i]
    out.append(text[done:])
    return "".join(out)


_URL_END = re.compile(r"[\s'\"<>`]")
_QUESTION = re.compile(r"\?")
_QUERY_ITEM = re.compile(r"([^&;#=]*)(=?)([^&;#]*)")


def _mask_queries(text: str) -> str:
    """Every query value of a URL -> `****` (`?token=s3cret&x=1` -> `?token=****&x=****`, a bare
    `?s3cret` -> `?****`): signed URLs and `?token=` mirrors carry credentials there, and a value
    is not worth guessing about. The fragment (`#sha256=...`) stays. A URL ends at whitespace, a
    quote, `<`, `>` or the next `scheme://`; each part of the text is looked at once."""
    if "?" not in text:
        return text
    schemes = _schemes(text)  # again: masking the userinfo moved them
    ends, questions = _positions(_URL_END, text), _positions(_QUESTION, text)
    starts = [s for s, _ in schemes]
    out: list[str] = []
    done = 0
    for index, (_, start) in enumerate(schemes):
        end = min(_next(ends, start, len(text)), starts[index + 1] if index + 1 < len(starts) else len(text))
        query = _next(questions, start, len(text))
        if query >= end:
            continue
        stop = text.find("#", query, end)
        stop = end if stop < 0 else stop
        out += [text[done : query + 1], _QUERY_ITEM.sub(_mask_item, text[query + 1 : stop])]
        done = stop
    out.append(text[done:])
    return "".join(out)


def _mask_item(item: re.Match[str]) -> str:
    name, equals, _ = item.groups()
    return f"{name}={MASK}" if equals else MASK if name else ""


def _schemes(text: str) -> list[tuple[int, int]]:
    """(where `scheme://` starts, where its `//` ends) for every `://` in `text`. Found from each `://`
    backwards (a scheme is at most 32 characters here), never by a pattern that restarts at every
    letter of a long word, so a megabyte of letters costs a megabyte of work."""
    out = []
    at = text.find("://")
    while at >= 0:
        start = at
        while start > 0 and at - start < 32 and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        out.append((start, at + 3))
        at = text.find("://", at + 3)
    return out


def _positions(pattern: re.Pattern[str], text: str) -> list[int]:
    """Where `pattern` matches, in order: found once, so redacting a long log stays linear-ish."""
    return [m.start() for m in pattern.finditer(text)]


def _next(positions: list[int], start: int, default: int) -> int:
    """The first position at or after `start`, else `default` (positions are sorted)."""
    i = bisect.bisect_left(positions, start)
    return positions[i] if i < len(positions) else default


def utc_stamp(epoch: float | None = None) -> str:
    """A UTC time in ISO 8601 to the second with a Z (now, or the Unix time `epoch`): every date the project records."""
    moment = datetime.now(UTC) if epoch is None else datetime.fromtimestamp(epoch, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
