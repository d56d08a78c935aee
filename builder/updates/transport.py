"""The HTTP plumbing under the index client: a whole-document deadline, credentials that stay with
their origin, and redirects that cannot leave http(s) or downgrade to plain http.

Why not urllib's defaults: its timeout is per socket operation, so a mirror that sends one byte a
second is never timed out; its opener also follows redirects to ftp:// and reads file:// and
data: URLs a document names. A `Deadline` here is a wall-clock limit for one document (every
request, retry and wait for it): a timer shuts the socket down when it passes, which wakes any
blocked read (TCP connect, TLS handshake, headers, body) on plain and TLS connections alike.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import ssl
import threading
import time
import urllib.request
from contextvars import ContextVar
from typing import IO, Any
from urllib.parse import urlsplit

Origin = tuple[str, str, int]  # (scheme, host, effective port)
DEFAULT_PORTS = {"http": 80, "https": 443}
_CURRENT: ContextVar[Deadline | None] = ContextVar("builder_index_deadline", default=None)


class Refused(Exception):
    """A redirect the client does not follow; the message says where it pointed."""


def origin(url: str) -> Origin | None:
    """(scheme, host, effective port) of an http(s) URL; None for anything else or a malformed one."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not host:
        return None
    return parts.scheme, host, port if port is not None else DEFAULT_PORTS[parts.scheme]


class Deadline:
    """A wall-clock limit for one document; `with deadline:` arms it. Sockets opened for it while
    armed (see `_Watched`) are shut down when it passes; `expired` says it did."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.expired = False
        self._sockets: list[tuple[int, int]] = []  # (fd, inode): an fd number reused later is not ours
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._token: Any = None

    def left(self) -> float:
        return self.end - time.monotonic()

    def passed(self) -> bool:
        return self.expired or self.left() <= 0

    def socket_timeout(self, per_operation: float) -> float:
        """The per-operation timeout, past the deadline by a margin: the deadline's timer fires
        first, so a stall is reported as the deadline it is, not as a shorter timeout."""
        return min(per_operation, max(0.0, self.left()) + 1.0)

    def __enter__(self) -> Deadline:
        self._timer = threading.Timer(max(0.0, self.left()), self._expire)
        self._timer.daemon = True
        self._timer.start()
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self._token)
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            self._sockets.clear()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            entry = (sock.fileno(), os.fstat(sock.fileno()).st_ino)
            if self.expired or self.left() <= 0:
                self.expired = True
                _shut(*entry)
            else:
                self._sockets.append(entry)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for entry in self._sockets:
                _shut(*entry)


def _shut(fd: int, inode: int) -> None:
    """Shut the connection on `fd` down (not close: its owner still closes it), if it is still ours."""
    with contextlib.suppress(OSError):
        if os.fstat(fd).st_ino != inode:
            return
        sock = socket.socket(fileno=fd)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.detach()


class _WatchedHTTP(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()  # the TCP connection (and a proxy's tunnel); TLS, if any, comes after
        deadline = _CURRENT.get()
        if deadline is not None and self.sock is not None:
            deadline.watch(self.sock)


class _WatchedHTTPS(http.client.HTTPSConnection, _WatchedHTTP):
    """MRO: HTTPSConnection.connect -> _WatchedHTTP.connect (watched) -> TLS handshake, so a slow
    handshake is under the deadline too."""


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_WatchedHTTP, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def do_open(self, http_class: Any, req: urllib.request.Request, **kwargs: Any) -> http.client.HTTPResponse:
        return super().do_open(_WatchedHTTPS, req, **kwargs)


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follows http(s) redirects only, never from https down to http; the index's credentials go
    on only to their own origin (urllib drops them on every redirect, a same-origin one included)."""

    def __init__(self, credentials: tuple[Origin, str] | None) -> None:
        self.credentials = credentials

    def redirect_request(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        target = origin(newurl)
        if target is None:
            fp.close()
            raise Refused(f"redirected to {newurl}, which is not an http(s) URL")
        if urlsplit(req.full_url).scheme == "https" and target[0] == "http":
            fp.close()
            raise Refused(f"redirected from https to plain http ({newurl})")
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and self.credentials is not None and target == self.credentials[0]:
            new.add_unredirected_header("Authorization", self.credentials[1])
        return new


def opener(
    context: ssl.SSLContext | None, proxies: dict[str, str] | None, credentials: tuple[Origin, str] | None
) -> urllib.request.OpenerDirector:
    """http(s) only: no file://, ftp:// or data: handler, so a URL a document names cannot reach them."""
    director = urllib.request.OpenerDirector()
    handlers: list[urllib.request.BaseHandler] = [
        urllib.request.ProxyHandler(proxies),
        _HTTPHandler(),
        _HTTPSHandler(context=context),
        urllib.request.HTTPDefaultErrorHandler(),
        _Redirects(credentials),
        urllib.request.HTTPErrorProcessor(),
    ]
    for handler in handlers:
        director.add_handler(handler)
    return director
