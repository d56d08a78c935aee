"""One download per run of each wheel the integration tier's builds would fetch from PyPI.

Without it every build downloads its locked wheels itself, inside the build stage, and the CPU and
CUDA-from-wheels slices pin many in common (absl-py, grpcio, cuda-bindings, nvidia-nvjitlink...; 75
downloads, 51 distinct files, measured 2026-12-01), and the forced rebuilds download them again.
This fills build/wheel-cache/ once with every pinned wheel that no local folder of the host's pip
settings already holds, checked against the lock's sha256 before it is kept; the `wheel_cache`
fixture (conftest.py) then names it first in PIP_FIND_LINKS, so builder/engine/staging.py stages the
pinned files from it like any local wheel, and the build's `pip install --require-hashes` checks
every one again.

    python tests/integration/wheel_cache.py [SELECT ...]   (default: the default selection and the CUDA wheels slice)
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import http.client
import json
import os
import ssl
import sys
import urllib.request
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # so the script runs from a checkout without an install
    sys.path.insert(0, str(ROOT))

from builder.engine import settings, staging  # noqa: E402
from builder.records import ImageSpec  # noqa: E402
from builder.workspace import Workspace  # noqa: E402

CACHE = ROOT / "build" / "wheel-cache"
PYPI = "https://pypi.org/simple/"  # where the embedded images' remaining wheels come from (PEP 691 JSON)
WHEELS_SLICE = "base=cuda1*-debian12"


def slice_specs(selects: list[str]) -> list[ImageSpec]:
    ws = Workspace.locate(str(ROOT / "matrix.yaml"))
    groups = [ws.selected(expr, use_default=False) for expr in selects] or [
        ws.selected(None, use_default=True),
        ws.selected(WHEELS_SLICE, use_default=False),
    ]
    return list({s.id: s for group in groups for s in group}.values())


def missing(specs: list[ImageSpec], folders: tuple[Path, ...]) -> dict[tuple[str, str, str], frozenset[str]]:
    """(project, version, python) -> the sha256s its lock allows, for each pin no local folder holds."""
    out: dict[tuple[str, str, str], frozenset[str]] = {}
    for spec in specs:
        if spec.lock is None:
            continue
        local = staging.local_wheels(spec, folders)
        allowed = dict(spec.lock.hashes)
        for name, version in spec.lock.pins:
            if f"{name}=={version}" not in local and allowed.get(name):
                out[(str(canonicalize_name(name)), version, spec.python)] = frozenset(allowed[name])
    return out


def _open(url: str, context: ssl.SSLContext, accept: str = "*/*") -> http.client.HTTPResponse:
    response = urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": accept}), timeout=120, context=context)
    assert isinstance(response, http.client.HTTPResponse), url
    return response


def fetch(key: tuple[str, str, str], hashes: frozenset[str], context: ssl.SSLContext) -> str | None:
    """Download the one file of this pin whose sha256 the lock allows; None when PyPI has none."""
    project, version, python = key
    with _open(f"{PYPI}{project}/", context, "application/vnd.pypi.simple.v1+json") as response:
        files = json.load(response)["files"]
    chosen = next(
        (
            f
            for f in files
            if f["filename"].endswith(".whl")
            and f.get("hashes", {}).get("sha256") in hashes
            and staging.fits(f["filename"], Version(version), python)
        ),
        None,
    )
    if chosen is None:
        return None
    name, url = str(chosen["filename"]), str(chosen["url"])
    target = CACHE / name
    if target.is_file():
        return name
    part = CACHE / f".part-{os.getpid()}-{name}"
    digest = hashlib.sha256()
    with _open(url, context) as response, part.open("wb") as out:
        while chunk := response.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() not in hashes:
        part.unlink()
        raise AssertionError(f"{url}: sha256 {digest.hexdigest()} is not one the lock allows")
    part.replace(target)
    return name


def fill(specs: list[ImageSpec], jobs: int = 4) -> list[str]:
    """Fill CACHE for these images' builds; returns the names of the files downloaded now."""
    CACHE.mkdir(parents=True, exist_ok=True)
    host = settings.resolve(os.environ)
    wanted = missing(specs, (CACHE, *host.pip.local_dirs))
    context = ssl.create_default_context(cafile=str(host.ca_bundle) if host.ca_bundle else None)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        names = list(pool.map(lambda item: fetch(item[0], item[1], context), wanted.items()))
    return sorted(n for n in names if n)


if __name__ == "__main__":
    got = fill(slice_specs(sys.argv[1:]))
    print(f"{len(got)} wheel(s) downloaded into {CACHE}")
