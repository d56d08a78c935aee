"""Fixtures for tests that need a real Docker engine (marked `docker`).

Without an engine these tests skip with the fix in the reason; CI sets BUILDER_REQUIRE_DOCKER=1 so
a missing engine fails the run instead of passing it vacuously.
"""

from __future__ import annotations

import contextlib
import http.server
import io
import os
import re
import shutil
import socket
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from docker import DockerClient

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # so `pytest tests/integration` works without an install
    sys.path.insert(0, str(ROOT))

from builder.engine import client as engine  # noqa: E402
from builder.engine.ownership import ledger_of, steps_in  # noqa: E402
from builder.util.errors import UserError  # noqa: E402

NO_ENGINE = "no Docker engine: start one with bash .ci/docker-up.sh (the second lane's: BUILDER_SECOND_ENGINE=1 bash .ci/docker-up.sh)"
SCRATCH_IMAGE = "builder-test/scratch:latest"


HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "docker: needs a running Docker engine (bash .ci/docker-up.sh)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test in this folder is in the integration tier (`-m docker`), also the few that need a
    package index or uv but no engine (test_locking.py): `-m "not docker"` is the offline tier, and a
    75-second `builder lock --upgrade` against PyPI does not belong in it. (Under xdist they all run
    on one worker, in order: tests/conftest.py's scheduler.) test_bootstrap.py goes first: the base
    its real debootstrap makes is the engine's local-debian12 base from then on, if it has none.
    LAST goes last in its lane."""
    for item in items:
        if HERE in item.path.resolve().parents and item.get_closest_marker("docker") is None:
            item.add_marker(pytest.mark.docker)
    items.sort(key=_order)  # stable: the rest keep their order


# test_secrets.py searches every image its engine keeps (and `docker save`s the new ones): in lane 1
# (balancing the lanes: the second ran ~70 s longer, one core idle meanwhile), after that lane's
# other modules and after the modules of any worker that use its engine too (test_reproducible.py,
# test_probe_hermetic.py: both done in the run's first minutes), so no build of another module is
# under way on the engine while it searches.
LAST = (HERE / "test_secrets.py",)


def _order(item: pytest.Item) -> int:
    path = item.path.resolve()
    return 0 if path == HERE / "test_bootstrap.py" else 2 if path in LAST else 1


@pytest.fixture(scope="session")
def docker_client() -> Iterator[DockerClient]:
    try:
        client = engine.connect()
    except UserError as exc:
        if os.environ.get("BUILDER_REQUIRE_DOCKER") == "1":
            pytest.fail(f"{NO_ENGINE} ({exc})")
        pytest.skip(NO_ENGINE)
    if os.environ.get("BUILDER_TEST_LANE") == "2":  # tests/conftest.py pointed this worker at the second engine
        default = docker.DockerClient(base_url=os.environ["BUILDER_TEST_ENGINE1"])
        try:
            # (not the engine ID: two dockerds of one host share /etc/docker/key.json, and so the ID)
            same = client.info()["DockerRootDir"] == default.info()["DockerRootDir"]
            assert not same, f"the second lane's engine ({os.environ['DOCKER_HOST']}) is the default one"
        finally:
            default.close()
    yield client
    client.close()


@pytest.fixture(scope="session")
def scratch_image(docker_client: DockerClient) -> Iterator[str]:
    """A one-file image: enough to create (not run) containers without pulling anything."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = b"scratch image for builder tests\n"
        info = tarfile.TarInfo("README")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    repository, tag = SCRATCH_IMAGE.rsplit(":", 1)
    docker_client.api.import_image(src=buf.getvalue(), repository=repository, tag=tag, changes=['CMD ["/none"]'])
    yield SCRATCH_IMAGE
    with contextlib.suppress(Exception):  # still in use by a leaked container: the tests say so
        docker_client.api.remove_image(SCRATCH_IMAGE)


PYPI = Path("/opt/pypi")  # this machine kind's local wheel index (../shared/ENVIRONMENT.md)


class LocalIndexHandler(http.server.BaseHTTPRequestHandler):
    """A PEP 503 index on 127.0.0.1 over /opt/pypi, with faults to plant: projects it hides, and
    projects whose files it serves with other bytes than their hashes say (a tampered mirror)."""

    hide: frozenset[str] = frozenset()
    corrupt: frozenset[str] = frozenset()

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        if path.startswith("/simple/"):
            project = path.removeprefix("/simple/").strip("/")
            page = PYPI / "simple" / project / "index.html"
            if project in self.hide or not page.is_file():
                return self._answer(404, b"")
            html = page.read_text(encoding="utf-8").replace('href="../../files/', 'href="/files/')
            return self._answer(200, html.encode(), "text/html")
        wheel = PYPI / "files" / Path(path).name
        if path.startswith("/files/") and wheel.is_file():
            data = wheel.read_bytes()
            if re.sub(r"-.*", "", wheel.name).lower() in self.corrupt:
                data = data[:-1] + bytes([data[-1] ^ 0xFF])  # one byte off: same size, other hash
            return self._answer(200, data, "application/octet-stream")
        return self._answer(404, b"")

    def do_HEAD(self) -> None:  # noqa: N802 - resolvers ask before they fetch
        self.head_only = True
        self.do_GET()

    def _answer(self, code: int, body: bytes, kind: str = "text/plain") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not getattr(self, "head_only", False):
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        return


@contextlib.contextmanager
def local_index(hide: tuple[str, ...] = (), corrupt: tuple[str, ...] = ()) -> Iterator[str]:
    """Serve the local index with these faults; yields its URL."""
    if not (PYPI / "simple").is_dir():
        pytest.fail(f"{PYPI} (the local wheel index) is missing; see ../shared/ENVIRONMENT.md")
    handler = type("Handler", (LocalIndexHandler,), {"hide": frozenset(hide), "corrupt": frozenset(corrupt)})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def remove_failed_steps(repo: Path, client: DockerClient) -> frozenset[str]:
    """After builds a test failed on purpose in its checkout: the step images they committed (its
    ledger, build/steps.txt) removed from the engine, each an untagged leaf with the untagged parents
    only it used (the engine keeps a parent another image uses). Without it they stayed for good:
    pytest keeps a run's temporary checkouts, so the `clean --orphans` at the end of .ci/run counts
    them as a live workspace's. (`builder clean` would leave them too while another lane builds on
    this engine: it keeps unfinished images while any run is active.) Returns the steps the ledger listed."""
    steps = steps_in(ledger_of(repo / "build"))
    for step in sorted(steps):
        with contextlib.suppress(docker.errors.NotFound):
            if not client.api.inspect_image(step).get("RepoTags"):  # by id, a tagged image would go too
                engine.remove_image_quietly(client, step)
    return steps


def copy_repository(folder: Path) -> Path:
    """A copy of the embedded matrix and its images/ (locks included) in `folder`: a module's builds,
    results and build/results/build.json are then its own, whichever engine and lane it runs in."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "matrix.yaml", folder / "matrix.yaml")
    shutil.copytree(ROOT / "images", folder / "images")
    return folder


@pytest.fixture(scope="session")
def repository_copy() -> Any:
    """`repository_copy(folder)`: copy_repository, for modules that need a copy per test or per module."""
    return copy_repository


@pytest.fixture(scope="session")
def built_for_the_lane(docker_client: DockerClient) -> Iterator[Any]:
    """`built_for_the_lane(tag)` before a module builds an image that later modules of its lane build
    too (the numba CPU image: test_arm64.py's amd64 twin, test_team_env.py's base): when the engine
    has no such tag yet, this session made it and removes it when the session ends, so the later
    modules find it up to date and nothing is left behind."""
    made: list[str] = []

    def note(tag: str) -> None:
        if tag not in made and engine.image_id(docker_client, tag) is None:
            made.append(tag)

    yield note
    for tag in made:
        engine.remove_image_quietly(docker_client, tag)


@pytest.fixture
def serve_index() -> Any:
    """`with serve_index(hide=(...), corrupt=(...)) as url:` a faulty local index (see local_index)."""
    return local_index
