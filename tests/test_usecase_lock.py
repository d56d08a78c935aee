"""The lock use-case (builder/usecases/lock.py) offline, with uv's resolver stood in for
(tests/usecase_fixtures.Resolver): what is resolved and what is left as it is, what is written into
images/ (and only then), what a refused or failed lock leaves (the old lock, or none), drift, the
`unlocked:` policy, --keep-going, and `check` on what was written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from builder.lock.resolve import LockFailed
from builder.lock.target import LockTarget
from builder.usecases import lock as locking
from builder.workspace import Workspace
from tests.usecase_fixtures import JAX, MATRIX, NUMBA, OFFLINE, InOrder, Resolver, uv_output

LOCAL = locking.LockOptions(sources=OFFLINE)
UNLOCKED_JAX = MATRIX + 'unlocked:\n  - select: "stack=jax"\n    reason: "jax\'s index is not reachable from the machines that lock"\n'


@dataclass
class Locks:
    root: Path
    resolver: Resolver
    reported: list[locking.LockResult] = field(default_factory=list)

    @property
    def ws(self) -> Workspace:
        return Workspace(self.root / "matrix.yaml")

    def run(self, options: locking.LockOptions = LOCAL, select: str | None = None) -> list[locking.LockResult]:
        self.reported.clear()
        self.resolver.asked.clear()
        ws = self.ws
        return locking.lock_images(ws, ws.selected(select, use_default=False), options, self.reported.append)

    def text(self, image: str) -> str | None:
        path = self.root / "images" / image / "requirements.lock"
        return path.read_text(encoding="utf-8") if path.exists() else None


def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str = MATRIX) -> Locks:
    (tmp_path / "matrix.yaml").write_text(text, encoding="utf-8")
    resolver = Resolver()
    monkeypatch.setattr(locking, "resolve", resolver)
    monkeypatch.setattr(locking, "uv_binary", lambda: "uv")
    return Locks(tmp_path, resolver)


@pytest.fixture
def locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Locks:
    return setup(tmp_path, monkeypatch)


def statuses(results: list[locking.LockResult]) -> dict[str, str]:
    return {r.id: r.status for r in results}


def test_a_first_lock_resolves_every_image_and_renders_the_tree_with_it(locks: Locks) -> None:
    results = locks.run()
    assert statuses(results) == {JAX: "locked", NUMBA: "locked"}
    assert [r.id for r in locks.reported] == [JAX, NUMBA] and sorted(locks.resolver.asked) == [JAX, NUMBA]
    numba = next(r for r in results if r.id == NUMBA)
    assert numba.pins == 2 and numba.changes == () and numba.seconds >= 0 and numba.detail == ""
    text = locks.text(NUMBA)
    assert text is not None and "numba==0.68.0" in text and "numpy==2.4.6" in text
    assert (locks.root / "images" / NUMBA / "Dockerfile").is_file(), "the images that install from the locks are rendered with them"
    assert statuses(locking.check(locks.ws.selected(None, use_default=False))) == {JAX: "current", NUMBA: "current"}


def test_a_current_lock_is_not_resolved_again_unless_upgrading(locks: Locks) -> None:
    locks.run()
    before = locks.text(NUMBA)
    assert statuses(locks.run()) == {JAX: "current", NUMBA: "current"} and locks.resolver.asked == []
    assert [r.id for r in locks.reported] == [JAX, NUMBA], "each image is reported, resolved or not"
    upgraded = locks.run(locking.LockOptions(sources=OFFLINE, upgrade=True))
    assert statuses(upgraded) == {JAX: "current", NUMBA: "current"} and sorted(locks.resolver.asked) == [JAX, NUMBA]
    assert locks.text(NUMBA) == before, "the index gave the same pins: the lock is unchanged"


def test_an_upgrade_that_moves_a_pin_rewrites_the_lock_and_lists_the_drift(locks: Locks) -> None:
    locks.run()
    numba_before = locks.text(NUMBA)
    locks.resolver.pins[JAX] = {"numpy": "2.4.99", "ml-dtypes": "0.5.1"}
    results = {r.id: r for r in locks.run(locking.LockOptions(sources=OFFLINE, upgrade=True))}
    assert results[JAX].status == "locked"
    assert results[JAX].changes == (("ml-dtypes", None, "0.5.1"), ("numpy", "2.4.6", "2.4.99"))
    assert (results[NUMBA].status, results[NUMBA].changes) == ("current", ())
    assert "numpy==2.4.99" in (locks.text(JAX) or "") and locks.text(NUMBA) == numba_before


def test_a_lock_whose_inputs_changed_is_resolved_again_without_upgrade(locks: Locks) -> None:
    locks.run()
    matrix = locks.root / "matrix.yaml"
    matrix.write_text(MATRIX + "indexes:\n  numba-*: https://mirror.example/simple\n", encoding="utf-8")
    found = {r.id: r for r in locking.check(locks.ws.selected(None, use_default=False))}
    assert (found[NUMBA].status, found[NUMBA].detail) == ("stale", "its inputs changed since `builder lock`")
    assert found[JAX].status == "current"
    results = statuses(locks.run())
    assert locks.resolver.asked == [NUMBA] and results == {JAX: "current", NUMBA: "locked"}, "same pins, new inputs: a new lock"
    assert statuses(locking.check(locks.ws.selected(None, use_default=False))) == {JAX: "current", NUMBA: "current"}


@pytest.mark.parametrize("kind", ["unreachable", "unresolvable", "failed"])
def test_a_lock_that_cannot_be_made_keeps_the_old_one_and_says_why(locks: Locks, kind: str) -> None:
    locks.run()
    before = locks.text(NUMBA)
    locks.resolver.pins[NUMBA] = {"numpy": "2.4.99"}
    locks.resolver.fails[NUMBA] = LockFailed(kind, f"uv says: {kind}")
    results = {r.id: r for r in locks.run(locking.LockOptions(sources=OFFLINE, upgrade=True, keep_going=True))}
    assert (results[NUMBA].status, results[NUMBA].detail) == (kind, f"uv says: {kind}")
    assert locks.text(NUMBA) == before, "never half-written: the old lock stays"
    assert results[JAX].status == "current"


def test_a_first_lock_that_fails_writes_nothing_for_that_image(locks: Locks) -> None:
    locks.resolver.fails[JAX] = LockFailed("unreachable", "https://pypi.org/simple: connection refused")
    results = statuses(locks.run(locking.LockOptions(sources=OFFLINE, keep_going=True)))
    assert results == {JAX: "unreachable", NUMBA: "locked"}
    assert locks.text(JAX) is None and locks.text(NUMBA) is not None
    assert statuses(locking.check(locks.ws.selected(None, use_default=False))) == {JAX: "missing", NUMBA: "current"}


def test_what_the_resolver_gives_that_is_not_the_images_lock_is_a_failure_not_a_lock(locks: Locks, monkeypatch: pytest.MonkeyPatch) -> None:
    """uv's output is checked like a lock on disk: one that pins another version of the image's own
    framework is refused, with the line that is wrong, and nothing is written for it."""

    def other_numba(target: LockTarget, *args: object, **kwargs: object) -> str:
        return uv_output(target, {"numpy": "2.4.6"}).replace("numba==0.68.0", "numba==0.67.0")

    monkeypatch.setattr(locking, "resolve", other_numba)
    results = {r.id: r for r in locks.run(locking.LockOptions(sources=OFFLINE, keep_going=True))}
    assert results[NUMBA].status == "failed" and "numba" in results[NUMBA].detail and "\n" not in results[NUMBA].detail
    assert results[JAX].status == "locked" and locks.text(NUMBA) is None


def test_an_unlocked_image_is_left_as_it_is_unless_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    locks = setup(tmp_path, monkeypatch, UNLOCKED_JAX)
    results = {r.id: r for r in locks.run()}
    assert (results[JAX].status, results[JAX].detail) == ("unlocked", "jax's index is not reachable from the machines that lock")
    assert locks.resolver.asked == [NUMBA] and locks.text(JAX) is None
    included = statuses(locks.run(locking.LockOptions(sources=OFFLINE, include_unlocked=True), select="stack=jax"))
    assert included == {JAX: "locked"} and locks.resolver.asked == [JAX]


def test_after_a_failure_the_rest_are_not_locked_unless_keep_going(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    locks = setup(tmp_path, monkeypatch, MATRIX.replace('numba: ["0.68.0"]', 'numba: ["0.60.0", "0.68.0"]'))
    monkeypatch.setattr(locking, "ThreadPoolExecutor", InOrder)
    first = locks.ws.selected(None, use_default=False)[0].id
    locks.resolver.fails[first] = LockFailed("unresolvable", "no numpy satisfies jax")
    results = locks.run()
    assert [(r.status, r.detail) for r in results[1:]] == [("not-locked", "an earlier lock failed (use --keep-going)")] * 2
    assert locks.resolver.asked == [first] and not (tmp_path / "images").exists(), "nothing resolved, nothing written"
    assert [r.status for r in locks.reported] == ["unresolvable", "not-locked", "not-locked"]

    kept = locks.run(locking.LockOptions(sources=OFFLINE, keep_going=True))
    assert [r.status for r in kept] == ["unresolvable", "locked", "locked"] and len(locks.resolver.asked) == 3


def test_the_jobs_are_bounded(locks: Locks, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[int] = []

    class Counting(InOrder):
        def __init__(self, max_workers: int) -> None:
            made.append(max_workers)
            super().__init__(max_workers)

    monkeypatch.setattr(locking, "ThreadPoolExecutor", Counting)
    locks.run(locking.LockOptions(sources=OFFLINE, jobs=0))
    locks.run(locking.LockOptions(sources=OFFLINE, jobs=500, upgrade=True))
    assert made == [1, locking.MAX_JOBS]
