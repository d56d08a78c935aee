"""`builder run` on the terminal: build progress and test lines while it runs, each stage's table when it ends."""

from __future__ import annotations

from collections.abc import Sequence

from builder.engine.build import BuildResult
from builder.model.results import SmokeResult
from builder.ui.build import BuildProgress, print_build_summary
from builder.ui.terminal import err, out
from builder.ui.test import TestLines, print_test_summary


class RunSummary:
    """usecases.run.RunEvents for the terminal."""

    def __init__(self) -> None:
        self.build = BuildProgress(err)
        self.test = TestLines(err)

    def built(self, results: Sequence[BuildResult]) -> None:
        print_build_summary(out, results)

    def tested(self, results: Sequence[SmokeResult]) -> None:
        if results:
            print_test_summary(out, results)
