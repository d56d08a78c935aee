"""Push a tag to its registry: network failures retried a bounded number of times with backoff,
anything else (auth, not found, a refused manifest) fails at once; either way one clear line.

The whole push (every try) has a deadline. The engine streams progress while it uploads; a registry
that stalls an upload leaves that stream silent, and a client that merely waits (or times out and
walks away) leaves the engine holding the stalled upload and its upload slots, so later pushes stall
too. The stream is read on a helper thread while this one waits for the deadline; at the deadline,
on any failure and on Ctrl-C/SIGTERM the connection to the engine is shut, which makes the engine
cancel the push.

The engine retries a failed layer upload on its own, five times, 5 to 20 s apart ("Retrying in 5
seconds"): under this module's tries that made a registry answering 503 cost ~50 s a try, 200 s
before the user heard of it. Its first "Retrying in" is taken as the try's network failure instead:
the push is cancelled and tried again on this module's backoff, so there is one retry policy, the
one `BUILDER_PUSH_TRIES` sets (layers a try did upload are not sent again: the registry has them).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from builder.engine.failures import is_network_failure
from builder.engine.port import Engine, EngineFault, Progress
from builder.engine.retry import GaveUp, reason_of, retry_network
from builder.util.errors import RunFailure, UserError
from builder.util.text import redact

ATTEMPTS = 4
WAIT_S = 2.0  # then 4, 8: about 14 s in all before a registry that is down is reported
DEADLINE_S = 3600.0  # a whole push, every try: hours of silence are never a push in progress
DEADLINE_ENV = "BUILDER_PUSH_DEADLINE_S"
TRIES_ENV = "BUILDER_PUSH_TRIES"
ENGINE_RETRY = "Retrying in "  # a layer's status when the engine is about to retry its failed upload


class PushFlake(Exception):
    """The registry connection failed; worth another try."""


def deadline_s(value: float | None = None) -> float:
    """The push deadline: the caller's, else $BUILDER_PUSH_DEADLINE_S, else an hour."""
    if value is not None:
        return value
    text = os.environ.get(DEADLINE_ENV, "")
    try:
        seconds = float(text) if text else DEADLINE_S
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 1e7:
        raise UserError(f"{DEADLINE_ENV}={text!r} is not a number of seconds (e.g. 1800)")
    return seconds


def tries(value: int | None = None) -> int:
    """How many times a push is tried: the caller's, else $BUILDER_PUSH_TRIES, else 4."""
    if value is not None:
        return value
    text = os.environ.get(TRIES_ENV, "")
    if not text:
        return ATTEMPTS
    if not text.isdigit() or not 1 <= int(text) <= 20:
        raise UserError(f"{TRIES_ENV}={text!r} is not a number of tries from 1 to 20 (e.g. 4)")
    return int(text)


def push_image(
    engine: Engine, tag: str, log: Callable[[str], None], attempts: int | None = None, wait_s: float = WAIT_S, deadline: float | None = None
) -> str:
    """Push and return the registry digest (sha256:...); RunFailure (exit 1) when it cannot,
    including when the push does not finish within `deadline` seconds (then it is cancelled)."""
    limit = deadline_s(deadline)
    attempts = tries(attempts)
    ends = time.monotonic() + limit
    try:
        return retry_network(
            lambda attempt: _push_once(engine, tag, log, ends, limit),
            flake=lambda exc: isinstance(exc, PushFlake),
            attempts=attempts,
            wait_s=wait_s,
        )
    except GaveUp as exc:
        raise RunFailure(
            f"push of {tag} failed after {attempts} {'try' if attempts == 1 else 'tries'} (network): {exc.reason}; is the registry up and reachable?"
        ) from None


def _push_once(engine: Engine, tag: str, log: Callable[[str], None], ends: float, limit: float) -> str:
    repository, _, name = tag.rpartition(":")
    if time.monotonic() >= ends:
        raise RunFailure(f"push of {tag} did not finish within {limit:g} s ({DEADLINE_ENV}); it was cancelled")
    digest = ""
    try:
        stream = engine.push(repository, name)
    except EngineFault as exc:  # the engine went away or broke: worth another try
        raise PushFlake(reason_of(exc)[:300]) from None
    try:
        for event in _until(stream, ends, tag, limit):
            if event.error:
                message = redact(event.error)
                if is_network_failure(message):
                    raise PushFlake(message)
                raise RunFailure(f"push of {tag} failed: {message}")
            if event.layer is not None and event.text.startswith(ENGINE_RETRY):
                raise PushFlake(f"the registry failed the upload of layer {event.layer} (the engine was about to retry it)")
            if event.digest:
                digest = event.digest
            if event.text and event.layer is None:
                log(event.text)
    except BaseException as exc:
        stream.cancel()  # the engine cancels the push (its request context ends)
        if isinstance(exc, EngineFault):
            raise PushFlake(reason_of(exc)[:300]) from None
        raise
    if not digest:
        raise RunFailure(f"push of {tag} reported no digest; the registry may have refused it silently")
    return digest


_END = object()


def _until(events: Iterable[Progress], ends: float, tag: str, limit: float) -> Iterator[Progress]:
    """The stream's events, read on a helper thread, until `ends` (monotonic): then RunFailure.
    This thread only waits on a queue, so Ctrl-C and SIGTERM reach it at once."""
    box: queue.Queue[object] = queue.Queue()

    def pump() -> None:
        try:
            for event in events:
                box.put(event)
            box.put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, raised there
            box.put(exc)

    threading.Thread(target=pump, name=f"push {tag}", daemon=True).start()
    while True:
        left = ends - time.monotonic()
        try:
            item = box.get(timeout=max(left, 0.001))
        except queue.Empty:
            raise RunFailure(f"push of {tag} did not finish within {limit:g} s (the registry stalled?); it was cancelled") from None
        if item is _END:
            return
        if isinstance(item, BaseException):
            raise item
        assert isinstance(item, Progress)
        yield item
