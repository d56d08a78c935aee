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

from tests.cpu_meter import Reading

INTEGRATION = "tests/integration/"
OFFLINE = "offline tests"


class Span(NamedTuple):
    worker: str  # "gw0", "gw1", or "main" without xdist
    module: str  # tests/integration/test_x.py, or OFFLINE for every other module
    start: float
    stop: float


def _module(nodeid: str) -> str:
    """A test's module when it is an integration test, else OFFLINE."""
    path = nodeid.split("::", 1)[0]
    return path if path.startswith(INTEGRATION) else OFFLINE


def spans(reports: Iterable[tuple[str, str, float, float]]) -> list[Span]:
    """(worker, test node id, start, stop) of every phase report -> one span per worker and module."""
    found: dict[tuple[str, str], Span] = {}
    for worker, nodeid, start, stop in reports:
        module = _module(nodeid)
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


# --- CPU by module (tests/cpu_meter.py reads the counters) ------------------------------------
Phase = tuple[str, str, float, float, float | None]  # (worker, node id, start, stop, the worker's CPU-s at its report)
LANE_ENGINES = {"gw0": ("engine", "containers"), "gw1": ("engine 2", "containers 2")}  # a lane's engine and its containers


def worker_cpu(phases: Iterable[Phase]) -> dict[tuple[str, str], float]:
    """(worker, module) -> the CPU-s its worker spent on it: each report's count less the same
    worker's previous one (a worker runs one test at a time, so modules that interleave on a worker,
    the offline tests and an integration module, are each charged their own phases). A worker's
    first phase carries its start and collection too."""
    last: dict[str, float] = {}
    out: dict[tuple[str, str], float] = {}
    for worker, nodeid, _, _, seconds in sorted(phases, key=lambda p: p[3]):
        if seconds is None:
            continue
        key = (worker, _module(nodeid))
        out[key] = out.get(key, 0.0) + seconds - last.get(worker, 0.0)
        last[worker] = seconds
    return out


def during(readings: list[tuple[float, Reading]], start: float, stop: float) -> Reading:
    """Each consumer's CPU-s between the last reading at or before `start` and the first at or after
    `stop` (the nearest ones where none is); a consumer missing from either reading is left out."""
    if not readings:
        return {}
    ordered = sorted(readings, key=lambda r: r[0])
    before = next((r for t, r in reversed(ordered) if t <= start), ordered[0][1])
    after = next((r for t, r in ordered if t >= stop), ordered[-1][1])
    return {key: after[key] - before[key] for key in before if key in after}


def _total(spent: Reading, keys: list[str]) -> float | None:
    """The sum of the consumers that could be read; None (a blank, not a 0) when none could."""
    found = [spent[key] for key in keys if key in spent]
    return sum(found) if found else None


def _figure(value: float | None) -> str:
    return "" if value is None else f"{value:,.0f}"


def cpu_table(found: list[Span], phases: Iterable[Phase], readings: list[tuple[float, Reading]]) -> list[str]:
    """Per worker and module: its wall seconds, its worker's CPU-s, and the CPU-s its engine and the
    engine's containers spent while it ran (a lane's own engine, LANE_ENGINES; both engines for a
    module on another worker, whose engines the lanes use meanwhile too); then the run's total by
    consumer. Nothing when no integration module ran."""
    if not any(s.module != OFFLINE for s in found):
        return []
    spent = worker_cpu(phases)
    rows = [f"{'worker module':42} {'wall s':>7} {'worker':>7} {'engine':>7} {'containers':>10}"]
    for span in found:
        engine = containers = None
        if span.module != OFFLINE:
            meanwhile = during(readings, span.start, span.stop)
            keys = [LANE_ENGINES[span.worker]] if span.worker in LANE_ENGINES else list(LANE_ENGINES.values())
            engine = _total(meanwhile, [e for e, _ in keys])
            containers = _total(meanwhile, [c for _, c in keys])
        name = f"{span.worker} {span.module.removeprefix(INTEGRATION)}" + (
            "" if span.worker in LANE_ENGINES or span.module == OFFLINE else " (both engines)"
        )
        rows.append(
            f"{name:42} {span.stop - span.start:7,.0f} {_figure(spent.get((span.worker, span.module))):>7} "
            f"{_figure(engine):>7} {_figure(containers):>10}"
        )
    whole = during(readings, min(s.start for s in found), max(s.stop for s in found))
    workers = sum(spent.values())
    parts = [f"workers {workers:,.0f}"] + [f"{key} {value:,.0f}" for key, value in sorted(whole.items()) if key != "machine"]
    if "machine" in whole:
        rest = whole["machine"] - workers - sum(v for k, v in whole.items() if k != "machine")
        parts.append(f"the rest {rest:,.0f} (pytest's controller, the kernel's threads, other processes)")
        rows.append(f"the run: the machine {whole['machine']:,.0f} CPU-s: " + ", ".join(parts))
    else:
        rows.append("the run: " + ", ".join(parts))
    return rows
