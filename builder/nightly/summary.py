"""The nightly's Markdown summary (fit for $GITHUB_STEP_SUMMARY): regressions first, with their
diagnosis; then new releases, lock drift, and every image's outcome. Pure: a report in, text out.
Every value (release metadata from the index, diagnoses, ids) goes through report.markdown's `text`
or `code`: none can end a table cell, start a row or a heading, or inject HTML."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from builder.nightly.compare import NightlyReport
from builder.report.markdown import code, text
from builder.report.output import SUMMARY_MARKER


def _cell(value: object) -> str:
    return text(value) or " "


def _table(head: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def render(report: NightlyReport) -> str:
    regressions = [c for c in report.changes if c.kind == "regression"]
    title = f"{len(regressions)} regression(s)" if regressions else "no regressions"
    if report.notes:  # a stage failed: the exit code is 1 whatever the comparison says
        blocked = len(report.blocked)
        title += (
            f"; run failed: {blocked} of {len(report.outcomes)} image(s) could not be built"
            if blocked
            else f"; run failed: {len(report.notes)} problem(s)"
        )
    out = [f"# Nightly {text(report.date)}: {title}", ""]
    if regressions:
        out += ["## Regressions (passed before, fail now)", ""]
        out += _table(("image", "before", "now", "diagnosis"), ((c.id, c.before, c.now, c.detail) for c in regressions))
        out.append("")
    for note in report.notes:
        out.append(f"> {text(note)}")
    if report.notes:
        out.append("")
    out += ["## New releases", ""]
    if report.releases:
        found = (
            (r.framework, r.version, r.status, r.requires_python or "", r.cuda or "", r.numpy or "", r.reason) for r in report.releases
        )
        out += _table(("framework", "release", "status", "Requires-Python", "CUDA", "NumPy", "detail"), found)
    elif report.updates == "not-checked":
        out.append("not checked (--no-updates)")
    elif report.updates == "failed":
        out.append("could not be checked (see above)")
    else:
        out.append("none newer than matrix.yaml lists")
    if report.applied:
        out += ["", "Added to matrix.yaml: " + ", ".join(code(a) for a in report.applied)]
    out += ["", "## Lock drift", ""]
    if report.drift:
        for image, changes in report.drift:
            moves = ", ".join(f"{text(name)} {text(old or '(new)')} -> {text(new or '(removed)')}" for name, old, new in changes)
            out.append(f"- {code(image)}: {moves}")
    else:
        out.append("no lock changed")
    out += ["", "## Images", ""]
    by_id = {o.id: o for o in report.outcomes}
    rows = []
    for c in report.changes:
        o = by_id[c.id]
        published = o.published or (f"held: {o.held}" if o.held else "-")
        rows.append(
            (c.id, c.kind, c.before or "-", c.now, "yes" if o.rebuilt else "no", published, c.detail if c.kind != "regression" else "")
        )
    out += _table(("image", "change", "before", "now", "rebuilt", "published", "detail"), rows)
    out += ["", SUMMARY_MARKER]  # invisible when rendered; lets the next nightly replace this file
    return "\n".join(out) + "\n"
