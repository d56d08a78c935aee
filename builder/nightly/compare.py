"""Compare one nightly's outcome per image with the previous run's: pure data in, rows out.

A regression is an image that passed before (in the last nightly, or recorded known-good in the
catalog) and fails now, at any stage: its lock, its build or its smoke tests. Regressions sort
first; the exit code of `builder nightly` is 1 when there is any.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from builder.model.results import is_good
from builder.updates.releases import Release

BAD = ("failed", "build-failed", "lock-failed", "not-built")
# The build could not run (network, TLS, the engine): nothing is known about the image, so it is
# neither a pass nor a failure of the image; the run itself failed (a note, exit 1) and the image
# keeps its previous status in the history.
BLOCKED = "build-blocked"
KINDS = ("regression", "new-failure", "still-failing", "fixed", "new", "passing", "not-run")


@dataclass(frozen=True)
class Outcome:
    """Where one image ended this run."""

    id: str
    status: str  # passed | gpu-skipped | failed | build-failed | lock-failed | not-built | build-blocked | not-run
    detail: str = ""  # the first failure and its diagnosis
    content_hash: str = ""
    rebuilt: bool = False  # built in this run (new, or its inputs changed)
    published: str = ""  # the digest pushed in this run, if any
    held: str = ""  # why an image that passed was not published (e.g. tested without a GPU)

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "status": self.status,
            "detail": self.detail,
            "content_hash": self.content_hash,
            "rebuilt": self.rebuilt,
            "published": self.published,
            "held": self.held,
        }


@dataclass(frozen=True)
class Change:
    id: str
    kind: str  # one of KINDS
    before: str  # the previous status ("" when there was none)
    now: str
    detail: str = ""


def classify(before: str | None, now: str) -> str:
    """The good statuses are the smoke verdicts that count as good (builder.model.results.GOOD)."""
    if not is_good(now) and now not in BAD:
        return "not-run"
    if before is not None and is_good(before):
        return "passing" if is_good(now) else "regression"
    if before in BAD:
        return "fixed" if is_good(now) else "still-failing"
    return "new" if is_good(now) else "new-failure"


def compare(previous: Mapping[str, str], outcomes: Sequence[Outcome]) -> list[Change]:
    """One row per image of this run, regressions first, then by id."""
    rows = [Change(o.id, classify(previous.get(o.id), o.status), previous.get(o.id, ""), o.status, o.detail) for o in outcomes]
    return sorted(rows, key=lambda c: (KINDS.index(c.kind), c.id))


def regressions(changes: Sequence[Change]) -> list[Change]:
    return [c for c in changes if c.kind == "regression"]


@dataclass(frozen=True)
class NightlyReport:
    """Everything one nightly found, for the summary and the exit code."""

    date: str
    changes: tuple[Change, ...]
    outcomes: tuple[Outcome, ...]
    releases: tuple[Release, ...] = ()
    applied: tuple[str, ...] = ()  # matrix.yaml edits ("frameworks.torch += 2.14.2")
    drift: tuple[tuple[str, tuple[tuple[str, str | None, str | None], ...]], ...] = ()  # id -> lock changes
    notes: tuple[str, ...] = ()  # stages that could not run, and why
    updates: str = "checked"  # checked | not-checked (--no-updates) | failed (a note says why)

    @property
    def regressed(self) -> bool:
        return any(c.kind == "regression" for c in self.changes)

    @property
    def blocked(self) -> list[Outcome]:
        """Images whose build could not run (network, TLS, engine): the build stage failed."""
        return [o for o in self.outcomes if o.status == BLOCKED]
