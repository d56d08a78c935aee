"""The support matrix as one standalone HTML page (no scripts, no external assets). Every value is
escaped by jinja2's autoescape; the generator <meta> tag marks the page as builder's own."""

from __future__ import annotations

from pathlib import Path

import jinja2

from builder.report.model import LABELS, STATUSES, Report
from builder.report.output import HTML_GENERATOR, HTML_MARKER

TEMPLATE = Path(__file__).resolve().parent / "page.html.j2"


def render_html(report: Report, title: str = "Support matrix") -> str:
    env = jinja2.Environment(
        autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True
    )
    template = env.from_string(TEMPLATE.read_text(encoding="utf-8"))
    page = template.render(report=report, statuses=STATUSES, labels=LABELS, counts=report.counts(), title=title, generator=HTML_GENERATOR)
    assert HTML_MARKER in page  # what lets the next run replace this page (report/output.py)
    return page
