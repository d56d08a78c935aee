"""A small client of the package index's JSON API (PyPI's `GET {base}/{project}/json` and
`{base}/{project}/{version}/json`), for `builder updates` and the nightly loop.

Network only, stdlib urllib: a timeout on every socket operation, the CA bundle the user gives
(else the system's), retries with backoff for what a retry can fix (network errors, timeouts,
HTTP 5xx and 429) and none for what it cannot (404, other 4xx, TLS verification, a body that is
not JSON). Whatever goes wrong is one `IndexFailure` whose message is one line: the index, the
cause, and what to do.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from builder import __version__
from builder.engine.secrets import redact
from builder.engine.settings import check_ca_bundle
from builder.errors import RunFailure, UserError
from builder.updates import wheelmeta

DEFAULT_INDEX_JSON_URL = "https://pypi.org/pypi"
INDEX_JSON_ENV = "BUILDER_INDEX_JSON_URL"
DEFAULT_TIMEOUT_S = 20.0
DEFAULT_ATTEMPTS = 3
MAX_RESPONSE_BYTES = 64 * 2**20  # torch's project document is a few MiB; far more is not this API
_CHUNK = 2**20
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_OPTION = "--index-json-url (or $BUILDER_INDEX_JSON_URL)"
_FIX = f"check the network, or point {_OPTION} at a mirror"
T = TypeVar("T")


class IndexFailure(RunFailure):
    """The index could not answer; the message is one line naming the index, the cause and the fix."""

    def __init__(self, message: str, url: str) -> None:
        super().__init__(message)
        self.url = url


class ProjectNotFound(IndexFailure):
    """HTTP 404: the index does not carry this project (or this version of it)."""


class _Transient(Exception):
    """A failure a retry can fix; `cause` says what happened, for the final message."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


