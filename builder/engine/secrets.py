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
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from builder.text import redact as redact  # re-exported: where the build's callers have always found it

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
