"""Failure classification, in one place: is this error worth another try (a network flake), or
deterministic (fails the same way again)?

Builds (uv, pip, apt inside the engine), debootstrap and registry pushes all ask here. Only network
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
    # uv (reqwest): its own retries spent, a connect, DNS or server error
    r"Request failed after \d+ retries|error sending request for url|tcp connect error|dns error|failed to lookup address|"
    r"HTTP status server error|connection closed before message completed|error decoding response body|operation timed out|"
    # apt, debootstrap's wget ("Failed to download" but not uv's "Failed to download `pkg`": its cause lines tell)
    r"Failed to fetch http|Could not connect to|Hash Sum mismatch|Failed getting release file|Couldn't download|Couldn't get|"
    r"Failed to download(?! `)|Temporary failure|Could not resolve|Network is unreachable|Read error|unable to resolve host|"
    r"Giving up|Retrying failed download|Invalid Release (file|signature)|"
    # the engine and registries (Go's net/http)
    r"i/o timeout|TLS handshake timeout|unexpected EOF|connection refused|no such host|dial tcp",
    re.IGNORECASE,
)
TLS_PATTERNS = re.compile(
    r"CERTIFICATE_VERIFY_FAILED|certificate verify failed|SSLCertVerificationError|x509: certificate|"
    r"unable to get local issuer certificate|self[- ]signed certificate in certificate chain|"
    r"Certificate verification failed: The certificate is NOT trusted|invalid peer certificate",
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


# (regex, cause, fix) for failed builds, most specific first; {ca_bundle} is the bundle the build trusted.
BUILD_DIAGNOSES: tuple[tuple[str, str, str], ...] = (
    (
        TLS_PATTERNS.pattern,
        "TLS verification failed inside the build: pip or apt does not trust the server's certificate "
        "(usually a TLS-intercepting proxy, or a mirror with a private CA)",
        "The build trusted {ca_bundle}; pass the CA that signs the server's certificate with --ca-bundle FILE "
        "(or $BUILDER_CA_BUNDLE, or build.ca_bundle in matrix.yaml). Not retried: it fails the same way every time.",
    ),
    (
        r"HTTP error 401|401 Client Error|401 Unauthorized|HTTP error 403|403 Client Error|403 Forbidden",
        "the package index refused the build's credentials (401/403)",
        "Check the user and password or token in --index-url / --extra-index-url or your pip config.",
    ),
    (
        r"THESE PACKAGES DO NOT MATCH THE HASHES|Hash mismatch for",
        "a downloaded package does not match the hash pinned for it",
        "Something changed the file (a mirror, a proxy, a re-upload): check the index, then re-lock the image.",
    ),
    (
        r"No matching distribution found for ([^\s]+)",
        "no index the build can reach offers \\1 for this image's Python and platform",
        "Check the version and the indexes (a company mirror may lack it), or change the matrix.",
    ),
    (  # uv's words for the same (a locked image installs with uv)
        r"there is no version of ([^\s,]+)|Because ([^\s,]+) was not found in the package registry",
        "no index the build can reach offers \\1\\2 for this image's Python and platform",
        "Check the version and the indexes (a company mirror may lack it), or change the matrix.",
    ),
)


_OWN_NOTES = re.compile(r"^# installer: .*$", re.MULTILINE)  # builder's note atop a build log: why not uv, never the build's failure


def diagnose_build(text: str, ca_bundle: str) -> tuple[str, str] | None:
    """(cause, fix) of the first BUILD_DIAGNOSES row found in a failed build's log, or None. The
    log's own note of which installer ran (a failed uv download quotes pip's "No matching
    distribution" for uv) is not read: the failure is the build's."""
    text = _OWN_NOTES.sub("", text)
    for pattern, cause, fix in BUILD_DIAGNOSES:
        match = re.search(pattern, text, re.IGNORECASE)
        if match:
            return match.expand(cause), match.expand(fix).replace("{ca_bundle}", ca_bundle)
    return None
