"""Hand credentials to a classic-builder build without writing them into anything the engine keeps.

The classic builder (no BuildKit, so no `RUN --mount=type=secret`) records build arguments in the
image history and every COPY in a layer, and keeps the build stage as an untagged image. So a
pip.conf whose index URLs carry `user:password@` never goes into the build context or a build
argument: this server holds it in memory on 127.0.0.1 (builds use host networking), under a
random one-time path, for the length of one build. The build step fetches it, uses it and
deletes it inside the same RUN, so no layer holds it; the history holds only the dead URL.
"""

from __future__ import annotations

import http.server
import re
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

LOCALHOST = "127.0.0.1"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: SecretServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        data = self.server.take(self.path)
        if data is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        return  # never log paths: they are the capability


class SecretServer(http.server.ThreadingHTTPServer):
    """Serves each published secret to at most `uses` requests, until it is revoked."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__((LOCALHOST, 0), _Handler)
        self._secrets: dict[str, tuple[bytes, int]] = {}
        self._lock = threading.Lock()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def publish(self, data: bytes, uses: int = 1) -> str:
        path = "/" + secrets.token_urlsafe(32)
        with self._lock:
            self._secrets[path] = (data, uses)
        return f"http://{LOCALHOST}:{self.port}{path}"

    def revoke(self, url: str) -> None:
        with self._lock:
            self._secrets.pop("/" + url.rsplit("/", 1)[-1], None)

    def take(self, path: str) -> bytes | None:
        with self._lock:
            found = self._secrets.get(path)
            if found is None:
                return None
            data, uses = found
            if uses <= 1:
                del self._secrets[path]
            else:
                self._secrets[path] = (data, uses - 1)
            return data


@contextmanager
def serving() -> Iterator[SecretServer]:
    server = SecretServer()
    thread = threading.Thread(target=server.serve_forever, name="builder-secrets", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        with server._lock:
            server._secrets.clear()


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_LINE_END = re.compile(r"[\r\n]")
_AUTHORITY_END = re.compile(r"[/?#]")
_HOST_START = re.compile(r"[\w\[%]")
MASK = "****"


def redact(text: str) -> str:
    """Credentials in URLs (`user:password@`, `token@`) -> `****@`, for anything written to logs,
    results or messages.

    A URL's userinfo is everything from `://` to the LAST `@` before its host, so a user name that is
    an e-mail address (`me@corp.example:pw@host`, usual on Artifactory and Nexus) and a password with
    spaces, `@` or `:` are masked whole. The last `@` is looked for twice, and the later one wins:
    in the authority (up to the first `/`, `?` or `#`; spaces allowed), and in the URL's first
    whitespace-free stretch (a raw `/`, `?` or `#` inside a password, which no client parses but a
    message could still print). It never looks past the end of the line or the next `scheme://`, and
    only at an `@` followed by a host, so `user:password@ in the URL` in prose is left alone. When in
    doubt it masks more (`git+https://host/repo@v1` shows as `git+https://****@v1`): a message with
    less detail is a fair price for a password that never reaches a log."""
    out: list[str] = []
    done = 0
    for match in _SCHEME.finditer(text):
        start = match.end()
        if start < done:
            continue  # a `scheme://` inside what was just masked
        at = _userinfo_end(text, start)
        if at > 0:
            out.append(text[done:start])
            out.append(MASK)
            done = start + at
    out.append(text[done:])
    return "".join(out)


def _userinfo_end(text: str, start: int) -> int:
    """How far past `start` (just after `://`) the `@` that ends the userinfo is, or -1."""
    line = _LINE_END.search(text, start)
    end = line.start() if line else len(text)
    following = _SCHEME.search(text, start, end)  # the authority never runs into the next URL
    cut = _AUTHORITY_END.search(text, start, following.start() if following else end)
    authority = text[start : cut.start() if cut else following.start() if following else end]
    stretch = text[start:end].split(None, 1)[0] if end > start and not text[start].isspace() else ""
    return max(_last_at(authority), _last_at(stretch))


def _last_at(text: str) -> int:
    """The last `@` in `text` that is followed by something a host can start with."""
    at = text.rfind("@")
    while at >= 0 and not _HOST_START.match(text, at + 1):
        at = text.rfind("@", 0, at)
    return at
