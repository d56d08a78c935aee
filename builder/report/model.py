"""One row per planned image and per combination the rules skipped, and the base x stack grid."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from builder.catalog.records import KnownGood
from builder.compat import lifecycle
from builder.compat.facts import Compat
from builder.compat.rules import table
from builder.fit.runs_on import rocm_runs_on, runs_on
from builder.model import reproduced as reproduction
from builder.model.plan import AMD64, PLATFORM_ARCH, ImageSpec, Plan, platform_suffix
from builder.model.results import SmokeResult, is_good

# In the order a reader cares: what can be pulled first. `passed`: tested, not published yet.
STATUSES = ("known-good", "passed", "gpu-skipped", "failed", "not-built", "skipped")
LABELS = {
    "known-good": "known-good (published, passed)",
    "passed": "passed, not published",
    "gpu-skipped": "gpu-skipped (no GPU ran it)",
    "failed": "failed",
    "not-built": "not built or not tested",
    "skipped": "skipped by a rule",
}


@dataclass(frozen=True)
class Row:
    id: str  # the image id; for a skipped combination, its frameworks and python
    base: str
    stack: str
    python: str
    frameworks: str  # "torch 2.14.1"
    accelerator: str  # "CUDA 13.0", "ROCm 6.4", "CPU"
    status: str
    detail: str  # the reason, the diagnosis, or the verdict's host
    digest: str = ""
    size_mb: float | None = None
    shared_mb: float | None = None  # of size_mb, the MB above the base another image of its line holds too (build_report's `shared`)
    date: str = ""
    runs_on: str = ""  # known-good: compute capabilities, min driver, arch (builder/fit/runs_on.py)
    platform: str = AMD64  # linux/amd64, linux/arm64: what it is built, locked and run for


@dataclass(frozen=True)
class EndOfLifeRow:
    """One line (Python, OS, CUDA, a framework's) of the planned images and the day its support ends."""

    line: str  # "Python 3.11", "debian12"
    date: str  # ISO
    images: int  # how many planned images use it
    past: bool  # already past on the report's day
    policy: bool = False  # this project's support window (a framework line), not a vendor's end of life


@dataclass(frozen=True)
class BaseRow:
    """A base tested at base level (a bootstrapped ROCm base: no framework, HIP checks up to the device call)."""

    base: str
    status: str  # gpu-skipped (its best: nothing ran on a GPU), failed, not-built
    checks: str  # "6/6 HIP checks passed"
    runs_on: str  # the measured AMD fit: the gfx targets of its libraries' code objects
    detail: str  # the failed checks, or each check's name
    date: str = ""


@dataclass(frozen=True)
class Report:
    rows: tuple[Row, ...]
    bases: tuple[str, ...]
    stacks: tuple[str, ...]
    end_of_life: tuple[EndOfLifeRow, ...] = ()  # soonest first (compat/data/lifecycle.yaml)
    base_tests: tuple[BaseRow, ...] = ()  # the bases with a base-level smoke test, in matrix order
    reproduced: tuple[reproduction.Verdict, ...] = ()  # `builder reproduce`'s verdicts of the records as published now, by id

    def cell(self, base: str, stack: str) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.base == base and r.stack == stack)

    def counts(self) -> dict[str, int]:
        return {s: sum(r.status == s for r in self.rows) for s in STATUSES}


def _accelerator(spec: ImageSpec) -> str:
    if spec.base.vendor == "cpu":
        return "CPU"
    return f"{'CUDA' if spec.base.vendor == 'cuda' else 'ROCm'} {spec.accelerator.version}"  # the lock's CUDA (builder.lock.claims)


MAX_DETAIL = 300  # characters of a diagnosis shown in a cell


def _status(spec: ImageSpec, record: KnownGood | None, result: SmokeResult | None) -> tuple[str, str]:
    """`result`: the typed smoke result (results.load refused a file of the wrong shape before here)."""
    current = result if result is not None and result.content_hash == spec.content_hash else None
    if current is not None and current.verdict == "failed":
        found = [f"{d.framework}: {d.cause}".strip(": ") for d in current.diagnoses]
        return "failed", ("; ".join(found) or next(iter(current.failures), "failed"))[:MAX_DETAIL]
    if record is not None:
        status = "gpu-skipped" if record.verdict == "gpu-skipped" else "known-good"
        return status, f"on {record.host.gpu}" + (f", driver {record.host.driver}" if record.host.driver else "")
    if current is not None and is_good(current.verdict):
        return current.verdict, current.gpu.reason[:MAX_DETAIL]
    return "not-built", "no smoke result for its current content hash"


def _runs_on(spec: ImageSpec, record: KnownGood | None, compat: Compat) -> str:
    """The record's cell (fit/runs_on.py); a ROCm image not yet published shows the gfx targets
    measured from its locked wheels (images/<id>/fit.json), the same cell `builder doctor` prints."""
    if record is not None:
        return runs_on(record, compat).label
    amd = spec.locked_fit.amd if spec.locked_fit else None
    if spec.accelerator.kind == "rocm" and amd is not None:
        return rocm_runs_on(amd, spec.accelerator.version, PLATFORM_ARCH.get(spec.platform, spec.platform), compat).label
    return ""


