"""Where each worker's minutes went: the integration tier's modules on each lane, in the order they
ran, with the seconds each began and ended (from the first test of the run), and the offline tests
as one span per worker. tests/conftest.py prints it at the end of any run that ran integration
tests, so every CI log shows which lane ended last and what filled it (docs/benchmarks.md: "Where
each lane's time goes"). It reads the reports' own start/stop clocks; it times nothing itself and
asserts nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

INTEGRATION = "tests/integration/"
OFFLINE = "offline tests"


class Span(NamedTuple):
    worker: str  # "gw0", "gw1", or "main" without xdist
    module: str  # tests/integration/test_x.py, or OFFLINE for every other module
    start: float
    stop: float


def spans(reports: Iterable[tuple[str, str, float, float]]) -> list[Span]:
    """(worker, test node id, start, stop) of every phase report -> one span per worker and module."""
    found: dict[tuple[str, str], Span] = {}
    for worker, nodeid, start, stop in reports:
        path = nodeid.split("::", 1)[0]
        module = path if path.startswith(INTEGRATION) else OFFLINE
        key = (worker, module)
        seen = found.get(key)
        found[key] = Span(worker, module, min(start, seen.start), max(stop, seen.stop)) if seen else Span(worker, module, start, stop)
    return sorted(found.values(), key=lambda s: (s.worker, s.start))


def summary(found: list[Span]) -> list[str]:
    """A few lines: per worker, each span as `module start-end` (seconds from the run's first test),
    and when the worker ended; nothing when no integration module ran."""
    if not any(s.module != OFFLINE for s in found):
        return []
    zero = min(s.start for s in found)
    lines = []
    for worker in sorted({s.worker for s in found}):
        mine = [s for s in found if s.worker == worker]
        parts = [f"{s.module.removeprefix(INTEGRATION)} {s.start - zero:.0f}-{s.stop - zero:.0f}" for s in mine]
        lines.append(f"{worker} (ends {max(s.stop for s in mine) - zero:.0f} s): " + ", ".join(parts))
    return lines
