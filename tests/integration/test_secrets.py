"""No credential at rest: builds with credentials planted in a proxy URL, --index-url and
--extra-index-url (a build that succeeds, one that fails, one killed by SIGTERM), then every
image the engine keeps (tagged, untagged, intermediate, dangling: history, inspect, `docker
save` bytes) and every file under build/ is searched for them: 0 hits.

The index is real: a PEP 503 server on 127.0.0.1 that serves this machine's local wheels only
to the planted credentials and doubles as the authenticated proxy, so a successful build proves
the credentials reached pip.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from docker import DockerClient

from builder.engine import client as engine
from builder.engine import native_uv
from builder.engine.settings import BuildSettings, host_ca_bundle
from tests.integration.conftest import remove_failed_steps

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
PYPI = Path("/opt/pypi")
PROXY_SECRET, INDEX_SECRET, EXTRA_SECRET = "pr0xy-s3cret-5e1d", "ind3x-s3cret-77aa", "3xtra-s3cret-0c2f"
SECRETS = (PROXY_SECRET, INDEX_SECRET, EXTRA_SECRET)
MATRIX = """\
registry: builder-test/secrets
bases:
  local-debian12: {vendor: cpu, os: debian12, bootstrap: debootstrap}
python: ["3.11"]
frameworks:
  numba: ["0.68.0"]
stacks:
  numba: [numba]
