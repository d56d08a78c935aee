"""`builder nightly` end to end with real parts: an index server on 127.0.0.1 (the PEP 503 pages
over this machine's /opt/pypi wheels, plus the JSON API with fixture release metadata, plus files
planted by the test), the Docker engine, the local registry on 127.0.0.1:5000.

Night 1: the index lists numba 0.68.0, newer than the matrix's 0.60.0 (which an exclude keeps out
of the plan); the rules place it, so nightly adds it to matrix.yaml (comments kept), locks, builds
and smoke-tests jax 0.10.2 and numba 0.68.0, and publishes both. Night 2: a broken numpy 2.4.99 is
planted (a transitive update: jax does not pin numpy, the numba image does); nightly re-locks,
rebuilds only jax, whose smoke tests now fail: a regression, listed first with its diagnosis,
exit 1, and nothing published for it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.server
import io
import json
import os
import subprocess
import sys
import threading
import urllib.request
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker import DockerClient

from builder.engine import client as engine
from tests.integration.conftest import PYPI, LocalIndexHandler

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = "127.0.0.1:5000"
NAME = f"builder-test/nightly-{uuid.uuid4().hex[:8]}"
REPOSITORY = f"{REGISTRY}/{NAME}"
JAX = "jax0.10.2-cpu-py3.11-debian12"
NUMBA = "numba0.68.0-cpu-py3.11-debian12"

MATRIX = f"""\
# The nightly test's matrix: one local base, two frameworks.
registry: {REPOSITORY}
bases:
  local-debian12: {{vendor: cpu, os: debian12, bootstrap: debootstrap}}  # the shared bootstrapped base
python: ["3.11"]
frameworks:
  jax: ["0.10.2"]
  # numba 0.60.0 has no wheel on this index; nightly finds 0.68.0
  numba: ["0.60.0"]
stacks:
  jax: [jax]
  numba: [numba]
exclude:
  - {{numba: "0.60.0"}}
"""


def _wheel_file(project: str, version: str) -> dict[str, Any]:
    return {"filename": f"{project}-{version}-cp311-cp311-manylinux_2_28_x86_64.whl", "yanked": False, "packagetype": "bdist_wheel"}


# The JSON API's view (PyPI's shape): what `builder updates` reads.
RELEASES: dict[str, dict[str, dict[str, Any]]] = {
    "jax": {"0.10.2": {"requires_python": ">=3.11", "requires_dist": ["jaxlib<=0.10.2,>=0.10.2", "ml_dtypes>=0.5.0", "numpy>=2.0"]}},
    "jaxlib": {"0.10.2": {"requires_python": ">=3.11", "requires_dist": ["ml_dtypes>=0.5.0", "numpy>=2.0", "scipy>=1.13"]}},
    "numba": {
        "0.60.0": {"requires_python": ">=3.9", "requires_dist": ["llvmlite<0.44,>=0.43.0dev0", "numpy<2.1,>=1.22"]},
        "0.68.0": {"requires_python": ">=3.10", "requires_dist": ["llvmlite<0.51,>=0.50.0dev0", "numpy<2.6,>=1.22"]},
    },
}


def json_document(project: str, version: str | None) -> dict[str, Any] | None:
    releases = RELEASES.get(project)
    if releases is None or (version is not None and version not in releases):
        return None
    if version is not None:
        meta = releases[version]
        return {"info": {"name": project, "version": version, **meta}, "urls": [_wheel_file(project, version)]}
    newest = sorted(releases, key=lambda v: tuple(int(p) for p in v.split(".")))[-1]
    return {
        "info": {"name": project, "version": newest, **releases[newest]},
        "releases": {v: [_wheel_file(project, v)] for v in releases},
    }


def broken_wheel(folder: Path, project: str, version: str) -> Path:
    """A wheel whose package raises on import: the planted breaking update."""
    name = f"{project}-{version}-py3-none-any.whl"
    dist = f"{project}-{version}.dist-info"
    files = {
        f"{project}/__init__.py": f'raise ImportError("{project} {version} is broken (planted by the nightly test)")\n',
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\nRequires-Python: >=3.9\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: builder-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, text in files.items():
            data = text.encode()
            archive.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
        archive.writestr(f"{dist}/RECORD", "\n".join([*record, f"{dist}/RECORD,,"]) + "\n")
    target = folder / name
    target.write_bytes(buffer.getvalue())
    return target


class NightlyIndexHandler(LocalIndexHandler):
    """LocalIndexHandler's pages and files, plus planted files and the JSON API."""

    planted: Path = Path("/nonexistent")

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        if path.startswith("/pypi/"):
            parts = path.removeprefix("/pypi/").strip("/").split("/")
            doc = json_document(parts[0], parts[1] if len(parts) == 3 else None) if parts[-1] == "json" else None
            return self._answer(200, json.dumps(doc).encode(), "application/json") if doc else self._answer(404, b"")
        name = Path(path).name
        extra = sorted(p for p in self.planted.glob("*.whl") if p.name.split("-", 1)[0].lower() == path.removeprefix("/simple/").strip("/"))
        if path.startswith("/simple/") and extra:
            page = PYPI / "simple" / path.removeprefix("/simple/").strip("/") / "index.html"
            html = (
                page.read_text(encoding="utf-8").replace('href="../../files/', 'href="/files/')
                if page.is_file()
                else "<html><body></body></html>"
            )
            links = "".join(f'<a href="/files/{p.name}#sha256={hashlib.sha256(p.read_bytes()).hexdigest()}">{p.name}</a>\n' for p in extra)
            return self._answer(200, html.replace("</body>", links + "</body>").encode(), "text/html")
        if path.startswith("/files/") and (self.planted / name).is_file():
            return self._answer(200, (self.planted / name).read_bytes(), "application/octet-stream")
        return super().do_GET()


