"""The index client against a hostile mirror, over real sockets on 127.0.0.1: credentials that
must stay with their origin, redirects, slow-drip answers, FIFOs named by file:// URLs, control
characters in what the mirror says, and malformed index URLs."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from builder.updates import transport
from builder.updates.index import DEADLINE_ENV, IndexClient, IndexFailure, index_deadline
from builder.util.errors import UserError
from tests.fake_index import self_signed
from tests.test_wheelmeta import big_wheel

Respond = Callable[["Handler"], None]
RunCli = Callable[..., Result]
WriteMatrix = Callable[..., Path]
CREDS = "ci:s3cret"
AUTH = "Basic Y2k6czNjcmV0"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    respond: Respond
    seen: list[tuple[str, str | None]]  # (path, Authorization)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.seen.append((self.path, self.headers.get("Authorization")))
        with contextlib.suppress(OSError):
            type(self).respond(self)

    def send(self, status: int, body: bytes, headers: dict[str, str] | None = None, reason: str | None = None) -> None:
        self.send_response(status, reason)
        for key, value in {"Content-Length": str(len(body)), **(headers or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def ranged(self, data: bytes) -> None:
        first, last = (int(v) for v in str(self.headers["Range"]).removeprefix("bytes=").split("-"))
        self.send(206, data[first : last + 1])

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        return


class Served:
    def __init__(self, respond: Respond, tls: ssl.SSLContext | None = None) -> None:
        self.seen: list[tuple[str, str | None]] = []
        handler = type("H", (Handler,), {"respond": staticmethod(respond), "seen": self.seen})
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.scheme = "https" if tls else "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}"

    def auth_for(self, prefix: str) -> list[str | None]:
        return [auth for path, auth in self.seen if path.startswith(prefix)]


@contextlib.contextmanager
def serve(respond: Respond, tls: ssl.SSLContext | None = None) -> Iterator[Served]:
    served = Served(respond, tls)
    thread = threading.Thread(target=served.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        served.server.shutdown()
        served.server.server_close()


def project_doc(wheel_url: str, size: int) -> bytes:
    files = [{"filename": "torch-9.1.0-cp311-cp311-manylinux_2_28_x86_64.whl", "url": wheel_url, "size": size, "yanked": False}]
    return json.dumps({"info": {"version": "9.1.0"}, "releases": {"9.1.0": files}}).encode()


def index_listing(wheel_url: Callable[[], str], size: int) -> Respond:
    """An index that lists one wheel (at `wheel_url()`) and serves no release documents."""

    def respond(h: Handler) -> None:
        if h.path == "/pypi/torch/json":
            return h.send(200, project_doc(wheel_url(), size), {"Content-Type": "application/json"})
        return h.send(404, b"{}")

    return respond


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return big_wheel(tmp_path_factory.mktemp("wheel") / "t.whl", members=20).read_bytes()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ssl.SSLContext]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = self_signed(tmp_path_factory.mktemp("tls"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return cert, context


def with_creds(url: str) -> str:
    return url.replace("://", f"://{CREDS}@", 1)


# --- 1. credentials stay with their origin ----------------------------------------------------


def test_credentials_are_not_sent_to_another_port_of_the_same_host(wheel: bytes) -> None:
    with serve(lambda h: h.ranged(wheel)) as files, serve(index_listing(lambda: f"{files.url}/t.whl", len(wheel))) as index:
        doc = IndexClient(with_creds(index.url + "/pypi"), backoff_s=0).release("torch", "9.1.0")
    assert doc["info"]["requires_python"] == ">=3.10"
    assert index.auth_for("/pypi/") and set(index.auth_for("/pypi/")) == {AUTH}  # the index itself gets them
    assert files.seen and files.auth_for("/") == [None] * len(files.seen)  # 127.0.0.1 on another port does not


def test_credentials_go_to_a_wheel_on_the_index_origin_itself(wheel: bytes) -> None:
    def respond(h: Handler) -> None:
        return h.ranged(wheel) if h.path == "/files/t.whl" else index_listing(lambda: "../../files/t.whl", len(wheel))(h)

    with serve(respond) as index:
        IndexClient(with_creds(index.url + "/pypi"), backoff_s=0).release("torch", "9.1.0")
    assert set(index.auth_for("/files/")) == {AUTH}


def test_an_https_index_never_sends_its_credentials_to_an_http_wheel_on_its_host(wheel: bytes, tls: tuple[Path, ssl.SSLContext]) -> None:
    cert, context = tls
    with serve(lambda h: h.ranged(wheel)) as files, serve(index_listing(lambda: f"{files.url}/t.whl", len(wheel)), context) as index:
        IndexClient(with_creds(index.url + "/pypi"), backoff_s=0, ca_bundle=cert).release("torch", "9.1.0")
    assert set(index.auth_for("/pypi/")) == {AUTH}
    assert files.seen and all(auth is None for _, auth in files.seen)  # cleartext http: never


def test_the_origin_is_scheme_host_and_effective_port() -> None:
    client = IndexClient(with_creds("https://mirror.example/pypi"))
    sent = {url: client._headers(url, _request(url)).get_header("Authorization") for url in (
        "https://mirror.example/files/t.whl",
        "https://mirror.example:443/files/t.whl",
        "https://MIRROR.example/files/t.whl",
        "http://mirror.example/files/t.whl",
        "http://mirror.example:443/files/t.whl",
        "https://mirror.example:8443/files/t.whl",
        "https://mirror.example.evil/files/t.whl",
        "https://evil@mirror.example.evil/",
    )}  # fmt: skip
    assert [url for url, auth in sent.items() if auth] == [
        "https://mirror.example/files/t.whl", "https://mirror.example:443/files/t.whl", "https://MIRROR.example/files/t.whl",
    ]  # fmt: skip
    assert transport.origin("http://[::1") is None and transport.origin("ftp://mirror.example/") is None


def _request(url: str) -> Any:
    import urllib.request

    return urllib.request.Request(url)


def test_redirects_carry_credentials_only_to_the_same_origin() -> None:
    with serve(lambda h: h.send(200, b'{"releases": {}}', {"Content-Type": "application/json"})) as other:

        def respond(h: Handler) -> None:
            if h.path == "/pypi/away/json":
                return h.send(302, b"", {"Location": f"{other.url}/pypi/away/json"})
            if h.path == "/pypi/here/json":
                return h.send(301, b"", {"Location": "/moved/here/json"})
            return h.send(200, b'{"releases": {}}', {"Content-Type": "application/json"})

        with serve(respond) as index:
            client = IndexClient(with_creds(index.url + "/pypi"), backoff_s=0)
            client("away")
            client("here")
    assert other.seen == [("/pypi/away/json", None)]
    assert index.auth_for("/moved/") == [AUTH]  # the same origin keeps them across a redirect


def test_a_redirect_from_https_to_http_or_out_of_http_is_refused(tls: tuple[Path, ssl.SSLContext]) -> None:
    cert, context = tls
    with serve(lambda h: h.send(200, b"{}")) as plain:
        targets = {
            "/pypi/down/json": f"{plain.url}/pypi/down/json",
            "/pypi/ftp/json": "ftp://127.0.0.1/pypi/x",
            "/pypi/file/json": "file:///etc/passwd",
        }

        def respond(h: Handler) -> None:
            h.send(302, b"", {"Location": targets[h.path]})

        with serve(respond, context) as index:
            client = IndexClient(with_creds(index.url + "/pypi"), backoff_s=0, ca_bundle=cert)
            with pytest.raises(IndexFailure) as down:
                client("down")
            with pytest.raises(IndexFailure) as ftp:
                client("ftp")
            with pytest.raises(IndexFailure) as file:
                client("file")
    assert plain.seen == []
    assert "redirected from https to plain http" in str(down.value) and "\n" not in str(down.value)
    assert "not an http(s) URL" in str(ftp.value)
    assert "Redirection to url 'file:///etc/passwd' is not allowed" in str(file.value)  # urllib's own check, before ours


# --- 7. deadlines -------------------------------------------------------------------------------


def drip(body: bytes, every_s: float = 0.1, status: int = 200) -> Respond:
    """Headers at once, then the body a byte at a time: each byte resets a per-read timeout."""

    def respond(h: Handler) -> None:
        h.send_response(status)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        for byte in body:
            h.wfile.write(bytes([byte]))
            h.wfile.flush()
            time.sleep(every_s)

    return respond


def drip_headers(h: Handler) -> None:
    h.wfile.write(b"HTTP/1.0 200 OK\r\n")
    for _ in range(200):
        h.wfile.write(b"X: y\r\n")
        h.wfile.flush()
        time.sleep(0.05)


@pytest.mark.parametrize("respond", [drip(b'{"releases": {}}' * 100), drip_headers], ids=["body", "headers"])
def test_a_slow_drip_index_fails_at_the_deadline_in_one_line(respond: Respond) -> None:
    with serve(respond) as index:
        started = time.monotonic()
        with pytest.raises(IndexFailure) as late:
            IndexClient(with_creds(index.url + "/pypi"), timeout_s=5, backoff_s=0, deadline_s=1)("torch")
        took = time.monotonic() - started
    text = str(late.value)
    assert took < 3, took
    assert text.startswith(f"no complete answer for http://****@127.0.0.1:{index.server.server_address[1]}/pypi/torch/json")
    assert "within 1 s" in text and DEADLINE_ENV in text and "\n" not in text and "s3cret" not in text


def test_a_slow_drip_wheel_fails_at_the_deadline(wheel: bytes) -> None:
    def respond(h: Handler) -> None:
        if h.path == "/pypi/torch/json":
            return h.send(200, project_doc("/t.whl", len(wheel)))
        if h.path == "/t.whl":
            return drip(wheel[-4096:], status=206)(h)
        return h.send(404, b"")

    with serve(respond) as index:
        started = time.monotonic()
        with pytest.raises(IndexFailure, match=r"no complete answer for http://127\.0\.0\.1:\d+/t\.whl .* within 1 s"):
            IndexClient(index.url + "/pypi", timeout_s=5, backoff_s=0, deadline_s=1).release("torch", "9.1.0")
        assert time.monotonic() - started < 3


def test_retries_stop_within_the_deadline() -> None:
    with serve(lambda h: h.send(503, b"busy")) as index:
        started = time.monotonic()
        with pytest.raises(IndexFailure, match=r"HTTP 503 .*; \d+ tries"):
            IndexClient(index.url + "/pypi", attempts=1000, backoff_s=0.05, deadline_s=1.5)("torch")
        assert time.monotonic() - started < 2.5
    assert 2 <= len(index.seen) < 1000


def test_the_deadline_is_configurable_and_checked() -> None:
    assert index_deadline({}) == 120.0 and index_deadline({DEADLINE_ENV: "7.5"}) == 7.5
    for bad in ("0", "-1", "nan", "inf", "soon", "1e9"):
        with pytest.raises(UserError, match=DEADLINE_ENV):
            index_deadline({DEADLINE_ENV: bad})


# --- file:// wheels -----------------------------------------------------------------------------


def _release_in_thread(client: IndexClient) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []

    def run() -> None:
        try:
            out.append(client.release("torch", "9.1.0"))
        except Exception as exc:  # noqa: BLE001 - the test inspects whatever it was
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=10)
    return thread, out


def test_a_file_url_naming_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "t.whl"
    os.mkfifo(fifo)
    with serve(index_listing(lambda: fifo.as_uri(), 1000)) as index:
        thread, out = _release_in_thread(IndexClient(index.url + "/pypi", backoff_s=0))
    assert not thread.is_alive(), "reading a FIFO the index named hung"
    assert isinstance(out[0], IndexFailure) and "not a regular file" in str(out[0]) and "\n" not in str(out[0])


def test_a_file_url_to_a_regular_wheel_is_read(tmp_path: Path, wheel: bytes) -> None:
    local = tmp_path / "t.whl"
    local.write_bytes(wheel)
    with serve(index_listing(lambda: local.as_uri(), len(wheel))) as index:
        thread, out = _release_in_thread(IndexClient(index.url + "/pypi", backoff_s=0))
    assert isinstance(out[0], dict) and out[0]["info"]["requires_python"] == ">=3.10"


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("ftp://127.0.0.1/t.whl", "not an http"),
        ("http://a..b/t.whl", "cannot ask the package index"),
        ("http://[::1/t.whl", "Invalid IPv6 URL"),
        ("http://attacker:x@127.0.0.1/t.whl", "credentials in it"),
    ],
)
def test_a_wheel_url_that_cannot_be_asked_is_one_line(wheel: bytes, url: str, said: str) -> None:
    with serve(index_listing(lambda: url, len(wheel))) as index, pytest.raises(IndexFailure, match=said) as failed:
        IndexClient(index.url + "/pypi", backoff_s=0).release("torch", "9.1.0")
    assert "\n" not in str(failed.value)


# --- 9. what the mirror says reaches messages without control characters ------------------------


def test_control_characters_from_the_index_are_escaped_in_messages() -> None:
    def respond(h: Handler) -> None:
        if h.path == "/pypi/denied/json":
            return h.send(403, b"", reason="Forbidden\x1b[2J\x1b]0;pwned\x07")
        if h.path == "/pypi/page/json":
            return h.send(200, b"<html>\x1b[31m", {"Content-Type": "text/html\x1b[5m"})
        doc = {"info": {"requires_python": ">=3.10\x1b[2J", "version": "1\x9b31m"}, "releases": {"2.0\x1b[8m": []}}
        return h.send(200, json.dumps(doc).encode(), {"Content-Type": "application/json"})

    with serve(respond) as index:
        client = IndexClient(index.url + "/pypi", backoff_s=0)
        messages = []
        for project in ("denied", "page"):
            with pytest.raises(IndexFailure) as failed:
                client(project)
            messages.append(str(failed.value))
        doc = client("torch")
    assert all("\x1b" not in m and "\x07" not in m for m in messages), messages
    assert "Forbidden\\x1b[2J\\x1b]0;pwned\\x07" in messages[0] and "text/html\\x1b[5m" in messages[1]
    assert doc["info"] == {"requires_python": ">=3.10\\x1b[2J", "version": "1\\x9b31m"} and list(doc["releases"]) == ["2.0\\x1b[8m"]


def test_json_nested_past_the_parser_is_one_line() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    with (
        serve(lambda h: h.send(200, deep, {"Content-Type": "application/json"})) as index,
        pytest.raises(IndexFailure, match="too deeply") as failed,
    ):
        IndexClient(index.url + "/pypi", backoff_s=0)("torch")
    assert "\n" not in str(failed.value)


# --- 8. malformed index URLs --------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1",
        "http://[::1/pypi",
        "https://host:99999/pypi",
        "https://u:p/w@host/pypi",
        "http://h\x1b[2J/pypi",
        "https://a..b/pypi",
        f"https://{'a' * 64}.example/pypi",
    ],
)
def test_a_malformed_index_url_is_one_line(url: str) -> None:
    with pytest.raises(UserError) as bad:
        IndexClient(url)
    text = str(bad.value)
    assert "package index URL" in text and "\n" not in text and "\x1b" not in text and "p/w" not in text


def test_the_cli_refuses_a_malformed_index_url_with_exit_2(cli: RunCli, write_matrix: WriteMatrix, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_updates import MATRIX

    path = write_matrix(MATRIX)
    by_option = cli("--matrix", str(path), "updates", "--index-json-url", "http://[::1")
    monkeypatch.setenv("BUILDER_INDEX_JSON_URL", "http://[::1")
    by_env = cli("--matrix", str(path), "updates")
    for result in (by_option, by_env):
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: the package index URL"), result.output


def test_socket_level_shutdown_only_touches_its_own_connection() -> None:
    """The deadline's timer shuts a connection down by fd; a closed fd that was reused is left alone."""
    a, b = socket.socketpair()
    fd, inode = a.fileno(), os.fstat(a.fileno()).st_ino
    transport._shut(fd, inode + 1)  # not the same socket any more: untouched
    a.sendall(b"x")
    assert b.recv(1) == b"x"
    transport._shut(fd, inode)
    assert b.recv(1) == b""  # shut down: the peer sees the end
    a.close()
    b.close()


def test_a_stalled_tls_handshake_fails_at_the_deadline() -> None:
    """Not a byte after the ClientHello: the handshake blocks in a read the per-read timeout would let run."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True).start()
    started = time.monotonic()
    try:
        with pytest.raises(IndexFailure, match=r"^no complete answer for https://127\.0\.0\.1:\d+/pypi/torch/json .* within 1 s"):
            IndexClient(f"https://127.0.0.1:{listener.getsockname()[1]}/pypi", timeout_s=30, backoff_s=0, deadline_s=1)("torch")
        assert time.monotonic() - started < 3
    finally:
        listener.close()
        for sock in accepted:
            sock.close()


def test_a_remote_index_may_not_name_files_on_this_machine() -> None:
    client = IndexClient("https://mirror.example/pypi")
    with pytest.raises(ValueError, match="only an index on 127.0.0.1 may list local files"):
        client._range("file:///etc/passwd", 0, 10, transport.Deadline(5), {})
