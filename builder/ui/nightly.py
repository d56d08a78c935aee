"""`builder nightly` and `builder updates` on the terminal: stage lines while it runs, then the
comparison (regressions first) and the release table."""

from __future__ import annotations

from collections.abc import Sequence

import click
from rich.console import Console

from builder.nightly.compare import NightlyReport
from builder.ui.build import BuildProgress
from builder.ui.catalog import PublishLines
from builder.ui.lock import LockLines
from builder.ui.rows import print_rows
from builder.ui.status import styled
from builder.ui.terminal import emit_json, out
from builder.ui.test import TestLines
from builder.ui.text import markup, plain
from builder.updates.releases import Release
from builder.usecases.nightly import NightlyRun
from builder.usecases.updates import Updates


class NightlyLines:
    """usecases.nightly.NightlyEvents for the terminal (stderr)."""

    def __init__(self, err: Console) -> None:
        self.err = err
        self.lock = LockLines(err)

    def stage(self, name: str) -> None:
        self.err.print(f"[bold]== {markup(name)}[/]")

    def info(self, text: str) -> None:
        self.err.print(markup(text))

    def build(self) -> BuildProgress:
        return BuildProgress(self.err)

    def test(self) -> TestLines:
        return TestLines(self.err)

    def publish(self) -> PublishLines:
        return PublishLines(self.err)


def print_releases(out: Console, releases: Sequence[Release]) -> None:
    rows = [(r.framework, r.version, r.status, r.requires_python or "", r.cuda or "", r.numpy or "", r.reason) for r in releases]
    if not rows:
        out.print("no release newer than matrix.yaml lists")
        return
    print_rows(out, "new releases", ("framework", "release", "status", "Requires-Python", "CUDA", "NumPy", "detail"), rows)


def print_nightly(out: Console, report: NightlyReport) -> None:
    rows = [(c.id, c.kind, c.before or "-", c.now, c.detail) for c in report.changes]
    print_rows(out, "nightly", ("image", "change", "before", "now", "detail"), rows)
    for note in report.notes:
        out.print(f"{styled('failed')} {markup(note)}")
    bad = [c for c in report.changes if c.kind == "regression"]
    if bad:
        out.print(f"{styled('failed')} {len(bad)} regression(s): {markup(', '.join(c.id for c in bad))}")


def show_updates(found: Updates, fmt: str) -> None:
    if fmt == "json":
        emit_json(found.to_json())
    else:
        print_releases(out, found.found.releases)
    for line in found.applied:
        click.echo(line, err=True)


def show_nightly(run: NightlyRun) -> None:
    print_nightly(out, run.report)
    click.echo(plain(f"summary: {run.summary}"), err=True)
