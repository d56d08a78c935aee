"""Push a tag to its registry; only network failures are retried."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from builder.engine.failures import is_network_failure
from builder.errors import UserError


class PushFlake(Exception):
    """The registry connection failed; worth another try."""


@retry(retry=retry_if_exception_type(PushFlake), stop=stop_after_attempt(4), wait=wait_exponential(multiplier=2, max=30), reraise=True)
def push_image(client: Any, tag: str, log: Callable[[str], None]) -> str:
    """Push and return the registry digest (sha256:...)."""
    repository, _, name = tag.rpartition(":")
    digest = ""
    for chunk in client.api.push(repository, tag=name, stream=True, decode=True):
        if "error" in chunk:
            message = str(chunk["error"])
            if is_network_failure(message):
                raise PushFlake(message)
            raise UserError(f"push of {tag} failed: {message}")
        aux = chunk.get("aux") or {}
        if aux.get("Digest"):
            digest = str(aux["Digest"])
        if chunk.get("status") and chunk.get("id") is None:
            log(str(chunk["status"]))
    return digest
