"""Failure classification, in one place: is this error worth another try (a network flake), or
deterministic (fails the same way again)?

Builds (pip, apt inside the engine), debootstrap and registry pushes all ask here. Only network
flakes are retried; a TLS verification failure is deterministic (the same certificate fails the
same way), so it is diagnosed once, never retried.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

NETWORK_PATTERNS = re.compile(
    # pip / urllib3
    r"Temporary failure in name resolution|Connection (reset|refused|aborted|timed out)|ReadTimeoutError|ConnectTimeoutError|"
    r"Read timed out|RemoteDisconnected|IncompleteRead|ProtocolError|Max retries exceeded|"
    r"HTTP error 50[0-9]|50[234] (Server Error|Bad Gateway)|Service Unavailable|Gateway Time-?out|Bad Gateway|"
    # apt, debootstrap's wget
    r"Failed to fetch http|Could not connect to|Hash Sum mismatch|Failed getting release file|Couldn't download|Couldn't get|"
    r"Failed to download|Temporary failure|Could not resolve|Network is unreachable|Read error|unable to resolve host|"
    r"Giving up|Retrying failed download|Invalid Release (file|signature)|"
    # the engine and registries (Go's net/http)
    r"i/o timeout|TLS handshake timeout|unexpected EOF|connection refused|no such host|dial tcp",
    re.IGNORECASE,
)
TLS_PATTERNS = re.compile(
    r"CERTIFICATE_VERIFY_FAILED|certificate verify failed|SSLCertVerificationError|x509: certificate|"
    r"unable to get local issuer certificate|self[- ]signed certificate in certificate chain|"
    r"Certificate verification failed: The certificate is NOT trusted",
    re.IGNORECASE,
)
_PIP_RECOVERED = "WARNING: Retrying"  # pip retried by itself, and may have recovered


def is_tls_failure(text: str) -> bool:
    return bool(TLS_PATTERNS.search(text))


def is_network_failure(text: str) -> bool:
    """A flake a retry can fix; never a TLS verification failure (which looks like a connection error to pip)."""
    return bool(NETWORK_PATTERNS.search(text)) and not is_tls_failure(text)


def last_lines(log: str, tail: int = 15) -> str:
    """The lines just before a failure, without pip's own recovered retries: a download that
    recovered earlier in the log does not make a later resolver error retryable."""
    lines = [line for line in log.splitlines() if not line.lstrip().startswith(_PIP_RECOVERED)]
    return "\n".join(lines[-tail:])


def is_network_build_failure(error: str, log: str) -> bool:
    """Judge a failed build by its final error and the lines just before it."""
    evidence = error + "\n" + last_lines(log)
    return is_network_failure(evidence)


def any_network(lines: Iterable[str]) -> bool:
    return any(is_network_failure(line) for line in lines)
