"""Colours for statuses and verdicts, shared by every table."""

from __future__ import annotations

from builder.ui.text import markup

STYLE = {
    "built": "green",
    "up-to-date": "green",
    "passed": "green",
    "gpu-skipped": "yellow",
    "failed": "red",
    "interrupted": "red",
    "not-built": "yellow",
    "locked": "green",
    "current": "green",
    "unlocked": "yellow",
    "missing": "red",
    "stale": "red",
    "unreachable": "red",
    "unresolvable": "red",
    "not-locked": "yellow",
    "published": "green",
    "indexed": "green",
    "would-publish": "green",
    "refused": "yellow",
    "present": "green",
}


def styled(status: str) -> str:
    return f"[{STYLE.get(status, 'white')}]{markup(status)}[/]"
