"""A small client of the package index's JSON API (PyPI's `GET {base}/{project}/json` and
`{base}/{project}/{version}/json`), for `builder updates` and the nightly loop.

Network only, stdlib urllib (through builder.updates.transport): a timeout on every socket
operation and a wall-clock deadline on every document, tries included; the CA bundle the user
gives (else the system's); retries with backoff for what a retry can fix (network errors,
timeouts, HTTP 5xx and 429) and none for what it cannot (404, other 4xx, TLS verification, a body
that is not JSON). Credentials stay with their origin. Whatever goes wrong is one `IndexFailure`
whose message is one line: the index, the cause, and what to do; text the index sent is escaped
(builder.util.text.printable) before it is part of one.
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import re
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, unquote, urlsplit, urlunsplit
from urllib.request import url2pathname

from builder import __version__
from builder.engine.retry import GaveUp, retry_network
from builder.engine.settings import check_ca_bundle
from builder.updates import transport, wheelmeta
from builder.util import fsio
from builder.util.errors import RunFailure, UserError
from builder.util.text import escape_controls, printable, redact

DEFAULT_INDEX_JSON_URL = "https://pypi.org/pypi"
INDEX_JSON_ENV = "BUILDER_INDEX_JSON_URL"
DEADLINE_ENV = "BUILDER_INDEX_DEADLINE_S"
DEFAULT_TIMEOUT_S = 20.0  # per socket operation
DEFAULT_DEADLINE_S = 120.0  # per document (a project's, a release's, or one wheel's metadata), every try included
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


def index_deadline(env: Mapping[str, str]) -> float:
    """$BUILDER_INDEX_DEADLINE_S (seconds one document may take, every try included), else the default."""
    given = env.get(DEADLINE_ENV, "").strip()
    if not given:
        return DEFAULT_DEADLINE_S
    try:
        seconds = float(given)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 < seconds <= 86400):
        raise UserError(f"${DEADLINE_ENV} is {printable(given, 40)!r}; give seconds between 0 and 86400 (default {DEFAULT_DEADLINE_S:g})")
    return seconds


class IndexClient:
    """`client(project)` -> the project document; `client(project, version)` -> that release's.

    Satisfies builder.updates.releases.Fetch. `backoff_s` scales the exponential wait between
    tries (tests pass 0). `deadline_s` bounds one document in wall-clock time, all its tries and
    waits included: a mirror that drips a byte a second fails in one line instead of never.

    Credentials (`user:password@` in the base URL) are sent only to the exact origin they were
    given with (scheme, host and port): never to a wheel URL on another port or scheme of the same
    host, never over plain http unless the index itself was given as http with them (then to that
    origin only), and never on through a redirect to anywhere else."""

    def __init__(
        self,
        base_url: str = DEFAULT_INDEX_JSON_URL,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        ca_bundle: str | Path | None = None,
        attempts: int = DEFAULT_ATTEMPTS,
        backoff_s: float = 1.0,
        max_bytes: int = MAX_RESPONSE_BYTES,
        deadline_s: float = DEFAULT_DEADLINE_S,
    ) -> None:
        self.display = printable(redact(base_url.strip().rstrip("/")), 300)
        self.base_url, auth, host = _split_url(base_url, self.display)
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.max_bytes = max_bytes
        where = transport.origin(self.base_url)
        self._credentials = (where, auth) if auth is not None and where is not None else None
        # checked even for http://, so a bad --ca-bundle is never silently ignored
        cafile = None if ca_bundle is None else str(check_ca_bundle(Path(ca_bundle).expanduser(), str(ca_bundle)))
        context = None
        if cafile is not None or self.base_url.startswith("https://"):  # plain http:// skips loading the system's CA store
            context = ssl.create_default_context(cafile=cafile)
        # No proxy can reach this machine's loopback: a local mirror (or a test's) is asked directly.
        self._local = host in _LOOPBACK
        self._opener = transport.opener(context, {} if self._local else None, self._credentials)
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
            files: dict[str, bytes] = {}
            try:
                with transport.Deadline(self.deadline_s) as deadline:  # the wheel's reads are one document
                    fetch: wheelmeta.FetchRange = lambda wheel, first, last: self._range(wheel, first, last, deadline, files)  # noqa: E731
                    return wheelmeta.release_document(self._projects[project], url, version, fetch)
            except wheelmeta.NoWheel as exc:
                raise ProjectNotFound(
                    f"{project} {version}: the index {self.display} serves no release document and {exc}", self.display
                ) from None
            except ValueError as exc:
                reason = printable(redact(str(exc)), 400)
                raise IndexFailure(
                    f"{project} {version}: cannot read its metadata from a wheel on {self.display} ({reason}): {_FIX}", self.display
                ) from None

    def _headers(self, url: str, request: urllib.request.Request) -> urllib.request.Request:
        """The index's credentials, only for a URL of their exact origin (and never carried on by a redirect)."""
        if self._credentials is not None and transport.origin(url) == self._credentials[0]:
            request.add_unredirected_header("Authorization", self._credentials[1])
        return request

    def _range(self, url: str, first: int, last: int, deadline: transport.Deadline, files: dict[str, bytes]) -> bytes:
        """Bytes first..last of a file the index lists (retried like the documents, within the wheel's deadline)."""
        shown = printable(redact(url))
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            raise ValueError(f"the index lists {shown}, which is malformed ({exc})") from None
        if parts.scheme == "file":
            if not self._local:  # a remote document naming this machine's files: probing, or a FIFO to hang on
                raise ValueError(f"the index lists {shown}, a file on this machine; only an index on 127.0.0.1 may list local files")
            return _file_range(url, shown, first, last, files)
        if parts.scheme not in transport.DEFAULT_PORTS:
            raise ValueError(f"the index lists {shown}, which is not an http(s) or file:// URL")
        if "@" in parts.netloc:  # urllib cannot send them, and the index's own go only to its origin
            raise ValueError(f"the index lists {shown}, a URL with credentials in it; list files without them")
        what = f"cannot read {shown} from the package index {self.display}"
        return self._retried(lambda: self._range_once(url, shown, first, last, deadline), what, deadline)

    def _range_once(self, url: str, shown: str, first: int, last: int, deadline: transport.Deadline) -> bytes:
        headers = {"Range": f"bytes={first}-{last}", "User-Agent": f"gpu-image-builder/{__version__}"}
        request = self._headers(url, urllib.request.Request(url, headers=headers))

        def body(response: Any) -> bytes:
            if response.status != 206:  # a server that ignores Range would send the whole wheel
                raise IndexFailure(
                    f"{shown} is served without byte ranges (HTTP {response.status}), so its metadata cannot be read", self.display
                )
            return bytes(response.read(last - first + 2))

        return self._fetch(request, shown, deadline, body, lambda code, reason: self._file_error(code, reason, shown))

    def _get(self, parts: tuple[str, ...], project: str, version: str | None) -> dict[str, Any]:
        path = "/" + "/".join(quote(p, safe="") for p in parts)
        with transport.Deadline(self.deadline_s) as deadline:
            return self._retried(
                lambda: self._once(path, project, version, deadline), f"cannot reach the package index {self.display}", deadline
            )

    def _retried(self, call: Callable[[], T], what: str, deadline: transport.Deadline) -> T:
        """`call()`, tried again with backoff while it fails transiently and the deadline leaves
        time for the wait (engine/retry.py, the one retry loop); then one IndexFailure line."""
        try:
            return retry_network(
                lambda attempt: call(),
                flake=lambda exc: isinstance(exc, _Transient),
                attempts=self.attempts,
                wait_s=self.backoff_s,
                time_left=deadline.left,
            )
        except GaveUp as exc:
            cause = exc.last.cause if isinstance(exc.last, _Transient) else exc.reason
            times = f"{exc.attempts} tries" if exc.attempts != 1 else "1 try"
            raise IndexFailure(f"{what} ({printable(redact(cause))}; {times}): {_FIX}", self.display) from None

    def _once(self, path: str, project: str, version: str | None, deadline: transport.Deadline) -> dict[str, Any]:
        url = self.base_url + path
        shown = self.display + path
        request = urllib.request.Request(url, headers={"Accept": "application/json", "User-Agent": f"gpu-image-builder/{__version__}"})
        body, content_type = self._fetch(
            self._headers(url, request),
            shown,
            deadline,
            lambda response: (self._read(response, shown), str(response.headers.get("Content-Type", ""))),
            lambda code, reason: self._http_error(code, reason, shown, project, version),
        )
        return self._parse(body, content_type, shown)

    def _fetch(
        self,
        request: urllib.request.Request,
        shown: str,
        deadline: transport.Deadline,
        handle: Callable[[Any], T],
        http_error: Callable[[int, str], Exception],
    ) -> T:
        """One request under the document's deadline: `handle(response)`, or the failure classified."""
        if deadline.passed():
            raise self._late(shown, deadline)
        try:
            with self._opener.open(request, timeout=deadline.socket_timeout(self.timeout_s)) as response:
                result = handle(response)
        except urllib.error.HTTPError as exc:
            exc.close()
            if deadline.passed():
                raise self._late(shown, deadline) from None
            raise http_error(exc.code, printable(exc.reason, 100)) from None
        except transport.Refused as exc:
            raise IndexFailure(
                f"the package index {self.display} {printable(redact(str(exc)), 300)} for {shown}; refused: point {_OPTION} at the mirror's own https URL",
                self.display,
            ) from None
        except urllib.error.URLError as exc:
            raise self._late(shown, deadline) if deadline.passed() else self._network_error(exc.reason, request.host) from None
        except (OSError, http.client.HTTPException) as exc:
            raise self._late(shown, deadline) if deadline.passed() else self._network_error(exc, request.host) from None
        except ValueError as exc:  # a URL the index listed that urllib cannot ask (a host idna refuses, a bad port)
            raise IndexFailure(f"cannot ask the package index {self.display} for {shown}: {printable(exc, 120)}", self.display) from None
        if deadline.expired:  # a body the deadline cut short can look complete (no Content-Length)
            raise self._late(shown, deadline)
        return result

    def _late(self, shown: str, deadline: transport.Deadline) -> IndexFailure:
        return IndexFailure(
            f"no complete answer for {shown} from the package index {self.display} within {deadline.seconds:g} s "
            f"(the limit per document, every try included; ${DEADLINE_ENV} sets it): the mirror is stalled or too slow; "
            f"check it, or point {_OPTION} at another mirror",
            self.display,
        )

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
            doc = _clean(json.loads(body))
        except RecursionError:
            raise IndexFailure(
                f"the package index {self.display} answered JSON nested too deeply to be an index document for {shown}: check the mirror",
                self.display,
            ) from None
        except (ValueError, UnicodeDecodeError):
            kind = printable(content_type.split(";")[0].strip(), 60) or "no content type"
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

    def _file_error(self, code: int, reason: str, shown: str) -> Exception:
        status = f"HTTP {code} {reason}".strip()
        if code == 429 or code >= 500:
            return _Transient(status)
        return IndexFailure(f"the package index {self.display} lists {shown}, which answers {status}: check the mirror", self.display)

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

    def _network_error(self, reason: object, host: str) -> Exception:
        if isinstance(reason, ssl.SSLCertVerificationError):
            detail = printable(reason.verify_message or "certificate verify failed")
            return IndexFailure(
                f"cannot reach the package index {self.display} (TLS: {detail}): give the CA bundle that signs it "
                "(--ca-bundle or $BUILDER_CA_BUNDLE), or point --index-json-url at another mirror",
                self.display,
            )
        if isinstance(reason, ssl.SSLError):
            return IndexFailure(
                f"cannot reach the package index {self.display} (TLS: {printable(' '.join(str(reason).split()))}): "
                "check that the URL is https and the mirror's TLS setup, or point --index-json-url at another mirror",
                self.display,
            )
        if isinstance(reason, TimeoutError):
            return _Transient(f"timed out after {self.timeout_s:g} s")
        if isinstance(reason, socket.gaierror):
            name = re.sub(r":\d*$", "", host.rsplit("@", 1)[-1])  # urllib's host: [userinfo@]name[:port]
            return _Transient(f"cannot resolve {printable(name, 100)}: {reason.strerror or reason}")
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
    fix = f"give {_OPTION} like {DEFAULT_INDEX_JSON_URL}"
    text = given.strip()
    try:
        parts = urlsplit(text)
        host, port = parts.hostname, parts.port
    except ValueError as exc:  # `http://[::1`, a port that is no number or out of range
        raise UserError(f"the package index URL '{display}' is malformed ({printable(exc, 80)}): {fix}") from None
    if parts.scheme not in ("http", "https") or not host or any(c.isspace() or not c.isprintable() for c in text):
        raise UserError(f"the package index URL '{display}' is not an http(s) URL: {fix}")
    try:
        host.encode("idna")  # what the connection does with it: `a..b` or a 64-letter label fail there
    except UnicodeError:
        raise UserError(f"the package index URL '{display}' has an invalid host name: {fix}") from None
    if parts.query or parts.fragment:
        raise UserError(f"the package index URL '{display}' has a query or fragment; {fix}")
    auth = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        auth = "Basic " + base64.b64encode(pair.encode()).decode()
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", "")), auth, host


def _file_range(url: str, shown: str, first: int, last: int, files: dict[str, bytes]) -> bytes:
    """Bytes of a file:// wheel a local mirror lists: read whole through fsio (a regular file, never a
    FIFO or device, at most what a wheel's metadata may take over http), once per release."""
    if url not in files:
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"the index lists {shown}, a file on another host")
        try:
            files[url] = fsio.read_bytes(Path(url2pathname(parts.path)), wheelmeta.MAX_FETCHED, "wheel")
        except UserError as exc:
            raise ValueError(f"{shown}: {exc.message}") from None
    return files[url][first : last + 1]


def _clean(value: Any) -> Any:
    """A JSON document from the network with every control character in its strings escaped, so no
    name, version or Requires-Python it holds can drive a terminal from a message or a table."""
    if isinstance(value, str):
        return escape_controls(value)
    if isinstance(value, dict):
        return {escape_controls(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value
