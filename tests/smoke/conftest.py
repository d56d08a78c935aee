"""Fixtures for the in-container smoke tests, run by `builder test` (one pytest run per image).

`builder test` starts a locked-down container of the image and passes it here through
environment variables; testinfra's docker:// backend runs commands inside it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import testinfra

CONTAINER_ENV = "BUILDER_SMOKE_CONTAINER"


def _need(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.skip(f"{name} is not set: these tests run inside `builder test`, which starts the container")
    return value


@pytest.fixture(scope="session")
def host() -> Any:
    return testinfra.get_host(f"docker://{_need(CONTAINER_ENV)}")


@pytest.fixture(scope="session")
def spec() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(_need("BUILDER_SMOKE_IMAGE_JSON")).read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="session")
def gpu_attached() -> bool:
    return os.environ.get("BUILDER_SMOKE_GPU") == "1"


@pytest.fixture(scope="session")
def probe(host: Any) -> dict[str, Any]:
    """hello-gpu's JSON from inside the container, saved for the results file."""
    timeout = int(os.environ.get("BUILDER_SMOKE_TIMEOUT", "300"))
    per_framework = max(30, timeout // 2)
    run = host.run(f"timeout -s KILL {timeout} hello-gpu --json --timeout {per_framework}")
    if run.rc in (124, 137):
        pytest.fail(f"hello-gpu timed out after {timeout} s inside the container")
    try:
        data: dict[str, Any] = json.loads(run.stdout)
    except ValueError:
        pytest.fail(f"hello-gpu printed no JSON (exit {run.rc}): {run.stderr.strip()[-500:]}")
    out = os.environ.get("BUILDER_SMOKE_PROBE_OUT")
    if out:
        Path(out).write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
    return data
