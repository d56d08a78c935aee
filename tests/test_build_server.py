"""The server `builder build` hands secrets and local wheels to a build through (engine/secrets.py):
a real HTTP server on 127.0.0.1, read with urllib as pip and the build step read it."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from builder.engine.secrets import serving

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str) -> bytes:
    with OPENER.open(url, timeout=10) as answer:
        return bytes(answer.read())


def _status(url: str) -> int:
    try:
        _get(url)
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


def test_a_secret_is_answered_as_often_as_published_then_gone() -> None:
    with serving() as server:
        url = server.publish(b"[global]\nindex-url = https://u:p@mirror/simple\n", uses=2)
        assert url.startswith("http://127.0.0.1:")
        assert _get(url) == _get(url) == b"[global]\nindex-url = https://u:p@mirror/simple\n"
        assert _status(url) == 404
        revoked = server.publish(b"x")
        server.revoke(revoked)
        assert _status(revoked) == 404


def test_local_wheels_are_a_find_links_page_and_its_files_until_revoked(tmp_path: Path) -> None:
    wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"PK\x03\x04" + bytes(range(256)) * 4096)  # 1 MiB: streamed, not one write
    other = tmp_path / "numba-0.68.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    other.write_bytes(b"PK\x03\x04 numba")
    secret = tmp_path / "not-published.whl"
    secret.write_bytes(b"PK private")
    with serving() as server:
        url = server.publish_files({wheel.name: wheel, other.name: other})
        assert url.endswith("/")
        page = _get(url).decode()
        assert '<a href="torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl">' in page
        assert f'<a href="{other.name}">' in page and "not-published" not in page
        assert _get(url + "torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl") == wheel.read_bytes()
        assert _get(url + other.name) == other.read_bytes()
        assert _get(url + other.name) == other.read_bytes(), "a file is answered again (a retried build)"
        assert _status(url + secret.name) == 404, "only the published files"
        assert _status(url + "../" + secret.name) == 404
        assert _status(url.rstrip("/") + "x/") == 404, "another token is nothing"
        server.revoke(url)
        assert _status(url) == 404 and _status(url + other.name) == 404


def test_the_server_is_gone_after_the_run(tmp_path: Path) -> None:
    with serving() as server:
        url = server.publish_files({})
    with pytest.raises(urllib.error.URLError):
        _get(url)
