"""A release's metadata read from its wheel by byte ranges, when the index serves no per-release
JSON document (this machine's PyPI proxy is such an index): a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import struct
import threading
import tracemalloc
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from builder.updates import wheelmeta
from builder.updates.index import IndexClient, IndexFailure

METADATA = 'Metadata-Version: 2.1\nName: torch\nVersion: 9.1.0\nRequires-Python: >=3.10\nRequires-Dist: nvidia-cuda-runtime==13.0.96; platform_system == "Linux"\nRequires-Dist: filelock\n\n'


def big_wheel(path: Path, members: int = 3000) -> Path:
    """A wheel whose central directory spans several range blocks, METADATA near its end."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for i in range(members):
            wheel.writestr(f"torch/part_{i:05d}_{'x' * 60}.py", f"# {i}\n" * 50)
        wheel.writestr("torch-9.1.0.dist-info/METADATA", METADATA)
        wheel.writestr("torch-9.1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    return path


class Handler(http.server.BaseHTTPRequestHandler):
    wheel: Path = Path("/nonexistent")
    ranges = True
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.seen.append(f"{self.path} {self.headers.get('Range', '')}")
        if self.path == "/pypi/torch/json":
            doc = {"info": {"version": "9.1.0"}, "releases": {"9.1.0": [
                {"filename": "torch-9.1.0-cp311-cp311-win_amd64.whl", "url": "../../files/other.whl", "size": 10, "yanked": False},
                {"filename": "torch-9.1.0-cp311-cp311-manylinux_2_28_x86_64.whl", "url": "../../files/t.whl", "size": self.wheel.stat().st_size, "yanked": False},
            ]}}  # fmt: skip
            return self._send(200, json.dumps(doc).encode())
        if self.path == "/files/t.whl":
            data = self.wheel.read_bytes()
            spec = self.headers.get("Range", "")
            if self.ranges and spec.startswith("bytes="):
                first, last = (int(v) for v in spec.removeprefix("bytes=").split("-"))
                return self._send(206, data[first : last + 1])
            return self._send(200, data)
        return self._send(404, b"")

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        # a reader that stops at its cap hangs up mid-body: what the cap is for, not a server fault
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        return


@contextlib.contextmanager
def serve(wheel: Path, ranges: bool = True) -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("H", (Handler,), {"wheel": wheel, "ranges": ranges, "seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/pypi", seen
    finally:
        server.shutdown()


def test_the_release_document_comes_from_the_linux_wheels_metadata_by_ranges(tmp_path: Path) -> None:
    wheel = big_wheel(tmp_path / "t.whl")
    with serve(wheel) as (url, seen):
        doc = IndexClient(url, backoff_s=0).release("torch", "9.1.0")
    assert doc["info"]["requires_python"] == ">=3.10"
    assert doc["info"]["requires_dist"] == ['nvidia-cuda-runtime==13.0.96; platform_system == "Linux"', "filelock"]
    assert doc["info"]["metadata_from"] == "torch-9.1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    reads = [s for s in seen if s.startswith("/files/t.whl")]
    assert reads and all("bytes=" in s for s in reads)  # never the whole file
    fetched = sum(int(s.split("-")[-1]) - int(s.split("=")[-1].split("-")[0]) + 1 for s in reads)
    assert fetched < wheel.stat().st_size, (fetched, wheel.stat().st_size)
    assert not any("other.whl" in s for s in seen)  # the Windows wheel is not the one read


def test_a_server_that_ignores_ranges_is_one_line_not_a_download(tmp_path: Path) -> None:
    with serve(big_wheel(tmp_path / "t.whl"), ranges=False) as (url, _), pytest.raises(IndexFailure) as caught:
        IndexClient(url, backoff_s=0).release("torch", "9.1.0")
    assert "without byte ranges" in str(caught.value) and "\n" not in str(caught.value)


def test_a_file_that_is_not_a_wheel_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "t.whl"
    junk.write_bytes(b"<html>login</html>" * 100)
    with serve(junk) as (url, _), pytest.raises(IndexFailure) as caught:
        IndexClient(url, backoff_s=0).release("torch", "9.1.0")
    assert "not a zip file" in str(caught.value)


def test_linux_wheel_prefers_cpython_311_and_skips_yanked() -> None:
    files = [
        {"filename": "a-1-cp312-cp312-manylinux_2_28_x86_64.whl", "url": "u1", "size": 1},
        {"filename": "a-1-cp311-cp311-manylinux_2_28_x86_64.whl", "url": "u2", "size": 1, "yanked": True},
        {"filename": "a-1-cp311-cp311-manylinux_2_28_aarch64.whl", "url": "u3", "size": 1},
        {"filename": "a-1-cp311-cp311-manylinux_2_17_x86_64.whl", "url": "u4", "size": 1},
        {"filename": "a-1.tar.gz", "url": "u5", "size": 1},
    ]
    chosen = wheelmeta.linux_wheel(files)
    assert chosen is not None and chosen["url"] == "u4"
    assert wheelmeta.linux_wheel(files[4:]) is None


def test_metadata_reads_an_in_memory_wheel_through_the_range_reader(tmp_path: Path) -> None:
    data = big_wheel(tmp_path / "t.whl", members=10).read_bytes()
    calls: list[tuple[int, int]] = []

    def fetch(url: str, first: int, last: int) -> bytes:
        calls.append((first, last))
        return data[first : last + 1]

    assert wheelmeta.metadata("mem://t.whl", len(data), fetch) == (
        ">=3.10",
        ('nvidia-cuda-runtime==13.0.96; platform_system == "Linux"', "filelock"),
    ), "METADATA read through the ranges, as the served wheel's test reads it"
    assert calls and all(0 <= a <= b < len(data) for a, b in calls)


def _bomb(method: int, inflated: int = 64 * 2**20, declared: int | None = 100) -> bytes:
    """A wheel whose METADATA is `inflated` zero bytes compressed with `method` (a few hundred bytes
    to a few KB), its uncompressed size patched to `declared` in both headers: a zip that lies."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as wheel, wheel.open("x-1.dist-info/METADATA", "w") as member:
        for _ in range(inflated // 2**20):
            member.write(b"\0" * 2**20)
    data = bytearray(buf.getvalue())
    if declared is not None:
        local, central = data.find(b"PK\x03\x04"), data.find(b"PK\x01\x02")
        struct.pack_into("<L", data, local + 22, declared)
        struct.pack_into("<L", data, central + 24, declared)
    return bytes(data)


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA], ids=["deflate", "bzip2", "lzma"])
def test_a_metadata_zip_bomb_is_refused_without_inflating_it(method: int) -> None:
    data = _bomb(method)
    assert len(data) < 100_000  # 64 MiB of METADATA in a small wheel
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"inflates to more than 4 MiB") as bomb:
            wheelmeta.metadata("mem://bomb.whl", len(data), lambda url, first, last: data[first : last + 1])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20, peak  # the output bound (4 MiB, and the decompressor's buffers), not the 64 MiB it inflates to
    assert "\n" not in str(bomb.value) and "x-1.dist-info/METADATA" in str(bomb.value)


def test_a_metadata_member_declaring_a_huge_size_is_refused_before_reading() -> None:
    data = _bomb(zipfile.ZIP_DEFLATED, inflated=8 * 2**20, declared=None)
    with pytest.raises(ValueError, match=r"declares 8,388,608 bytes uncompressed, more than the 4 MiB"):
        wheelmeta.metadata("mem://big.whl", len(data), lambda url, first, last: data[first : last + 1])


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_metadata_reads_every_compression_a_zip_can_have(method: int) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as wheel:
        wheel.writestr("torch-9.1.0.dist-info/METADATA", METADATA)
    data = buf.getvalue()
    assert wheelmeta.metadata("mem://t.whl", len(data), lambda url, first, last: data[first : last + 1]) == (
        ">=3.10",
        ('nvidia-cuda-runtime==13.0.96; platform_system == "Linux"', "filelock"),
    )


def test_a_corrupt_metadata_member_is_refused() -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as wheel:
        wheel.writestr("torch-9.1.0.dist-info/METADATA", METADATA)
    data = bytearray(buf.getvalue())
    data[data.find(b"Requires-Python")] ^= 0x20  # one flipped bit, same size
    with pytest.raises(ValueError, match="CRC does not match"):
        wheelmeta.metadata("mem://t.whl", len(data), lambda url, first, last: bytes(data[first : last + 1]))
