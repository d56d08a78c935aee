"""Push a tag to its registry: network failures retried a bounded number of times with backoff,
anything else (auth, not found, a refused manifest) fails at once; either way one clear line.

The whole push (every try) has a deadline. The engine streams progress while it uploads; a registry
that stalls an upload leaves that stream silent, and a client that merely waits (or times out and
walks away) leaves the engine holding the stalled upload and its upload slots, so later pushes stall
too. The stream is read on a helper thread while this one waits for the deadline; at the deadline,
on any failure and on Ctrl-C/SIGTERM the connection to the engine is shut, which makes the engine
cancel the push.
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from builder.engine.client import is_engine_fault
from builder.engine.failures import is_network_failure
from builder.engine.secrets import redact
from builder.errors import RunFailure, UserError

ATTEMPTS = 4
WAIT_S = 2.0  # then 4, 8: about 14 s in all before a registry that is down is reported
DEADLINE_S = 3600.0  # a whole push, every try: hours of silence are never a push in progress
DEADLINE_ENV = "BUILDER_PUSH_DEADLINE_S"


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


def push_image(
    client: Any, tag: str, log: Callable[[str], None], attempts: int = ATTEMPTS, wait_s: float = WAIT_S, deadline: float | None = None
) -> str:
    """Push and return the registry digest (sha256:...); RunFailure (exit 1) when it cannot,
    including when the push does not finish within `deadline` seconds (then it is cancelled)."""
    limit = deadline_s(deadline)
    ends = time.monotonic() + limit
    try:
        for attempt in Retrying(
            retry=retry_if_exception_type(PushFlake),
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=wait_s, max=30),
            reraise=False,
        ):
            with attempt:
                return _push_once(client, tag, log, ends, limit)
    except RetryError as exc:
        reason = exc.last_attempt.exception()
        raise RunFailure(f"push of {tag} failed after {attempts} tries (network): {reason}; is the registry up and reachable?") from None
    raise AssertionError("unreachable: Retrying either returns or raises")


_END = object()


def _push_once(client: Any, tag: str, log: Callable[[str], None], ends: float, limit: float) -> str:
    repository, _, name = tag.rpartition(":")
    if time.monotonic() >= ends:
        raise RunFailure(f"push of {tag} did not finish within {limit:g} s ({DEADLINE_ENV}); it was cancelled")
    digest = ""
    try:
        with _open_stream(client, repository, name) as chunks:
            for chunk in _until(chunks, ends, tag, limit):
                if "error" in chunk:
                    message = redact(" ".join(str(chunk["error"]).split()))
                    if is_network_failure(message):
                        raise PushFlake(message)
                    raise RunFailure(f"push of {tag} failed: {message}")
                aux = chunk.get("aux") or {}
                if aux.get("Digest"):
                    digest = str(aux["Digest"])
                if chunk.get("status") and chunk.get("id") is None:
                    log(str(chunk["status"]))
    except (PushFlake, RunFailure):
        raise
    except Exception as exc:
        if is_engine_fault(exc) or is_network_failure(str(exc)):
            raise PushFlake(redact(" ".join(str(exc).split()))[:300]) from None
        raise
    if not digest:
        raise RunFailure(f"push of {tag} reported no digest; the registry may have refused it silently")
    return digest


@contextlib.contextmanager
def _open_stream(client: Any, repository: str, name: str) -> Iterator[Iterator[dict[str, Any]]]:
    """The engine's progress stream of one push; however the block ends before the stream did, the
    connection is shut, so the engine cancels the push (its request context ends)."""
    responses: list[Any] = []

    def keep(response: Any, *args: Any, **kwargs: Any) -> None:
        responses.append(response)

    hooks = getattr(client.api, "hooks", None)
    if isinstance(hooks, dict):
        hooks.setdefault("response", []).append(keep)
    try:
        stream = client.api.push(repository, tag=name, stream=True, decode=True)
    finally:
        if isinstance(hooks, dict):
            hooks["response"].remove(keep)
    try:
        yield stream
    except BaseException:
        for response in responses:
            cancel(response)
        raise


def cancel(response: Any) -> None:
    """Shut the connection under a streamed response. A close alone does not wake a thread blocked
    reading it; shutdown does, and the engine sees the client go."""
    with contextlib.suppress(Exception):
        fd = response.raw.fileno()
        sock = socket.fromfd(fd, socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()  # the duplicate only; the response's own descriptor is closed below
    with contextlib.suppress(Exception):
        response.close()


def _until(chunks: Iterator[dict[str, Any]], ends: float, tag: str, limit: float) -> Iterator[dict[str, Any]]:
    """The stream's chunks, read on a helper thread, until `ends` (monotonic): then RunFailure.
    This thread only waits on a queue, so Ctrl-C and SIGTERM reach it at once."""
    box: queue.Queue[Any] = queue.Queue()

    def pump() -> None:
        try:
            for chunk in chunks:
                box.put(chunk)
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
        yield item