@contextlib.contextmanager
def nightly_index(planted: Path) -> Iterator[str]:
    handler = type("Handler", (NightlyIndexHandler,), {"planted": planted})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def nightly(repo: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable, "-m", "builder", "nightly", "-j", "2", "--registry", REPOSITORY, "--no-host-settings",
        "--index-url", f"{url}/simple/", "--index-json-url", f"{url}/pypi", "--summary", str(repo / "summary.md"), *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("BUILDER_INDEX_JSON_URL", None)
    return subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=2400, check=False)


def registry_digest(reference: str) -> str:
    accept = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
    request = urllib.request.Request(f"http://{REGISTRY}/v2/{NAME}/manifests/{reference}", method="HEAD", headers={"Accept": accept})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30) as response:
        return str(response.headers["Docker-Content-Digest"])


def records(repo: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in json.loads((repo / "catalog" / "known-good.json").read_text())["images"]}


@pytest.fixture(scope="module")
def nights(tmp_path_factory: pytest.TempPathFactory, docker_client: DockerClient) -> Iterator[dict[str, Any]]:
    """Both nights, run once for the module's tests (each assertion below reads what they left)."""
    repo = tmp_path_factory.mktemp("nightly-repo")
    planted = tmp_path_factory.mktemp("planted")
    (repo / "matrix.yaml").write_text(MATRIX, encoding="utf-8")
    seen: dict[str, Any] = {"repo": repo}
    try:
        with nightly_index(planted) as url:
            first = nightly(repo, url)
            seen.update(first=first, summary1=(repo / "summary.md").read_text() if (repo / "summary.md").exists() else "")
            seen["records1"] = records(repo) if (repo / "catalog" / "known-good.json").exists() else {}
            seen["matrix1"] = (repo / "matrix.yaml").read_text()
            seen["ids1"] = {i: engine.image_id(docker_client, f"{REPOSITORY}:{i}") for i in (JAX, NUMBA)}
            seen["registry1"] = {i: registry_digest(i) for i in (JAX, NUMBA)} if first.returncode == 0 else {}
            broken_wheel(planted, "numpy", "2.4.99")
            second = nightly(repo, url)
            seen.update(second=second, summary2=(repo / "summary.md").read_text() if (repo / "summary.md").exists() else "")
            seen["records2"] = records(repo) if (repo / "catalog" / "known-good.json").exists() else {}
            seen["ids2"] = {i: engine.image_id(docker_client, f"{REPOSITORY}:{i}") for i in (JAX, NUMBA)}
            seen["registry2"] = {i: registry_digest(i) for i in (JAX, NUMBA)} if seen["registry1"] else {}
        yield seen
    finally:
        for image in docker_client.api.images(name=REPOSITORY):
            for tag in image.get("RepoTags") or []:
                engine.remove_image_quietly(docker_client, tag)
        for image in docker_client.api.images(name=REPOSITORY):  # replaced ones, kept by their repo digest only
            engine.remove_image_quietly(docker_client, image["Id"])
        for image in docker_client.api.images(all=True, filters={"label": "io.builder.stage-of"}):
            if NAME in str((image.get("Labels") or {}).get("io.builder.stage-of")):
                engine.remove_image_quietly(docker_client, image["Id"])


