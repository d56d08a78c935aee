"""`builder test` on the terminal: a line per image on stderr, the summary table on stdout."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from builder.model.plan import ImageSpec
from builder.model.results import SmokeResult
from builder.ui.status import styled
from builder.ui.text import markup


class TestLines:
    """app.TestEvents as plain lines on stderr."""

    def __init__(self, err: Console) -> None:
        self.err = err

    def started(self, spec: ImageSpec) -> None:
        self.err.print(f"testing {markup(spec.id)} ...")

    def done(self, result: SmokeResult) -> None:
        cuda = f", {result.cuda_checks_passed}/{len(result.cuda_checks)} CUDA checks without a GPU passed" if result.cuda_checks else ""
        self.err.print(f"{styled(result.verdict)} {markup(result.id)} ({result.seconds:.1f}s{cuda})")


def print_test_summary(out: Console, results: Sequence[SmokeResult]) -> None:
    table = Table(title="smoke tests", title_justify="left")
    for column in ("image", "verdict", "frameworks", "gpu", "tests", "cuda checks", "seconds", "diagnosis"):
        table.add_column(column, overflow="fold")
    for r in results:
        found = r.probe.frameworks if r.probe else {}
        frameworks = " ".join(f"{name}:{res.status}" for name, res in found.items() if res.status != "not-installed")
        tests = f"{r.tests.passed}/{r.tests.tests}" if r.tests.tests else "-"
        diagnosis = "; ".join(f"{d.framework}: {d.cause} -> {d.fix}" for d in r.diagnoses) or "; ".join(r.failures)[:300]
        cuda = f"{r.cuda_checks_passed}/{len(r.cuda_checks)} passed" if r.cuda_checks else "-"
        table.add_row(
            markup(r.id),
            styled(r.verdict),
            markup(frameworks),
            markup(r.gpu.reason),
            tests,
            cuda,
            f"{r.seconds:.1f}",
            markup(diagnosis),
        )
    out.print(table)


def print_base_result(out: Console, result: SmokeResult) -> None:
    """A base-level smoke test: its verdict and why, each HIP check, and the measured AMD fit."""
    out.print(f"{styled(result.verdict)} {markup(result.id)} ({result.seconds:.1f}s): {markup(result.gpu.reason)}")
    table = Table(title="HIP checks", title_justify="left")
    for column in ("check", "ok", "detail"):
        table.add_column(column, overflow="fold")
    for check in result.hip_checks:
        table.add_row(markup(check.name), "yes" if check.ok else "[red]no[/red]", markup(check.detail))
    out.print(table)
    if result.amd_fit is not None:
        libraries = len(result.amd_fit.libraries)
        out.print(f"measured AMD fit ({libraries} libraries with code objects): {' '.join(result.amd_fit.targets) or 'none'}")
    else:
        out.print(f"measured AMD fit: not measured ({markup(result.fit_error)})")
