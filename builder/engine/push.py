"""Push a tag to its registry: network failures retried a bounded number of times with backoff,
anything else (auth, not found, a refused manifest) fails at once; either way one clear line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from builder.engine.client import is_engine_fault
from builder.engine.failures import is_network_failure
from builder.engine.secrets import redact
from builder.errors import RunFailure

ATTEMPTS = 4
WAIT_S = 2.0  # then 4, 8: about 14 s in all before a registry that is down is reported


class PushFlake(Exception):
    """The registry connection failed; worth another try."""


def push_image(client: Any, tag: str, log: Callable[[str], None], attempts: int = ATTEMPTS, wait_s: float = WAIT_S) -> str:
    """Push and return the registry digest (sha256:...); RunFailure (exit 1) when it cannot."""
    try:
        for attempt in Retrying(
            retry=retry_if_exception_type(PushFlake),
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=wait_s, max=30),
            reraise=False,
        ):
            with attempt:
                return _push_once(client, tag, log)
    except RetryError as exc:
        reason = exc.last_attempt.exception()
        raise RunFailure(f"push of {tag} failed after {attempts} tries (network): {reason}; is the registry up and reachable?") from None
    raise AssertionError("unreachable: Retrying either returns or raises")


def _push_once(client: Any, tag: str, log: Callable[[str], None]) -> str:
    repository, _, name = tag.rpartition(":")
    digest = ""
    try:
        for chunk in client.api.push(repository, tag=name, stream=True, decode=True):
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
        if is_engine_fault(exc):
            raise PushFlake(redact(" ".join(str(exc).split()))[:300]) from None
        raise
    if not digest:
        raise RunFailure(f"push of {tag} reported no digest; the registry may have refused it silently")
    return digest
