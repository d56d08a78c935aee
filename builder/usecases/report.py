"""`builder report`: docs/support-matrix.md and build/report/index.html from the plan, build/results and the catalog."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from builder.catalog.shares import MB, shares
from builder.catalog.store import Catalog
from builder.model import reproduced, results
from builder.model.plan import ImageSpec
from builder.model.results import SmokeResult
from builder.util.errors import UserError
from builder.workspace import Workspace


@dataclass(frozen=True)
class ReportFiles:
    markdown: Path
    html: Path
    counts: dict[str, int]
    notes: tuple[str, ...] = ()  # inputs left out, each in one line (a malformed build.json, an edited result)


def report(ws: Workspace, catalog: Catalog, markdown: Path, html: Path) -> ReportFiles:
    """docs/support-matrix.md and build/report/index.html from the plan, build/results and the catalog."""
    from builder.report.html import render_html
    from builder.report.markdown import render_markdown
    from builder.report.model import build_report
    from builder.report.output import write_report

    records = catalog.load()
    specs = ws.selected(None, use_default=False)  # every planned image, with its content hash
    store = ws.store
    found, notes = _results(store.results, specs)
    try:
        builds = results.read_builds(store.build_summary)
        sizes = {b.id: b.image_mb for b in builds if b.image_mb is not None}
        shared = {b.id: b.shared_mb for b in builds if b.shared_mb is not None}
    except UserError as exc:  # sizes are a nicety: the report stands without them, and says why they are missing
        sizes, shared = {}, {}
        notes.append(f"image sizes left out: {exc}")
    # a published image's size is its record's, so its shared MB is too: among the catalog's records of its line
    shared.update({i: round(share.shared / MB, 1) for i, share in shares(records).items()})
    try:
        verdicts = reproduced.load(store.reproduced)
    except UserError as exc:  # like sizes: the report stands without them, and says why
        verdicts = {}
        notes.append(f"reproduce verdicts left out: {exc}")
    model = build_report(ws.decided, specs, found, records, sizes, base_results=_base_results(ws, notes), verdicts=verdicts, shared=shared)
    write_report((markdown, render_markdown(model)), (html, render_html(model)), protected=(ws.matrix_path, catalog.file))
    return ReportFiles(markdown, html, model.counts(), tuple(notes))


def _base_results(ws: Workspace, notes: list[str]) -> dict[str, SmokeResult | None]:
    """Each base with a base-level smoke test (smoke/base.py) -> its last result, None when untested."""
    from builder.smoke.base import has_smoke_test

    found: dict[str, SmokeResult | None] = {}
    for base in ws.matrix.bases:
        if not has_smoke_test(base):
            continue
        try:
            found[base.name] = results.load(ws.store.results, base.name)
        except UserError as exc:
            notes.append(f"base smoke result left out, shown as untested: {exc}")
            found[base.name] = None
    return found


def _results(results_dir: Path, specs: Sequence[ImageSpec]) -> tuple[dict[str, SmokeResult], list[str]]:
    """Each image's last smoke result; one this tool cannot vouch for (edited, malformed, not the
    test run's) is shown as untested and named in a note, never passed off as silence."""
    found: dict[str, SmokeResult] = {}
    notes: list[str] = []
    for spec in specs:
        try:
            result = results.load(results_dir, spec.id)
        except UserError as exc:
            notes.append(f"smoke result left out, shown as untested: {exc}")
            continue
        if result is not None:
            found[spec.id] = result
    return found, notes
