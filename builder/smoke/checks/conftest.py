"""Fixtures for the in-container smoke tests, run by `builder test` (one pytest run per image).

`builder test` starts a locked-down container of the image and passes it here through
environment variables; testinfra's docker:// backend runs commands inside it. Every command
the tests need starts at once and runs concurrently (each is its own `docker exec`), so a
test run lasts about as long as the probe itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import testinfra

from builder.model import image_entry, probe_report
from builder.model import jsonfields as jf
from builder.model.image_entry import ImageEntry
from builder.model.probe_report import ProbeReport
from builder.smoke.runner import probe_command
from builder.util.errors import UserError
from builder.util.fsio import read_json

CONTAINER_ENV = "BUILDER_SMOKE_CONTAINER"
COMMANDS = {
    "pip_check": "nice -n 19 python -m pip check",  # low priority: the probe is the critical path
    "identity": "id -u && id -un",
    "environment": "env",
    "numpy": "nice -n 19 python -c 'import numpy; print(numpy.__version__)'",
}


PARENT_ENV = "BUILDER_SMOKE_PARENT"  # the pid of the `builder test` that started these checks
PR_SET_PDEATHSIG = 1


def pytest_configure(config: pytest.Config) -> None:
    """Die with the `builder test` that started us: a SIGKILLed run must not leave these checks
    running on, writing a stale junit.xml over the next run's (Linux; elsewhere a no-op)."""
    parent = os.environ.get(PARENT_ENV)
    if not parent or not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != int(parent):  # it died before the signal was armed
        os._exit(1)


def _need(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.skip(f"{name} is not set: these tests run inside `builder test`, which starts the container")
    return value


def _timeout() -> int:
    return int(os.environ.get("BUILDER_SMOKE_TIMEOUT", "300"))


@pytest.fixture(scope="session")
def host() -> Any:
    return testinfra.get_host(f"docker://{_need(CONTAINER_ENV)}")


@pytest.fixture(scope="session")
def spec() -> ImageEntry:
    """The plan's entry for the image under test (images/<id>/image.json), typed."""
    path = _need("BUILDER_SMOKE_IMAGE_JSON")
    try:
        return image_entry.from_json(read_json(Path(path), image_entry.LIMIT, "image.json"), path)
    except UserError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def labels() -> dict[str, str]:
    """The image's labels as `builder test` inspected them through the engine port: the checks
    never talk to the engine themselves."""
    path = _need("BUILDER_SMOKE_LABELS")
    try:
        return jf.text_map(read_json(Path(path), image_entry.LIMIT, "image labels"), "labels", lambda what: UserError(f"{path}: {what}"))
    except UserError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def gpu_attached() -> bool:
    return os.environ.get("BUILDER_SMOKE_GPU") == "1"


def _started_probe(path: Path, timeout: int) -> SimpleNamespace:
    """The probe run `builder test` started before pytest (see builder.smoke.runner.run_probe)."""
    deadline = time.monotonic() + timeout + 60
    while not path.exists():
        if time.monotonic() > deadline:
            return SimpleNamespace(rc=124, stdout="", stderr="the probe started by builder test never finished")
        time.sleep(0.1)
    return SimpleNamespace(**json.loads(path.read_text(encoding="utf-8")))


@pytest.fixture(scope="session")
def runs(host: Any, spec: ImageEntry) -> Iterator[dict[str, Future[Any]]]:
    """Start hello-gpu (unless `builder test` already did) and every other command now, concurrently."""
    timeout = _timeout()
    started = os.environ.get("BUILDER_SMOKE_PROBE_RAW")
    with ThreadPoolExecutor(max_workers=len(COMMANDS) + 1) as pool:
        futures = {name: pool.submit(host.run, command) for name, command in COMMANDS.items()}
        if started:
            futures["probe"] = pool.submit(_started_probe, Path(started), timeout)
        else:
            futures["probe"] = pool.submit(host.run, shlex.join(probe_command(timeout, spec.libraries)))
        yield futures


@pytest.fixture(scope="session")
def probe(runs: dict[str, Future[Any]]) -> ProbeReport:
    """hello-gpu's report from inside the container, typed; its JSON is saved for the results file."""
    run = runs["probe"].result()
    if run.rc in (124, 137):
        pytest.fail(f"hello-gpu timed out after {_timeout()} s inside the container")
    try:
        data = json.loads(run.stdout)
    except ValueError:
        pytest.fail(f"hello-gpu printed no JSON (exit {run.rc}): {run.stderr.strip()[-500:]}")
    try:
        report = probe_report.from_json(data, "hello-gpu's output")
    except UserError as exc:
        pytest.fail(str(exc))
    out = os.environ.get("BUILDER_SMOKE_PROBE_OUT")
    if out:
        Path(out).write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
    return report