"""
IMAGE = "numba0.68.0-cpu-py3.11-debian12"
TAG = f"builder-test/secrets:{IMAGE}"
TAG_UV = "builder-test/secrets:installed-with-uv"


def _basic(user: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()


class Index(http.server.BaseHTTPRequestHandler):
    """/simple/ needs the index credentials, /extra/ the extra ones; as a proxy it needs the proxy's."""

    seen: list[dict[str, str]] = []
    broken_wheels = False
    uv_wheel: Path | None = None  # this engine's static uv wheel (engine/native_uv.py), fetched from PyPI once

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        headers = {k.lower(): v for k, v in self.headers.items()}
        Index.seen.append({"path": self.path, **headers})
        proxied = self.path.startswith("http://")
        if proxied and headers.get("proxy-authorization") != _basic("proxy-user", PROXY_SECRET):
            return self._answer(407, b"")
        path = urlsplit(self.path).path
        if path.startswith("/extra/"):
            return self._answer(404 if headers.get("authorization") == _basic("extra-user", EXTRA_SECRET) else 401, b"")
        if headers.get("authorization") != _basic("ci-user", INDEX_SECRET):
            return self._answer(401, b"")
        if path.rstrip("/") == "/simple/uv" and Index.uv_wheel is not None:  # the mirror serves the static uv too
            name = Index.uv_wheel.name
            return self._answer(
                200, f'<a href="/files/{name}#sha256={native_uv.WHEELS[platform.machine()].sha256}">{name}</a>'.encode(), "text/html"
            )
        if path.startswith("/simple/"):
            page = PYPI / "simple" / path.removeprefix("/simple/").strip("/") / "index.html"
            if not page.is_file():
                return self._answer(404, b"")
            html = page.read_text(encoding="utf-8").replace('href="../../files/', 'href="/files/')
            return self._answer(200, html.encode(), "text/html")
        if path.startswith("/files/") and not Index.broken_wheels:
            wheel = PYPI / "files" / Path(path).name
            if Index.uv_wheel is not None and Path(path).name == Index.uv_wheel.name:
                wheel = Index.uv_wheel
            if wheel.is_file():
                return self._answer(200, wheel.read_bytes(), "application/octet-stream")
        return self._answer(404, b"")

    def _answer(self, code: int, body: bytes, kind: str = "text/plain") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        if code == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="test"')
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        return


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    if not (PYPI / "simple" / "numba" / "index.html").is_file():
        pytest.fail("/opt/pypi (this machine kind's local wheel index) is missing; see ../shared/ENVIRONMENT.md")
    host = BuildSettings(ca_bundle=host_ca_bundle(os.environ))  # PyPI as this machine reaches it
    Index.uv_wheel = native_uv.wheel_file(host, tmp_path_factory.mktemp("uv-wheel"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("secrets-repo")
    (folder / "matrix.yaml").write_text(MATRIX, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "builder", "render"], cwd=folder, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return folder


@pytest.fixture(scope="module")
def started() -> float:
    return time.time()


def build_argv(port: int, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "builder", "build", "--force", "--no-host-settings",
        "--index-url", f"http://ci-user:{INDEX_SECRET}@127.0.0.1:{port}/simple/",
        # another netloc for the extra index: pip keys credentials by netloc
        "--extra-index-url", f"http://extra-user:{EXTRA_SECRET}@localhost:{port}/extra/",
        *extra,
    ]  # fmt: skip


def build_env(port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY")}
    return {**env, "HTTP_PROXY": f"http://proxy-user:{PROXY_SECRET}@127.0.0.1:{port}", "PYTHONPATH": str(ROOT)}


def _render(repo: Path, locked: bool) -> None:
    """The image locked (its lock from this repository: the same inputs) or not: a locked image
    installs with the served uv and its uv.toml, an unlocked one with pip and its pip.conf."""
    lock = repo / "images" / IMAGE / "requirements.lock"
    if locked:
        lock.write_bytes((ROOT / "images" / IMAGE / "requirements.lock").read_bytes())
    else:
        lock.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-m", "builder", "render"], cwd=repo, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert ("ARG BUILDER_UV_URL=" in (repo / "images" / IMAGE / "Dockerfile").read_text()) is locked


@pytest.fixture(scope="module")
def builds(repo: Path, index: int, started: float, docker_client: DockerClient) -> dict[str, Any]:
    """The planted-credential builds: success with uv (locked) and with pip (unlocked), failure
    (the index serves no wheels), SIGTERM."""
    Index.seen.clear()
    out: dict[str, Any] = {}
    _render(repo, locked=True)
    out["success-uv"] = subprocess.run(
        build_argv(index), cwd=repo, env=build_env(index), capture_output=True, text=True, timeout=1800, check=False
    )
    out["seen-uv"] = list(Index.seen)
    out["history-uv"] = json.dumps(docker_client.api.history(TAG))
    docker_client.api.tag(TAG, TAG_UV.split(":")[0], TAG_UV.split(":")[1])  # kept: the pip build below replaces TAG
    Index.seen.clear()
    _render(repo, locked=False)
    out["success"] = subprocess.run(
        build_argv(index), cwd=repo, env=build_env(index), capture_output=True, text=True, timeout=1800, check=False
    )
    out["history"] = json.dumps(docker_client.api.history(TAG))  # one stage: the install step is the image's own
    Index.broken_wheels = True
    out["failure"] = subprocess.run(
        build_argv(index), cwd=repo, env=build_env(index), capture_output=True, text=True, timeout=1800, check=False
    )
    Index.broken_wheels = False
    log = repo / "build" / "logs" / f"{IMAGE}.log"
    log.unlink(missing_ok=True)
    proc = subprocess.Popen(
        build_argv(index, "--no-cache"), cwd=repo, env=build_env(index), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not (log.exists() and "Collecting numba" in log.read_text(errors="replace")):
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=300)
    out["sigterm"] = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return out


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_the_credentials_reached_the_build(builds: dict[str, Any], installer: str) -> None:
    """Otherwise the scans below would prove nothing: both installers met every planted credential."""
    done = builds["success-uv" if installer == "uv" else "success"]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    headers = builds["seen-uv"] if installer == "uv" else Index.seen
    assert any(h.get("proxy-authorization") == _basic("proxy-user", PROXY_SECRET) for h in headers)
    assert any(h.get("authorization") == _basic("ci-user", INDEX_SECRET) and "/files/" in h["path"] for h in headers)
    assert any(h.get("authorization") == _basic("extra-user", EXTRA_SECRET) for h in headers)
    history = builds["history-uv" if installer == "uv" else "history"]
    assert ("BUILDER_UV_URL=http" in history) is (installer == "uv"), "the locked build is the one served uv"


def test_the_failed_and_the_killed_builds_failed_as_such(builds: dict[str, Any], docker_client: DockerClient) -> None:
    assert builds["failure"].returncode == 1, builds["failure"].stderr[-2000:]
    assert builds["sigterm"].returncode == 128 + signal.SIGTERM, builds["sigterm"].stderr[-2000:]
    assert "interrupted by SIGTERM" in builds["sigterm"].stderr
    assert engine.owned_containers(docker_client) == []


def test_no_staged_context_survives_any_exit(builds: dict[str, Any], repo: Path) -> None:
    contexts = repo / "build" / "contexts"
    assert not contexts.exists() or not any(contexts.iterdir()), sorted(contexts.rglob("*"))


def test_build_json_is_written_even_after_sigterm(builds: dict[str, Any], repo: Path) -> None:
    results = json.loads((repo / "build" / "results" / "build.json").read_text(encoding="utf-8"))
    assert [r["status"] for r in results] == ["interrupted"]


def _all_images(client: DockerClient) -> list[dict[str, Any]]:
    return list(client.api.images(all=True))


def test_no_credential_in_any_image_history_or_config(builds: dict[str, Any], docker_client: DockerClient) -> None:
    hits = []
    for image in _all_images(docker_client):
        text = json.dumps(docker_client.api.history(image["Id"])) + json.dumps(docker_client.api.inspect_image(image["Id"]))
        hits += [(image["Id"][:19], s) for s in SECRETS if s in text]
    assert hits == []


def _hits(stream: Any, where: str) -> list[tuple[str, str]]:
    """Secrets found in a file-like, read in chunks (with an overlap, so none is split unseen)."""
    found, tail = set(), b""
    while chunk := stream.read(1 << 20):
        window = tail + chunk
        found |= {s for s in SECRETS if s.encode() in window}
        tail = window[-64:]
    return [(where, s) for s in sorted(found)]


def test_no_credential_in_any_layer_of_the_images_these_builds_made(
    builds: dict[str, Any], docker_client: DockerClient, started: float, tmp_path: Path
) -> None:
    new = [image["Id"] for image in _all_images(docker_client) if image.get("Created", 0) >= int(started) - 1]
    assert new, "the builds left no image to scan"
    archive = tmp_path / "images.tar"
    subprocess.run(["docker", "save", "-o", str(archive), *new], check=True)  # shared layers once
    hits: list[tuple[str, str]] = []
    settings = []  # the host's build settings as files: one stage, so a COPY of them would be in the image
    layers = 0
    with tarfile.open(archive) as outer:
        for member in outer.getmembers():
            blob = outer.extractfile(member) if member.isfile() else None
            if blob is None:
                continue
            if not member.name.endswith("layer.tar"):
                hits += _hits(blob, member.name)
                continue
            layers += 1
            with tarfile.open(fileobj=blob, mode="r|") as layer:
                for entry in layer:
                    if entry.name.rsplit("/", 1)[-1] in {"pip.conf", "ca.pem", "local.txt", "uv.toml", "uv", ".lock"} and (
                        "builder" in entry.name or "venv" in entry.name
                    ):
                        settings.append(f"{member.name}:{entry.name}")
                    inner = layer.extractfile(entry) if entry.isfile() else None
                    if inner is not None:
                        hits += _hits(inner, f"{member.name}:{entry.name}")
    assert layers > 0
    assert hits == []
    assert settings == []


def test_no_credential_anywhere_under_build(builds: dict[str, Any], repo: Path) -> None:
    hits = [
        (str(p.relative_to(repo)), s) for p in (repo / "build").rglob("*") if p.is_file() for s in SECRETS if s.encode() in p.read_bytes()
    ]
    assert hits == []


def test_the_served_pip_conf_is_dead_after_the_build(builds: dict[str, Any], docker_client: DockerClient) -> None:
    """The successful build's image history keeps the one-time URLs; none may answer any more."""
    history, history_uv = builds["history"], builds["history-uv"]
    urls = re.findall(r"BUILDER_PIP_CONF_URL=(http://127\.0\.0\.1:\d+/[A-Za-z0-9_-]+)", history)
    assert urls, "the build did not fetch its pip.conf from the secret server"
    served_uv = sorted(set(re.findall(r"BUILDER_UV_(?:CONF_)?URL=(http://127\.0\.0\.1:\d+/[A-Za-z0-9_/-]+)", history_uv)))
    assert len(served_uv) == 2, "the locked build did not fetch uv and its uv.toml from the secret server"
    urls += served_uv
    urls += re.findall(r"BUILDER_(?:CA|LOCAL)_URL=(http://127\.0\.0\.1:\d+/[A-Za-z0-9_-]+)", history + history_uv)
    for url in urls:
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=5)


def test_cleanup(docker_client: DockerClient, repo: Path) -> None:
    """Remove what this module built (the tag; the step images of its failed and SIGTERMed builds;
    build-stage images older versions left of it)."""
    remove_failed_steps(repo, docker_client)
    for image in docker_client.api.images(all=True, filters={"label": f"io.builder.stage-of={TAG}"}):
        engine.remove_image_quietly(docker_client, image["Id"])
    engine.remove_image_quietly(docker_client, TAG)
    engine.remove_image_quietly(docker_client, TAG_UV)
    assert engine.image_id(docker_client, TAG) is None and engine.image_id(docker_client, TAG_UV) is None
