"""The support matrix as one standalone HTML page (no scripts, no external assets)."""

from __future__ import annotations

from pathlib import Path

import jinja2

from builder.report.model import LABELS, STATUSES, Report

TEMPLATE = Path(__file__).resolve().parent / "page.html.j2"


def render_html(report: Report, title: str = "Support matrix") -> str:
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(TEMPLATE.read_text(encoding="utf-8"))
    return template.render(report=report, statuses=STATUSES, labels=LABELS, counts=report.counts(), title=title)