def index_json_url(given: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """--index-json-url, then $BUILDER_INDEX_JSON_URL, then PyPI's."""
    return given or (env or {}).get(INDEX_JSON_ENV) or DEFAULT_INDEX_JSON_URL


class IndexClient:
    """`client(project)` -> the project document; `client(project, version)` -> that release's.

    Satisfies builder.updates.releases.Fetch. `backoff_s` scales the exponential wait between
    tries (tests pass 0)."""

    def __init__(
        self,
        base_url: str = DEFAULT_INDEX_JSON_URL,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        ca_bundle: str | Path | None = None,
        attempts: int = DEFAULT_ATTEMPTS,
        backoff_s: float = 1.0,
        max_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.display = redact(base_url.rstrip("/"))
        self.base_url, self._auth, host = _split_url(base_url, self.display)
        self.timeout_s = timeout_s
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.max_bytes = max_bytes
        handlers: list[urllib.request.BaseHandler] = []
        # checked even for http://, so a bad --ca-bundle is never silently ignored
        cafile = None if ca_bundle is None else str(check_ca_bundle(Path(ca_bundle).expanduser(), str(ca_bundle)))
        if cafile is not None or self.base_url.startswith("https://"):  # plain http:// skips loading the system's CA store
            handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=cafile)))
        # No proxy can reach this machine's loopback: a local mirror (or a test's) is asked directly.
        handlers.append(urllib.request.ProxyHandler({}) if host in _LOOPBACK else urllib.request.ProxyHandler())
        self._opener = urllib.request.build_opener(*handlers)
        self._projects: dict[str, dict[str, Any]] = {}  # project documents, for the wheel fallback

    def __call__(self, project: str, version: str | None = None) -> dict[str, Any]:
        return self.project(project) if version is None else self.release(project, version)

    def project(self, project: str) -> dict[str, Any]:
        return self._get((project, "json"), project, None)

    def release(self, project: str, version: str) -> dict[str, Any]:
        """The release's JSON document; where the index serves none (a mirror or proxy that lists
        releases only), the same `info` read from one of its Linux wheels by byte ranges."""
        try:
            return self._get((project, version, "json"), project, version)
        except ProjectNotFound:
            if project not in self._projects:
                self._projects[project] = self.project(project)
            url = f"{self.base_url}/{quote(project, safe='')}/json"
            try:
                return wheelmeta.release_document(self._projects[project], url, version, self._range)
            except wheelmeta.NoWheel as exc:
                raise ProjectNotFound(f"{project} {version}: the index {self.display} serves no release document and {exc}", self.display) from None
            except ValueError as exc:
                raise IndexFailure(f"{project} {version}: cannot read its metadata from a wheel on {self.display} ({exc}): {_FIX}", self.display) from None

    def _range(self, url: str, first: int, last: int) -> bytes:
        """Bytes first..last of a file the index lists (retried like the documents)."""
        return self._retried(lambda: self._range_once(url, first, last), f"cannot read {redact(url)} from the package index {self.display}")

    def _range_once(self, url: str, first: int, last: int) -> bytes:
        request = urllib.request.Request(url, headers={"Range": f"bytes={first}-{last}", "User-Agent": f"gpu-image-builder/{__version__}"})
        if self._auth and urlsplit(url).hostname == urlsplit(self.base_url).hostname:
            request.add_unredirected_header("Authorization", self._auth)
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                if response.status != 206:  # a server that ignores Range would send the whole wheel
                    raise IndexFailure(f"{redact(url)} is served without byte ranges (HTTP {response.status}), so its metadata cannot be read", self.display)
                return bytes(response.read(last - first + 2))
        except urllib.error.HTTPError as exc:
            exc.close()
            raise self._http_error(exc.code, str(exc.reason), redact(url), url, None) from None
        except urllib.error.URLError as exc:
            raise self._network_error(exc.reason) from None
        except (OSError, http.client.HTTPException) as exc:
            raise self._network_error(exc) from None

    def _get(self, parts: tuple[str, ...], project: str, version: str | None) -> dict[str, Any]:
        path = "/" + "/".join(quote(p, safe="") for p in parts)
        return self._retried(lambda: self._once(path, project, version), f"cannot reach the package index {self.display}")

    def _retried(self, call: Callable[[], T], what: str) -> T:
        """`call()`, tried again with backoff while it fails transiently; then one IndexFailure line."""
        tries = 0
        try:
            for attempt in Retrying(
                stop=stop_after_attempt(self.attempts),
                wait=wait_exponential(multiplier=self.backoff_s, max=30),
                retry=retry_if_exception_type(_Transient),
                reraise=False,
            ):
                with attempt:
                    tries += 1
                    return call()
        except RetryError as exc:
            last = exc.last_attempt.exception()
            cause = last.cause if isinstance(last, _Transient) else str(last)
            times = f"{tries} tries" if tries != 1 else "1 try"
            raise IndexFailure(f"{what} ({cause}; {times}): {_FIX}", self.display) from None
        raise AssertionError("unreachable: Retrying either returns or raises")

    def _once(self, path: str, project: str, version: str | None) -> dict[str, Any]:
        url = self.base_url + path
        shown = self.display + path
        request = urllib.request.Request(url, headers={"Accept": "application/json", "User-Agent": f"gpu-image-builder/{__version__}"})
        if self._auth:
            request.add_unredirected_header("Authorization", self._auth)  # never sent on to another host
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                body = self._read(response, shown)
                content_type = str(response.headers.get("Content-Type", ""))
        except urllib.error.HTTPError as exc:
            exc.close()
            raise self._http_error(exc.code, str(exc.reason), shown, project, version) from None
        except urllib.error.URLError as exc:
            raise self._network_error(exc.reason) from None
        except (OSError, http.client.HTTPException) as exc:
            raise self._network_error(exc) from None
        return self._parse(body, content_type, shown)

    def _read(self, response: Any, shown: str) -> bytes:
        declared = response.headers.get("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            raise self._too_big(shown)
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = response.read(_CHUNK)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > self.max_bytes:
                raise self._too_big(shown)
            chunks.append(chunk)

    def _too_big(self, shown: str) -> IndexFailure:
        return IndexFailure(
            f"the package index {self.display} answered more than {self.max_bytes // 2**20} MiB for {shown}; "
            f"is {_OPTION} the JSON API of an index (like {DEFAULT_INDEX_JSON_URL})?",
            self.display,
        )

    def _parse(self, body: bytes, content_type: str, shown: str) -> dict[str, Any]:
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            kind = content_type.split(";")[0].strip() or "no content type"
            raise IndexFailure(
                f"the package index {self.display} answered something that is not JSON for {shown} ({kind}, {len(body)} bytes, "
                f"starting {body[:32]!r}): give {_OPTION} the JSON API (like {DEFAULT_INDEX_JSON_URL}), not a simple index or a login page",
                self.display,
            ) from None
        if not isinstance(doc, dict):
            raise IndexFailure(
                f"the package index {self.display} answered JSON that is not an object for {shown}: "
                f"give {_OPTION} the JSON API (like {DEFAULT_INDEX_JSON_URL})",
                self.display,
            )
        return doc

    def _http_error(self, code: int, reason: str, shown: str, project: str, version: str | None) -> Exception:
        if code == 404:
            if version is None:
                return ProjectNotFound(
                    f"project {project!r} not found on the package index {self.display} (HTTP 404 for {shown}): check the name, "
                    f"or that {_OPTION} is a JSON API (like {DEFAULT_INDEX_JSON_URL}) that carries it",
                    self.display,
                )
            return ProjectNotFound(
                f"{project} {version} not found on the package index {self.display} (HTTP 404 for {shown}): "
                "the project lists it but its release document is missing; check the mirror",
                self.display,
            )
        status = f"HTTP {code} {reason}".strip()
        if code == 429 or code >= 500:
            return _Transient(status)
        hint = "check the mirror's credentials (user:password@ in the URL, or its token)" if code in (401, 403) else "check the URL"
        return IndexFailure(
            f"the package index {self.display} answered {status} for {shown}: {hint}, or point {_OPTION} at another mirror", self.display
        )

    def _network_error(self, reason: object) -> Exception:
        if isinstance(reason, ssl.SSLCertVerificationError):
            detail = reason.verify_message or "certificate verify failed"
            return IndexFailure(
                f"cannot reach the package index {self.display} (TLS: {detail}): give the CA bundle that signs it "
                "(--ca-bundle or $BUILDER_CA_BUNDLE), or point --index-json-url at another mirror",
                self.display,
            )
        if isinstance(reason, ssl.SSLError):
            return IndexFailure(
                f"cannot reach the package index {self.display} (TLS: {' '.join(str(reason).split())}): "
                "check that the URL is https and the mirror's TLS setup, or point --index-json-url at another mirror",
                self.display,
            )
        if isinstance(reason, TimeoutError):
            return _Transient(f"timed out after {self.timeout_s:g} s")
        if isinstance(reason, socket.gaierror):
            return _Transient(f"cannot resolve {urlsplit(self.base_url).hostname}: {reason.strerror or reason}")
        if isinstance(reason, ConnectionRefusedError):
            return _Transient("connection refused")
        if isinstance(reason, (http.client.RemoteDisconnected, ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
            return _Transient("the connection closed without an answer")
        if isinstance(reason, http.client.IncompleteRead):
            return _Transient("the answer was cut off")
        if isinstance(reason, OSError):
            return _Transient(" ".join((reason.strerror or str(reason) or type(reason).__name__).split()))
        return _Transient(" ".join(str(reason).split()) or type(reason).__name__)


def _split_url(given: str, display: str) -> tuple[str, str | None, str]:
    """(URL without credentials, an Authorization header for them, host); UserError when it is no http(s) URL."""
    parts = urlsplit(given.strip())
    fix = f"give {_OPTION} like {DEFAULT_INDEX_JSON_URL}"
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in given.strip()):
        raise UserError(f"the package index URL {display!r} is not an http(s) URL: {fix}")
    if parts.query or parts.fragment:
        raise UserError(f"the package index URL {display!r} has a query or fragment; {fix}")
    try:
        port = parts.port
    except ValueError:
        raise UserError(f"the package index URL {display!r} has an invalid port: {fix}") from None
    auth = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        auth = "Basic " + base64.b64encode(pair.encode()).decode()
    host = parts.hostname
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", "")), auth, host
