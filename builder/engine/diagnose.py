"""Explain a GPU-container failure from its log: which known message it is, and the fix.

The table of known messages lives in `builder.probes.hello_gpu` (DIAGNOSES), because the probe
inside every image uses it too; this module only finds the line of a long log (build output,
`docker run` stderr, a probe's JSON) that the table recognises.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Match = Callable[[str], tuple[str, str] | None]
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
MAX_LINE = 300


@dataclass(frozen=True)
class Diagnosis:
    cause: str
    fix: str
    line: str  # the log line that matched, trimmed; "" when only the whole text matched


def _clean(line: str) -> str:
    line = _ANSI.sub("", line).strip()
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 3] + "..."


def _line_of(text: str, table: Sequence[tuple[str, str, str]], found: tuple[str, str]) -> str:
    """For a message that only matches across lines: the line where its match starts."""
    for pattern, cause, fix in table:
        hit = re.search(pattern, text, re.IGNORECASE)  # as hello_gpu.diagnose searches
        if hit and (hit.expand(cause), hit.expand(fix)) == found:
            start = text.rfind("\n", 0, hit.start()) + 1
            end = text.find("\n", hit.start())
            return _clean(text[start : end if end != -1 else len(text)])
    return ""


def diagnose_text(
    text: str,
    match: Match | None = None,
    table: Sequence[tuple[str, str, str]] | None = None,
) -> Diagnosis | None:
    """Cause and fix for a log, with the line that shows it; None when no known message occurs.

    The answer is the one `hello_gpu.diagnose` gives for the whole text (DIAGNOSES is ordered
    most specific first, so a root cause beats the generic symptom it leads to); the line is
    the first one that message occurs on. `match` and `table` default to hello_gpu's
    `diagnose` and `DIAGNOSES`.
    """
    if match is None or table is None:
        from builder.probes import hello_gpu

        match = hello_gpu.diagnose if match is None else match
        table = hello_gpu.DIAGNOSES if table is None else table
    found = match(text)
    if found is None:
        return None
    for line in text.splitlines():
        if line.strip() and match(line) == found:
            return Diagnosis(cause=found[0], fix=found[1], line=_clean(line))
    return Diagnosis(cause=found[0], fix=found[1], line=_line_of(text, table, found))
