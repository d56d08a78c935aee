"""`builder report`: docs/support-matrix.md and build/report/index.html from the plan, build/results and the catalog."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builder.catalog.store import Catalog
from builder.errors import UserError
from builder.publish import gate
from builder.workspace import Workspace


@dataclass(frozen=True)
class ReportFiles:
    markdown: Path
    html: Path
    counts: dict[str, int]


def report(ws: Workspace, catalog: Catalog, markdown: Path, html: Path) -> ReportFiles:
    """docs/support-matrix.md and build/report/index.html from the plan, build/results and the catalog."""
    from builder.fsio import MiB, read_json
    from builder.report.html import render_html
    from builder.report.markdown import render_markdown
    from builder.report.model import build_report
    from builder.report.output import write_report

    records = catalog.load()
    specs = ws.selected(None, use_default=False)  # every planned image, with its content hash
    results_dir = ws.build_dir / "results"
    results = {s.id: data for s in specs if (data := gate.read_result(results_dir, s.id)) is not None}
    sizes: dict[str, float] = {}
    build_json = results_dir / "build.json"
    if build_json.exists():
        try:
            for entry in read_json(build_json, 16 * MiB, "build summary"):
                if isinstance(entry, dict) and entry.get("sizes"):
                    sizes[str(entry["id"])] = float(entry["sizes"]["image_mb"])
        except (UserError, ValueError, TypeError, KeyError):
            pass  # sizes are a nicety; the report stands without them
    model = build_report(ws.decided, specs, results, records, sizes)
    write_report((markdown, render_markdown(model)), (html, render_html(model)), protected=(ws.matrix_path, catalog.file))
    return ReportFiles(markdown, html, model.counts())
