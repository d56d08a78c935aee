"""A package index on 127.0.0.1 for tests: PyPI's JSON API over real HTTP, faults on demand, and
optionally a PEP 503 simple index over a folder of files.

    with serve_index({"torch": {"2.14.2": {"requires_python": ">=3.10", "requires_dist": [...]}}}) as index:
        IndexClient(index.json_url)("torch")          # GET /pypi/torch/json
        index.fail(times=2, status=503)               # the next two requests answer 503
        index.hang(seconds=2)                         # the next request waits 2 s before answering
        index.drop()                                  # the next request gets its connection closed
        index.answer(b"<html>", "text/html")          # the next request gets this body (200)

Projects: {project: {version: {"requires_python": str | None, "requires_dist": [str], "files": [...],
"yanked": bool}}}. `files` entries are file names or PyPI file dicts (filename, yanked, packagetype, ...);
without `files` a release has one manylinux x86_64 wheel (`files=[wheel(p, v, PURE)]`: a pure-Python one, as jax has). With `files_dir`, /simple/<project>/ lists
that folder's files for the project with `#sha256=` fragments and /files/<name> serves them, so pip
and uv can install from it. Test modules use `serve_index` or the `fake_index` fixture below
(conftest.py stays shared and does not import this).
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import http.server
import json
import re
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pytest

Projects = dict[str, dict[str, dict[str, Any]]]
UPLOADED = "2026-12-01T00:00:00.000000Z"


def normalize(name: str) -> str:
    """PEP 503 project name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


PURE = "py3-none-any"  # a pure-Python wheel's tags: all jax ships (its compiled parts are jaxlib's)


def wheel(project: str, version: str, tag: str = "cp311-cp311-manylinux_2_28_x86_64", *, yanked: bool = False) -> dict[str, Any]:
    """A PyPI file entry for a wheel of this release."""
    return {"filename": f"{project.replace('-', '_')}-{version}-{tag}.whl", "yanked": yanked, "packagetype": "bdist_wheel"}


