"""`builder report`: docs/support-matrix.md and build/report/index.html from the plan, build/results and the catalog."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builder import results
from builder.catalog.store import Catalog
from builder.errors import UserError
from builder.publish import gate
from builder.workspace import Workspace


@dataclass(frozen=True)
class ReportFiles:
    markdown: Path
    html: Path
    counts: dict[str, int]
    notes: tuple[str, ...] = ()  # inputs left out, each in one line (a malformed build.json)


def report(ws: Workspace, catalog: Catalog, markdown: Path, html: Path) -> ReportFiles:
    """docs/support-matrix.md and build/report/index.html from the plan, build/results and the catalog."""
    from builder.report.html import render_html
    from builder.report.markdown import render_markdown
    from builder.report.model import build_report
    from builder.report.output import write_report

    records = catalog.load()
    specs = ws.selected(None, use_default=False)  # every planned image, with its content hash
    store = ws.store
    found = {s.id: result for s in specs if (result := gate.read_result(store.results, s.id)) is not None}
    notes: tuple[str, ...] = ()
    try:
        sizes = {b.id: b.image_mb for b in results.read_builds(store.build_summary) if b.image_mb is not None}
    except UserError as exc:  # sizes are a nicety: the report stands without them, and says why they are missing
        sizes, notes = {}, (f"image sizes left out: {exc}",)
    model = build_report(ws.decided, specs, found, records, sizes)
    write_report((markdown, render_markdown(model)), (html, render_html(model)), protected=(ws.matrix_path, catalog.file))
    return ReportFiles(markdown, html, model.counts(), notes)
