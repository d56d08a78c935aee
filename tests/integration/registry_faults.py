"""Helpers for the publish attack tests: a small image made from the host's own binaries (so a real
manifest container runs in it without pulling anything), and an HTTP proxy on 127.0.0.1 in front of
the local registry that can answer one request with a 500 or stall it (read the upload, never
answer) and notes when the engine closes a stalled connection."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import io
import os
import signal
import socket
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from docker import DockerClient

UPSTREAM = ("127.0.0.1", 5000)
HOST_FILES = ("/usr/bin/dash", "/usr/bin/timeout", "/usr/bin/env", "/usr/bin/sort", "/usr/bin/sleep", "/usr/bin/cat")
LIBS = ("/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2")
SCRIPTS = {  # `python -c <the SBOM's listing>` prints /etc/h5a-dists; dpkg-query answers the manifest's format and the SBOM's
    "usr/bin/python": '#!/bin/sh\ncase "$2" in *importlib.metadata*) cat /etc/h5a-dists; exit 0;; esac\necho "h5a-mini==$(cat /etc/h5a-token)"\n',
    "usr/bin/dpkg-query": "#!/bin/sh\ncase \"$*\" in *Architecture*) printf 'dash\\t0.5.12-2\\tamd64\\n'; exit 0;; esac\necho 'dash 0.5.12-2'\n",
}


def mini_image(client: DockerClient, repository: str, tag: str, token: str, padding: int = 3 * 2**20, dists: str = "") -> str:
    """Import an image with sh, timeout, env, sort, fake python/dpkg-query and `padding` random bytes
    (an upload worth stalling); `token` makes its id and digest its own; `dists` is what its venv
    lists (`name<TAB>version` lines: the SBOM's Python set). Returns the image id."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def add(name: str, data: bytes, mode: int = 0o755) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))

        for path in (*HOST_FILES, *LIBS):
            with open(path, "rb") as handle:
                add(path.lstrip("/"), handle.read())
        link = tarfile.TarInfo("bin/sh")
        link.type, link.linkname = tarfile.SYMTYPE, "/usr/bin/dash"
        tar.addfile(link)
        for name, text in SCRIPTS.items():
            add(name, text.encode())
        add("etc/h5a-token", token.encode(), 0o644)
        add("etc/h5a-dists", dists.encode(), 0o644)
        add("padding", os.urandom(padding), 0o644)
        for folder in ("tmp",):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777
            tar.addfile(info)
    client.api.import_image(src=buf.getvalue(), repository=repository, tag=tag, changes=["ENV PATH=/usr/bin:/bin", 'CMD ["/bin/sh"]'])
    return str(client.api.inspect_image(f"{repository}:{tag}")["Id"])


Rule = Callable[[str, str], str | None]  # (method, path) -> "500" | "stall" | None (forward)


@dataclass
class Proxy:
    port: int
    rule: Rule
    seen: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, what we did)
    stalled: list[int] = field(default_factory=list)  # the engine's port of each stalled connection
    stop: threading.Event = field(default_factory=threading.Event)

    def held(self) -> list[int]:
        """The stalled connections the engine still holds open (its end ESTABLISHED, from /proc/net/tcp)."""
        open_ends = set()
        with open("/proc/net/tcp", encoding="ascii") as table:
            for row in table.read().splitlines()[1:]:
                local, remote, state = row.split()[1:4]
                if state == "01" and int(remote.split(":")[1], 16) == self.port:
                    open_ends.add(int(local.split(":")[1], 16))
        return [port for port in self.stalled if port in open_ends]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    proxy: Proxy

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _handle(self) -> None:
        action = self.proxy.rule(self.command, self.path)
        self.proxy.seen.append((self.command, self.path, action or "forward"))
        if action == "stall":
            self._stall()
            return
        body = self._body()
        if action == "500":
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            payload = b'{"errors":[{"code":"UNKNOWN","message":"injected fault"}]}'
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        upstream = http.client.HTTPConnection(*UPSTREAM, timeout=120)
        upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for key, value in self.headers.items():  # every Accept line: the registry picks the manifest type by them
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                upstream.putheader(key, value)
        if body or self.command in ("PUT", "POST", "PATCH"):
            upstream.putheader("Content-Length", str(len(body)))
        upstream.endheaders(body or None)
        response = upstream.getresponse()
        data = response.read()
        self.send_response(response.status)
        for key, value in response.getheaders():
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(key, value)
        self.send_header(
            "Content-Length",
            response.getheader("Content-Length") or str(len(data)) if self.command == "HEAD" else str(len(data)),
        )
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        upstream.close()

    def _stall(self) -> None:
        """Stop reading and never answer, like a registry whose upload hangs; the connection is held
        until the engine closes its end (Proxy.held says whether it did) or the proxy stops."""
        self.proxy.stalled.append(int(self.client_address[1]))
        self.proxy.stop.wait()
        self.close_connection = True

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _handle  # noqa: N815

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        return


@contextlib.contextmanager
def proxy(rule: Rule) -> Iterator[Proxy]:
    """A faulting registry proxy on 127.0.0.1:<free port> in front of 127.0.0.1:5000."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    state = Proxy(int(server.server_address[1]), rule)
    server.RequestHandlerClass = type("Handler", (_Handler,), {"proxy": state})
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stop.set()
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def terminate_when(proc: subprocess.Popen[str], ready: Callable[[], bool], what: str, settle_s: float = 0.0) -> str:
    """SIGTERM `proc` once `ready()` (within 120 s, while it runs), then its stderr; killed if it outlives
    the test. `what` is said when it never got ready."""
    try:
        deadline = time.monotonic() + 120
        while not ready() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert ready(), (what, proc.communicate(timeout=10))
        time.sleep(settle_s)
        proc.send_signal(signal.SIGTERM)
        return proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