def closed_port_url(path: str = "/pypi") -> str:
    """An http://127.0.0.1:<port> URL nothing listens on (connection refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}{path}"


@dataclass
class Fault:
    kind: str  # status | hang | drop | body
    times: int
    match: str = ""  # only requests whose path contains this
    status: int = 503
    seconds: float = 0.0
    body: bytes = b""
    content_type: str = "text/html"


class FakeIndex:
    def __init__(self, projects: Projects | None = None, files_dir: Path | None = None, tls: tuple[Path, Path] | None = None) -> None:
        """`tls`: (certificate, key) PEM files to serve https with (see `self_signed`)."""
        self.projects: Projects = projects if projects is not None else {}
        self.files_dir = files_dir
        self.requests: list[str] = []  # every path asked for, in order
        self.headers: list[dict[str, str]] = []  # and the headers each request came with
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.index = self
        self.scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls[0], tls[1])
            self._server.tls = context
            self.scheme = "https"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self._server.server_address[1]}"

    @property
    def json_url(self) -> str:
        """What --index-json-url takes."""
        return f"{self.url}/pypi"

    @property
    def simple_url(self) -> str:
        """What pip's --index-url takes (with files_dir)."""
        return f"{self.url}/simple/"

    def start(self) -> FakeIndex:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # cut hangs short
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeIndex:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- content

    def add(
        self,
        project: str,
        version: str,
        requires_python: str | None = None,
        requires_dist: list[str] | None = None,
        files: list[Any] | None = None,
        *,
        yanked: bool = False,
    ) -> None:
        release: dict[str, Any] = {"requires_python": requires_python, "requires_dist": list(requires_dist or []), "yanked": yanked}
        if files is not None:
            release["files"] = files
        self.projects.setdefault(project, {})[version] = release

    def project_document(self, project: str) -> dict[str, Any] | None:
        name, releases = self._project(project)
        if releases is None:
            return None
        newest = sorted(releases, key=_version_key)[-1] if releases else None
        info = self._info(name, newest, releases[newest]) if newest else {"name": name, "version": None}
        files = {v: self._files(name, v, meta) for v, meta in releases.items()}
        return {"info": info, "releases": files, "urls": files.get(newest, []) if newest else [], "last_serial": 1}

    def release_document(self, project: str, version: str) -> dict[str, Any] | None:
        name, releases = self._project(project)
        if releases is None or version not in releases:
            return None
        meta = releases[version]
        return {"info": self._info(name, version, meta), "urls": self._files(name, version, meta), "last_serial": 1}

    def _project(self, project: str) -> tuple[str, Mapping[str, dict[str, Any]] | None]:
        for name, releases in self.projects.items():
            if normalize(name) == normalize(project):
                return name, releases
        return project, None

    @staticmethod
    def _info(name: str, version: str, meta: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "name": name,
            "version": version,
            "requires_python": meta.get("requires_python"),
            "requires_dist": list(meta.get("requires_dist") or []) or None,
            "yanked": bool(meta.get("yanked", False)),
            "yanked_reason": None,
        }

    def _files(self, name: str, version: str, meta: Mapping[str, Any]) -> list[dict[str, Any]]:
        out = []
        for entry in meta.get("files", [wheel(name, version)]):
            file = {"filename": entry} if isinstance(entry, str) else dict(entry)
            filename = str(file["filename"])
            local = self.files_dir / filename if self.files_dir else None
            data = local.read_bytes() if local and local.is_file() else filename.encode()
            file.setdefault("packagetype", "bdist_wheel" if filename.endswith(".whl") else "sdist")
            file["yanked"] = bool(file.get("yanked")) or bool(meta.get("yanked"))  # a yanked release: every file
            file.setdefault("requires_python", meta.get("requires_python"))
            file.setdefault("upload_time_iso_8601", UPLOADED)
            file.setdefault("url", f"{self.url}/files/{quote(filename)}")
            file.setdefault("digests", {"sha256": hashlib.sha256(data).hexdigest()})
            file.setdefault("size", len(data))
            out.append(file)
        return out

    # --- faults

    def fail(self, times: int = 1, status: int = 503, match: str = "") -> None:
        """The next `times` requests (whose path contains `match`) answer HTTP `status`."""
        self._add(Fault("status", times, match, status=status))

    def hang(self, seconds: float, times: int = 1, match: str = "") -> None:
        """The next `times` requests wait `seconds` before answering (longer than a client's timeout: it gives up)."""
        self._add(Fault("hang", times, match, seconds=seconds))

    def drop(self, times: int = 1, match: str = "") -> None:
        """The next `times` requests get their connection closed without an answer."""
        self._add(Fault("drop", times, match))

    def answer(self, body: bytes, content_type: str = "text/html", times: int = 1, match: str = "") -> None:
        """The next `times` requests get this body with HTTP 200 (a captive portal, a simple index page...)."""
        self._add(Fault("body", times, match, body=body, content_type=content_type))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def connections(self) -> int:
        """Connections accepted, TLS handshakes that failed included."""
        return self._server.connections

    def hits(self, match: str = "") -> int:
        with self._lock:
            return sum(match in path for path in self.requests)

    def _add(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def _take(self, path: str, headers: Mapping[str, str]) -> Fault | None:
        with self._lock:
            self.requests.append(path)
            self.headers.append(dict(headers))
            for fault in self._faults:
                if fault.times > 0 and fault.match in path:
                    fault.times -= 1
                    return fault
        return None


def _version_key(version: str) -> tuple[Any, ...]:
    from packaging.version import Version

    try:
        return (1, Version(version))
    except ValueError:  # InvalidVersion, or a number over 4,300 digits (a hostile index's)
        return (0, version)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    index: FakeIndex
    tls: ssl.SSLContext | None = None
    connections = 0

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = self.socket.accept()
        self.connections += 1
        if self.tls is not None:
            sock.settimeout(5)
            sock = self.tls.wrap_socket(sock, server_side=True)  # a failed handshake raises OSError: that connection is dropped
        return sock, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (a timeout test) breaks the pipe; that is the point, not an error


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        index = self.server.index
        path = unquote(self.path.split("?", 1)[0])
        fault = index._take(path, dict(self.headers.items()))
        if fault is not None:
            if fault.kind == "drop":
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fault.kind == "status":
                return self._send(fault.status, json.dumps({"message": f"fault injected: {fault.status}"}).encode(), "application/json")
            if fault.kind == "body":
                return self._send(200, fault.body, fault.content_type)
            index._stopping.wait(fault.seconds)  # hang, then answer as usual (to a client that may be gone)
        if path.startswith("/pypi/"):
            return self._json(index, path.removeprefix("/pypi/").strip("/").split("/"))
        if path == "/simple/" or path.startswith("/simple/"):
            return self._simple(index, path.removeprefix("/simple/").strip("/"))
        if path.startswith("/files/"):
            return self._file(index, path.removeprefix("/files/"))
        return self._send(404, b"not found", "text/plain")

    def _json(self, index: FakeIndex, parts: list[str]) -> None:
        doc = None
        if len(parts) == 2 and parts[1] == "json":
            doc = index.project_document(parts[0])
        elif len(parts) == 3 and parts[2] == "json":
            doc = index.release_document(parts[0], parts[1])
        if doc is None:
            return self._send(404, json.dumps({"message": "Not Found"}).encode(), "application/json")
        return self._send(200, json.dumps(doc).encode(), "application/json")

    def _local_files(self, index: FakeIndex) -> list[Path]:
        return sorted(p for p in index.files_dir.iterdir() if p.is_file()) if index.files_dir and index.files_dir.is_dir() else []

    def _simple(self, index: FakeIndex, project: str) -> None:
        files = self._local_files(index)
        if not project:
            names = sorted({_dist_name(p.name) for p in files})
            links = "".join(f'<a href="/simple/{n}/">{n}</a>\n' for n in names)
            return self._send(200, f"<!DOCTYPE html><html><body>\n{links}</body></html>\n".encode(), "text/html")
        mine = [p for p in files if _dist_name(p.name) == normalize(project)]
        if not mine:
            return self._send(404, b"not found", "text/plain")
        links = "".join(
            f'<a href="/files/{quote(p.name)}#sha256={hashlib.sha256(p.read_bytes()).hexdigest()}">{html.escape(p.name)}</a>\n'
            for p in mine
        )
        body = f"<!DOCTYPE html><html><body><h1>Links for {html.escape(project)}</h1>\n{links}</body></html>\n"
        return self._send(200, body.encode(), "text/html")

    def _file(self, index: FakeIndex, name: str) -> None:
        found = next((p for p in self._local_files(index) if p.name == name), None)  # only the folder's own files, by name
        if found is None:
            return self._send(404, b"not found", "text/plain")
        return self._send(200, found.read_bytes(), "application/octet-stream")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        with contextlib.suppress(OSError):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)


def _dist_name(filename: str) -> str:
    """The normalized project of a wheel (name-version-...whl) or an sdist (name-version.tar.gz)."""
    if filename.endswith(".whl"):
        return normalize(filename.split("-", 1)[0])
    stem = re.sub(r"\.(tar\.gz|zip|tar\.bz2)$", "", filename)
    return normalize(stem.rsplit("-", 1)[0])


def self_signed(folder: Path) -> tuple[Path, Path]:
    """(certificate, key) for 127.0.0.1, made with the openssl command; the certificate is its own CA bundle."""
    cert, key = folder / "index-cert.pem", folder / "index-key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@contextlib.contextmanager
def serve_index(
    projects: Projects | None = None, files_dir: Path | None = None, tls: tuple[Path, Path] | None = None
) -> Iterator[FakeIndex]:
    with FakeIndex(projects, files_dir, tls) as index:
        yield index


@pytest.fixture
def fake_index() -> Iterator[FakeIndex]:
    """An empty, started FakeIndex (fill `projects` or call `add`), stopped after the test. A module
    gets it with `pytest_plugins = ("tests.fake_index",)`, or writes its own three-line fixture
    around `serve_index` (importing this one by name reads to ruff as a redefinition)."""
    with serve_index() as index:
        yield index
