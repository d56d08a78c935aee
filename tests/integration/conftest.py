"""Fixtures for tests that need a real Docker engine (marked `docker`).

Without an engine these tests skip with the fix in the reason; CI sets BUILDER_REQUIRE_DOCKER=1 so
a missing engine fails the run instead of passing it vacuously.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # so `pytest tests/integration` works without an install
    sys.path.insert(0, str(ROOT))

from builder.engine import client as engine  # noqa: E402
from builder.errors import UserError  # noqa: E402

NO_ENGINE = "no Docker engine: start one with bash .ci/docker-up.sh"
SCRATCH_IMAGE = "builder-test/scratch:latest"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "docker: needs a running Docker engine (bash .ci/docker-up.sh)")


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    try:
        client = engine.connect()
    except UserError as exc:
        if os.environ.get("BUILDER_REQUIRE_DOCKER") == "1":
            pytest.fail(f"{NO_ENGINE} ({exc})")
        pytest.skip(NO_ENGINE)
    yield client
    client.close()


@pytest.fixture(scope="session")
def scratch_image(docker_client: Any) -> Iterator[str]:
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
