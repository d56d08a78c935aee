"""The one retry loop for network steps (a build's downloads, debootstrap, a push, a pull, the
package index's JSON API): a flake
is tried again after an exponential backoff, anything else fails at once, and when every try failed
the caller gets `GaveUp` with the last reason, redacted and on one line, ready for its message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, RetryError, Retrying, retry_if_exception, stop_after_attempt, wait_exponential
from tenacity.stop import stop_base

from builder.util.text import redact

T = TypeVar("T")


class GaveUp(Exception):
    """Every try failed on the network; `attempts`: how many were made, `reason`: the last failure, redacted."""

    def __init__(self, attempts: int, reason: str, last: BaseException | None) -> None:
        super().__init__(reason)
        self.attempts = attempts
        self.reason = reason
        self.last = last


class _PastDeadline(stop_base):
    """Stop when the coming wait would outlast the time left (never, without a deadline)."""

    def __init__(self, time_left: Callable[[], float] | None) -> None:
        self.time_left = time_left

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.time_left is not None and retry_state.upcoming_sleep >= self.time_left()


def reason_of(exc: BaseException | None) -> str:
    """An exception as one redacted line (a URL's credentials never reach a message or a log)."""
    return redact(" ".join(str(exc).split()))[:500]


def retry_network(
    step: Callable[[int], T],
    *,
    flake: Callable[[BaseException], bool],
    attempts: int,
    wait_s: float,
    max_wait_s: float = 30.0,
    min_wait_s: float = 0.0,
    on_retry: Callable[[int, str], None] | None = None,
    time_left: Callable[[], float] | None = None,
) -> T:
    """`step(attempt)` (1-based) until it returns; an exception `flake` accepts is tried again after
    wait_s, 2*wait_s, ... (bounded by [min_wait_s, max_wait_s]), up to `attempts` tries in all, and
    never when the wait would outlast `time_left()` seconds (a deadline), then GaveUp. Any other
    exception, and Ctrl-C, goes to the caller at once. `on_retry(next attempt, reason)` is told
    before each wait."""

    def before_sleep(state: RetryCallState) -> None:
        if on_retry is not None:
            exc = state.outcome.exception() if state.outcome else None
            on_retry(state.attempt_number + 1, reason_of(exc))

    retrying = Retrying(
        retry=retry_if_exception(flake),
        stop=stop_after_attempt(attempts) | _PastDeadline(time_left),
        wait=wait_exponential(multiplier=wait_s, min=min_wait_s, max=max_wait_s),
        before_sleep=before_sleep,
        reraise=False,
    )
    try:
        for attempt in retrying:
            with attempt:
                return step(attempt.retry_state.attempt_number)
    except RetryError as exc:
        last = exc.last_attempt.exception()
        raise GaveUp(exc.last_attempt.attempt_number, reason_of(last), last) from None
    raise AssertionError("unreachable: Retrying either returns or raises")
