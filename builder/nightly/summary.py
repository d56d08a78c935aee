"""The nightly's Markdown summary (fit for $GITHUB_STEP_SUMMARY): regressions first, with their
diagnosis; then new releases, lock drift, and every image's outcome. Pure: a report in, text out.
Every value (release metadata from the index, diagnoses, ids) goes through report.markdown's `text`
or `code`: none can end a table cell, start a row or a heading, or inject HTML."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from builder.nightly.compare import Change, NightlyReport
from builder.report.markdown import code, text
from builder.report.output import SUMMARY_MARKER


def _cell(value: object) -> str:
    return text(value) or " "


def _table(head: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def render(report: NightlyReport) -> str:
    """The job summary: title, regressions, the run's problems, new releases, lock drift, every image."""
    regressions = [c for c in report.changes if c.kind == "regression"]
    out = [f"# Nightly {text(report.date)}: {_title(report, len(regressions))}", ""]
    out += _regressions(regressions)
    out += _notes(report)
    out += ["## New releases", ""] + _releases(report)
    out += ["", "## Lock drift", ""] + _drift(report)
    out += ["", "## Images", ""] + _images(report)
    out += ["", SUMMARY_MARKER]  # invisible when rendered; lets the next nightly replace this file
    return "\n".join(out) + "\n"


def _title(report: NightlyReport, regressions: int) -> str:
    title = f"{regressions} regression(s)" if regressions else "no regressions"
    if not report.notes:
        return title
    # a stage failed: the exit code is 1 whatever the comparison says
    blocked = len(report.blocked)
    if blocked:
        return f"{title}; run failed: {blocked} of {len(report.outcomes)} image(s) could not be built"
    return f"{title}; run failed: {len(report.notes)} problem(s)"


def _regressions(regressions: list[Change]) -> list[str]:
    if not regressions:
        return []
    rows = ((c.id, c.before, c.now, c.detail) for c in regressions)
    return ["## Regressions (passed before, fail now)", "", *_table(("image", "before", "now", "diagnosis"), rows), ""]


def _notes(report: NightlyReport) -> list[str]:
    return [f"> {text(note)}" for note in report.notes] + ([""] if report.notes else [])


# What the releases section says when it lists none, by how the check for them went.
NO_RELEASES = {"not-checked": "not checked (--no-updates)", "failed": "could not be checked (see above)"}


def _releases(report: NightlyReport) -> list[str]:
    if report.releases:
        found = (
            (r.framework, r.version, r.status, r.requires_python or "", r.cuda or "", r.numpy or "", r.reason) for r in report.releases
        )
        out = _table(("framework", "release", "status", "Requires-Python", "CUDA", "NumPy", "detail"), found)
    else:
        out = [NO_RELEASES.get(report.updates, "none newer than matrix.yaml lists")]
    if report.applied:
        out += ["", "Added to matrix.yaml: " + ", ".join(code(a) for a in report.applied)]
    return out


def _drift(report: NightlyReport) -> list[str]:
    if not report.drift:
        return ["no lock changed"]
    out = []
    for image, changes in report.drift:
        moves = ", ".join(f"{text(name)} {text(old or '(new)')} -> {text(new or '(removed)')}" for name, old, new in changes)
        out.append(f"- {code(image)}: {moves}")
    return out


def _images(report: NightlyReport) -> list[str]:
    by_id = {o.id: o for o in report.outcomes}
    rows = []
    for c in report.changes:
        o = by_id[c.id]
        published = o.published or (f"held: {o.held}" if o.held else "-")
        rows.append(
            (c.id, c.kind, c.before or "-", c.now, "yes" if o.rebuilt else "no", published, c.detail if c.kind != "regression" else "")
        )
    return _table(("image", "change", "before", "now", "rebuilt", "published", "detail"), rows)