def _tested(result: SmokeResult | None) -> str:
    return result.date[:64] if result else ""


def build_report(
    plan: Plan,
    specs: Sequence[ImageSpec],
    results: Mapping[str, SmokeResult],
    records: Sequence[KnownGood],
    sizes: Mapping[str, float],
    today: dt.date | None = None,
    base_results: Mapping[str, SmokeResult | None] | None = None,
    verdicts: Mapping[str, reproduction.Verdict] | None = None,
    shared: Mapping[str, float] | None = None,
) -> Report:
    """`specs`: the plan's images with content hashes; `results`: build/results/<id>.json by id;
    `sizes`: image MB by id (build.json); `base_results`: each base with a base-level smoke test -> its result (None: untested);
    `verdicts`: `builder reproduce`'s, by record id (only those about a record's current digest are shown);
    `shared`: of an image's MB, those another image of its line holds too (a published image's among the
    catalog's records, catalog/shares.py; another's among the built images, build.json)."""
    by_id = {r.id: r for r in records}
    compat = table()
    rows = []
    for spec in specs:
        record = by_id.get(spec.id)
        status, detail = _status(spec, record, results.get(spec.id))
        rows.append(
            Row(
                id=spec.id,
                base=spec.base.name,
                stack=spec.stack,
                python=spec.python,
                frameworks=" ".join(f"{n} {v}" for n, v in spec.frameworks),
                accelerator=_accelerator(spec),
                status=status,
                detail=detail,
                digest=record.digest if record else "",
                size_mb=record.size_mb if record and record.size_mb else sizes.get(spec.id),
                shared_mb=(shared or {}).get(spec.id),
                date=record.published if record else _tested(results.get(spec.id)),
                runs_on=_runs_on(spec, record, compat),
                platform=spec.platform,
            )
        )
    for skipped in plan.skipped:
        frameworks = " ".join(f"{n} {v}" for n, v in skipped.frameworks)
        rows.append(
            Row(
                f"{frameworks} py{skipped.python}{platform_suffix(skipped.platform)}",
                skipped.base,
                skipped.stack,
                skipped.python,
                frameworks,
                "",
                "skipped",
                skipped.reason,
            )
        )
    bases = tuple(dict.fromkeys([*(s.base.name for s in specs), *(s.base for s in plan.skipped)]))
    stacks = tuple(dict.fromkeys([*(s.stack for s in specs), *(s.stack for s in plan.skipped)]))
    order = {s: i for i, s in enumerate(STATUSES)}
    rows.sort(key=lambda r: (bases.index(r.base), stacks.index(r.stack), order[r.status], r.id))
    eol = end_of_life_rows(specs, today or dt.datetime.now(dt.UTC).date())
    rebuilt = tuple(v for r in sorted(records, key=lambda r: r.id) if (v := reproduction.current(verdicts or {}, r.id, r.digest)))
    return Report(tuple(rows), bases, stacks, eol, base_rows(base_results or {}), rebuilt)


def base_rows(base_results: Mapping[str, SmokeResult | None]) -> tuple[BaseRow, ...]:
    """One row per base tested at base level: its verdict, HIP checks and measured gfx targets."""
    out = []
    for name, result in base_results.items():
        if result is None:
            out.append(BaseRow(name, "not-built", "-", "", f"no base smoke result: run `builder test --base {name}`"))
            continue
        passed = sum(c.ok for c in result.hip_checks)
        bad = [f"{c.name}: {c.detail}" for c in result.hip_checks if not c.ok]
        fit = " ".join(result.amd_fit.targets) if result.amd_fit else f"not measured: {result.fit_error}"
        detail = "; ".join(bad) or f"{result.gpu.reason} ({', '.join(c.name for c in result.hip_checks)})"
        out.append(
            BaseRow(
                name, result.verdict, f"{passed}/{len(result.hip_checks)} HIP checks passed", fit, detail[:MAX_DETAIL], result.date[:64]
            )
        )
    return tuple(out)


def end_of_life_rows(specs: Sequence[ImageSpec], today: dt.date) -> tuple[EndOfLifeRow, ...]:
    """Each line the planned images use that has a vendor's end of life or this project's window, soonest first."""
    used: dict[lifecycle.EndOfLife, int] = {}
    for spec in specs:
        for found in lifecycle.for_image(spec.python, spec.base.os, spec.versions):
            used[found] = used.get(found, 0) + 1
    ordered = sorted(used, key=lambda e: (e.date, e.kind, e.line))
    return tuple(EndOfLifeRow(e.name, e.date.isoformat(), used[e], e.date < today, e.policy) for e in ordered)
