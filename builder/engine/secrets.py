"""Hand credentials and local wheels to a classic-builder build without writing them into anything
the engine keeps.

The classic builder (no BuildKit, so no `RUN --mount=type=secret`) records build arguments in the
image history and every COPY in a layer of the image (the Dockerfiles have one stage). So a
pip.conf (whose index URLs may carry `user:password@`), the CA bundle and the list of requirements
the local wheels satisfy never go into the build context or a build argument: this server holds them in memory on 127.0.0.1 (builds use host networking), under a
random one-time path each, for the length of one build. The install step fetches them, uses them
and deletes them inside the same RUN, so no layer holds them; the history holds only dead URLs.

The pinned local wheels are served the same way, as a find-links page under another random path
(`publish_files`), instead of being copied into the build context: a CUDA image's wheels are GBs,
and copying them meant a context tarball, a COPY layer and its commit, each
of them GBs of disk traffic per build.
"""

from __future__ import annotations

import html
import http.server
import secrets
import shutil
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from builder.util.text import redact as redact  # re-exported: where the build's callers have always found it

LOCALHOST = "127.0.0.1"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: SecretServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        served = self.server.take(self.path)
        if served is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if isinstance(served, Path):
            self._send_file(served)
            return
        self._head(len(served), "text/html; charset=utf-8" if self.path.endswith("/") else "text/plain; charset=utf-8")
        self.wfile.write(served)

    def _head(self, length: int, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(length))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()

    def _send_file(self, path: Path) -> None:
        try:
            handle = path.open("rb")
        except OSError:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        with handle:
            self._head(path.stat().st_size, "application/octet-stream")
            try:
                shutil.copyfileobj(handle, self.wfile, 1 << 20)
            except (BrokenPipeError, ConnectionResetError):
                return  # the build went away (interrupted): nothing to answer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        return  # never log paths: they are the capability


class SecretServer(http.server.ThreadingHTTPServer):
    """Serves each published secret to at most `uses` requests, until it is revoked."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__((LOCALHOST, 0), _Handler)
        self._secrets: dict[str, tuple[bytes, int]] = {}
        self._folders: dict[str, dict[str, tuple[Path, str | None]]] = {}  # "/<token>/" -> file name -> (file, sha256)
        self._lock = threading.Lock()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def publish(self, data: bytes, uses: int = 1) -> str:
        path = "/" + secrets.token_urlsafe(32)
        with self._lock:
            self._secrets[path] = (data, uses)
        return f"http://{LOCALHOST}:{self.port}{path}"

    def publish_files(self, files: Mapping[str, Path], hashes: Mapping[str, str] | None = None) -> str:
        """A find-links page listing `files` (name -> file) and the files under it, answered until
        revoked (pip reads the page once and each file once per attempt). `hashes` (name -> sha256)
        go on the page's links as `#sha256=`: pip checks them, and uv takes a find-links file for a
        hash-pinned requirement only when its link names the hash (otherwise it downloads the index's)."""
        folder = "/" + secrets.token_urlsafe(32) + "/"
        with self._lock:
            self._folders[folder] = {name: (path, (hashes or {}).get(name)) for name, path in files.items()}
        return f"http://{LOCALHOST}:{self.port}{folder}"

    def revoke(self, url: str) -> None:
        with self._lock:
            if url.endswith("/"):
                self._folders.pop("/" + url.rstrip("/").rsplit("/", 1)[-1] + "/", None)
            else:
                self._secrets.pop("/" + url.rsplit("/", 1)[-1], None)

    def take(self, path: str) -> bytes | Path | None:
        with self._lock:
            folder, _, name = path.rpartition("/")
            files = self._folders.get(folder + "/")
            if files is not None:
                if not name:
                    return _page(files)
                served = files.get(unquote(name))
                return None if served is None else served[0]
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
            server._folders.clear()


def _page(files: Mapping[str, tuple[Path, str | None]]) -> bytes:
    def href(name: str) -> str:
        digest = files[name][1]
        return quote(name) + (f"#sha256={digest}" if digest else "")

    links = "".join(f'<a href="{href(name)}">{html.escape(name)}</a>\n' for name in sorted(files))
    return f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n".encode()