def test_night_one_plans_the_new_release_builds_tests_and_publishes(nights: dict[str, Any]) -> None:
    first = nights["first"]
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert "Traceback" not in first.stderr
    matrix = nights["matrix1"]
    assert 'numba: ["0.60.0", "0.68.0"]' in matrix, matrix
    assert [line for line in MATRIX.splitlines() if "#" in line] == [line for line in matrix.splitlines() if "#" in line]
    assert "frameworks.numba += 0.68.0" in nights["summary1"], nights["summary1"]
    assert set(nights["records1"]) == {JAX, NUMBA}
    for image_id, record in nights["records1"].items():
        assert record["digest"] == f"{REPOSITORY}@{nights['registry1'][image_id]}"  # what the registry itself served after night 1


def test_night_two_reports_the_regression_first_and_exits_1(nights: dict[str, Any]) -> None:
    second = nights["second"]
    assert second.returncode == 1, second.stdout[-4000:] + second.stderr[-4000:]
    assert "Traceback" not in second.stderr
    summary = nights["summary2"]
    assert summary.startswith("# Nightly "), summary
    assert "1 regression(s)" in summary.splitlines()[0]
    regressions = summary.split("## Regressions (passed before, fail now)", 1)[1].split("## ", 1)[0]
    assert JAX in regressions and NUMBA not in regressions, regressions
    # the cause, through jaxlib's own ImportError ("error while initializing the extension <- ImportError: numpy... failed to import")
    # (Markdown-escaped: `<` is `&lt;` in the file, `<` on the rendered page)
    assert "jax: ImportError" in regressions and "&lt;- ImportError: numpy" in regressions, regressions
    assert summary.index("## Regressions") < summary.index("## New releases") < summary.index("## Images")
    images = summary.split("## Images", 1)[1]
    assert images.index(JAX) < images.index(NUMBA)  # regressions first in the table too
    assert "numpy 2.4.6 -> 2.4.99" in summary.split("## Lock drift", 1)[1], summary


def test_night_two_rebuilds_only_what_changed(nights: dict[str, Any]) -> None:
    assert nights["ids2"][NUMBA] == nights["ids1"][NUMBA]  # its lock did not move: not rebuilt
    assert nights["ids2"][JAX] != nights["ids1"][JAX]  # its lock moved: rebuilt
    numba_row = next(line for line in nights["summary2"].split("## Images", 1)[1].splitlines() if NUMBA in line)
    assert "| passing |" in numba_row and "| no |" in numba_row, numba_row


def test_night_two_publishes_nothing_for_the_regression(nights: dict[str, Any]) -> None:
    assert nights["records2"] == nights["records1"]  # the catalog is unchanged: no record for the broken jax, numba not re-recorded
    assert nights["registry2"] == nights["registry1"]  # and the registry still serves the images that passed
