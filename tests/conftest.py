"""Shared fixtures for the generator-core tests (matrix, rules, plan, render, cli, properties).

Everything here is pure: no Docker, no network. The embedded matrix is planned and rendered once
per session; tests that need their own matrix write one into tmp_path with `write_matrix`.

Test modules take what they need as fixtures and never `import conftest` (tests/integration has
its own conftest.py, and pytest swaps the module named `conftest` between directories).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

ROOT = Path(__file__).resolve().parents[1]

# A suite started in the background by a non-interactive shell (`cmd &`) inherits SIGINT ignored, and
# so would every `builder` process the tests start: their Ctrl-C cases would then test nothing and
# fail. Python's own handler here means children start with the default disposition again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if str(ROOT) not in sys.path:  # so `pytest tests/...` works without an install
    sys.path.insert(0, str(ROOT))

# `builder build` notes on this host which folder each workspace it builds in is (engine/ownership.py):
# the suite's builds (and every `builder` it starts) note theirs in a folder of the run's own.
os.environ.setdefault("BUILDER_STATE_DIR", tempfile.mkdtemp(prefix="builder-test-state-"))

INTEGRATION = "tests/integration/"
SHARED_FOLDER = "tests/test_bake.py"
# The integration tier's two lanes, one per worker, each against its own Docker engine: the second
# lane's modules (in file order) run on worker gw1 against the engine $BUILDER_TEST_ENGINE2 names
# (scripts/test.sh starts it: .ci/docker-up.sh), every other integration module on gw0 against the
# default engine. A lane's tests count, clean and remove what is on their own engine, so the other
# lane's builds and containers never show up in them (one image crosses, before lane 1 builds
# anything: the Debian 12 base test_bootstrap.py makes is loaded into lane 1's engine; the Debian 13
# base of the default selection only lane 1 builds on, so its slice bootstraps it there). The modules
# that build in the repository itself (its build/results/, and the CPU slice's images they share:
# slice, slice publish, the wheels slice and its sizes) are all in the first lane; each
# second-lane module works in a copy of its own (test_locking.py and test_team_env.py too, in
# lane 1: the offline tests moved to a worker of their own, and lane 1 no longer bootstraps its Debian 12
# base). The split is by measured time (docs/benchmarks.md; every run prints its lanes:
# tests/lanes.py).
SECOND_LANE = tuple(
    f"{INTEGRATION}{name}"
    for name in (
        "test_arm64.py",
        "test_bootstrap.py",
        "test_clean_workspaces.py",
        "test_engine.py",
        "test_faults.py",
        "test_interrupts.py",
        "test_nightly_end_to_end.py",
        "test_publish_attacks.py",
        "test_registry_evidence.py",
        "test_publish_races.py",
        "test_registry_index.py",
        "test_rocm_base.py",
    )
)
ENGINE2_ENV = "BUILDER_TEST_ENGINE2"
# Integration modules that need the package index but no engine, or both engines under names of their
# own (test_reproducible.py builds one image on each and compares them): each runs as a unit of its own
# on whichever worker is free (the offline tests' worker, idle once they are done), not in a lane.
ANY_WORKER = (f"{INTEGRATION}test_probe_hermetic.py", f"{INTEGRATION}test_reproducible.py")

from builder.engine.client import DEFAULT_SOCKET, engine_endpoint  # noqa: E402
from builder.util.errors import UserError  # noqa: E402


def two_lanes(workers: int) -> bool:
    """The integration tier runs in two lanes: a second engine is named and there are two workers or more."""
    return workers >= 2 and bool(os.environ.get(ENGINE2_ENV))


# Worker gw1 runs the second lane: its tests, and every `builder` they start, talk to the second
# engine, and keep their run and bootstrap locks apart (`builder clean` leaves the intermediate
# images of a run it sees alive: the other lane's runs are on another engine). Set in the worker's
# environment when it starts, so every `builder` process a test starts inherits it.
lane_two = os.environ.get("PYTEST_XDIST_WORKER") == "gw1" and two_lanes(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def first_engine() -> str:
    """The engine lane 1 uses, as `builder` resolves it (DOCKER_HOST, else the docker context, else the
    default socket): lane 2 checks that its own engine is another one. A context `builder` refuses
    leaves the default socket here; the docker_client fixture then says what is wrong."""
    try:
        return engine_endpoint()[0]
    except UserError:
        return DEFAULT_SOCKET


if lane_two and os.environ.get("BUILDER_TEST_LANE") != "2":  # once (a test importing this file runs it again)
    os.environ["BUILDER_TEST_ENGINE1"] = first_engine()
    os.environ["DOCKER_HOST"] = os.environ[ENGINE2_ENV]
    os.environ["BUILDER_TEST_LANE"] = "2"
    os.environ["BUILDER_LOCK_DIR"] = str(Path(tempfile.gettempdir()) / "builder-engine2")

from builder.cli import main  # noqa: E402
from builder.lock.line import FOLDER as LINES_FOLDER  # noqa: E402
from builder.model.plan import ImageSpec, Matrix, Plan  # noqa: E402
from builder.spec.matrix import load_matrix  # noqa: E402
from builder.workspace import MATRIX_ENV, Workspace  # noqa: E402


def small_matrix_text(python: tuple[str, ...] = ("3.11",), torch: tuple[str, ...] = ("2.5.1",), base_extra: str = "") -> str:
    """The small matrix: torch on one CUDA 12.4.1 base, with these Pythons and releases (and lines
    added to the base, e.g. a digest). The one copy of it: tests that need a variant ask for one."""
    return (
        "registry: ghcr.io/example/gpu-images\n"
        "bases:\n"
        "  cuda12.4-ubuntu22.04:\n"
        "    vendor: cuda\n"
        '    version: "12.4.1"\n'
        "    os: ubuntu22.04\n"
        "    image: nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04\n"
        f"{base_extra}"
        f"python: {json.dumps(list(python))}\n"
        "frameworks:\n"
        f"  torch: {json.dumps(list(torch))}\n"
        "stacks:\n"
        "  torch: [torch]\n"
    )


# A small valid matrix the error tests start from: one torch 2.5.1 image on CUDA 12.4.1.
SMALL_MATRIX = small_matrix_text()

WriteMatrix = Callable[..., Path]
LINES = LINES_FOLDER + "/"  # images/lines/: the CUDA lines' locks, no image's folder
RunCli = Callable[..., Result]


@dataclass(frozen=True)
class Rendered:
    """The embedded matrix's plan and every file `builder render` would write, by image id."""

    plan: Plan
    files: dict[str, dict[str, bytes]]  # image id -> file name -> bytes, as images/<id>/ holds them
    contexts: dict[str, dict[str, bytes]]  # image id -> file name -> bytes of the build context (with the probe)
    lines: dict[str, bytes]  # `lines/<line>.lock` -> bytes: each CUDA line's lock (matrix.yaml line_layers), beside the images

    def spec(self, image_id: str) -> ImageSpec:
        return next(s for s in self.plan.images if s.id == image_id)

    def text(self, image_id: str, name: str) -> str:
        return self.files[image_id][name].decode()


_PHASES: list[tuple[str, str, float, float, float | None]] = []  # (worker, node id, start, stop, its CPU-s): tests/lanes.py
_READINGS: list[tuple[float, dict[str, float]]] = []  # (when, each consumer's CPU-s): tests/cpu_meter.py
WORKER_CPU = "worker_cpu"  # the user property a report carries its worker's CPU-s in
READING_EVERY_S = 1.0  # the integration tier's reports read the engines' counters at most this often


def _read_machine() -> None:
    from tests import cpu_meter

    now = time.time()
    if not _READINGS or now - _READINGS[-1][0] >= READING_EVERY_S:
        _READINGS.append((now, cpu_meter.reading()))


def pytest_sessionstart(session: pytest.Session) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        _read_machine()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Each report carries its worker's CPU-s so far (tests/cpu_meter.py), for the lanes' CPU table."""
    from tests import cpu_meter

    report = yield
    report.user_properties = [*report.user_properties, (WORKER_CPU, cpu_meter.worker_cpu())]
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each phase's clocks and its worker's CPU-s, in the process that prints the summary (xdist's
    controller, or a run without workers); a worker's report reaches the controller with the worker
    it came from. An integration test's report also reads what the engines have spent by now."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    seconds = next((float(str(v)) for k, v in reversed(report.user_properties) if k == WORKER_CPU), None)
    _PHASES.append((str(getattr(gateway, "id", "main")), report.nodeid, report.start, report.stop, seconds))
    if report.nodeid.startswith(INTEGRATION):
        _read_machine()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Where each lane's minutes went (tests/lanes.py), after any run that ran integration tests, and
    who spent the CPU meanwhile (tests/cpu_meter.py)."""
    from tests import cpu_meter, lanes

    found = lanes.spans([(worker, nodeid, start, stop) for worker, nodeid, start, stop, _ in _PHASES])
    lines = lanes.summary(found)
    if lines:
        terminalreporter.section("lanes: each module's seconds from the first test (tests/lanes.py)")
        for line in lines:
            terminalreporter.write_line(line)
        _READINGS.append((time.time(), cpu_meter.reading()))
        terminalreporter.section("CPU-s by module: its worker, and its engine meanwhile (tests/lanes.py, tests/cpu_meter.py)")
        for line in lanes.cpu_table(found, _PHASES, _READINGS):
            terminalreporter.write_line(line)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under `-n 3` (pyproject's addopts) the integration tier (tests/integration/) runs as one or
    two units of work, each in file order on one worker (they build, count and remove the engine's
    images and containers, and later files reuse what earlier ones built): two lanes when a second
    engine is named (SECOND_LANE, on gw1 against it; the rest on gw0), else one. The offline tests
    go one at a time to whichever worker is free (the third, gw2, from the start: they mostly wait
    on subprocesses and deadlines, and fill the time the lanes leave the two cores idle), except
    tests/test_bake.py, whose tests run on one worker in turn (each rewrites the repository's
    build/bake/ and reads it back). An explicit `--dist` other than the default keeps xdist's own
    scheduler.

    (`--dist loadgroup` with xdist_group markers would say the same, but xdist 3.8 writes the group
    into `item._nodeid`, which pytest 9 no longer reads: the groups were silently ignored.)"""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class IntegrationLanes(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no type hints
        lanes = False

        def schedule(self) -> None:
            if self.collection is None and two_lanes(self.numnodes):  # the first call: decide once
                nodeids = next(iter(self.registered_collections.values()))
                second = {n.startswith(SECOND_LANE) for n in nodeids if n.startswith(INTEGRATION)}
                self.lanes = second == {True, False}  # both lanes have tests to run
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(ANY_WORKER):  # no engine: not a lane's, any free worker takes it whole
                return nodeid.split("::", 1)[0]
            if nodeid.startswith(INTEGRATION):
                if self.lanes:  # the lane's worker: its engine is the one its name chose
                    return ("gw1:" if nodeid.startswith(SECOND_LANE) else "gw0:") + INTEGRATION
                return INTEGRATION
            if nodeid.startswith(SHARED_FOLDER):  # its tests rewrite and read the one build/bake/ in turn
                return SHARED_FOLDER
            return nodeid

        def _next_for(self, node: Any) -> str | None:
            """What this worker may take next: its own lane first, else anything but a lane."""
            own = f"{node.gateway.id}:{INTEGRATION}"
            if own in self.workqueue:
                return own
            return next((s for s in self.workqueue if not s.endswith(":" + INTEGRATION)), None)

        def _assign_work_unit(self, node: Any) -> None:
            scope = self._next_for(node)
            if scope is not None:
                self.workqueue.move_to_end(scope, last=False)
                super()._assign_work_unit(node)

        def _reschedule(self, node: Any) -> None:
            """xdist's, except that a worker for whom only the other lane is left takes nothing more
            and is shut down once its own work is done (xdist's would hand it that lane)."""
            if self.workqueue and self._next_for(node) is None:
                if not node.shutting_down and self._pending_of(self.assigned_work[node]) == 0:
                    node.shutdown()
                return
            super()._reschedule(node)

    return IntegrationLanes(config, log)


@pytest.fixture(scope="session")
def uv_stand_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    stand_in = tmp_path_factory.mktemp("uv") / "uv"
    stand_in.write_bytes(b"#!/bin/sh\n# stands in for the static uv: a fake engine runs no Dockerfile\nexit 1\n")
    stand_in.chmod(0o755)
    return stand_in


@pytest.fixture(autouse=True)
def no_uv_download(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The offline tier never reaches the network for uv: a locked image's build (against
    tests/fake_engine.py, which runs no Dockerfile) is served a stand-in file, where the real
    native_uv.binary would `pip download` uv's wheel from PyPI into each test's own build/tools/.
    tests/test_native_uv.py tests the real fetch (from local wheel folders), and the integration
    tier builds for real: both are left alone."""
    if request.node.get_closest_marker("docker") is not None or request.module.__name__.endswith("test_native_uv"):
        return
    from builder.engine import native_uv

    stand_in = request.getfixturevalue("uv_stand_in")
    monkeypatch.setattr(native_uv, "binary", lambda settings, tools_dir, machine=None: stand_in)


OFFLINE_ENGINE = "unix:///nonexistent/the-offline-tier-reaches-no-engine.sock"


@pytest.fixture(autouse=True)
def no_engine_offline(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The offline tier (`-m "not docker"`) reaches no Docker engine, also where one runs (CI, a
    developer's machine): DOCKER_HOST names a socket that does not exist, so a use-case that opens
    the real engine instead of the fake fails the same everywhere, not only on an engine-less
    machine. Tests of how the engine's address is resolved set or unset DOCKER_HOST themselves."""
    if request.node.get_closest_marker("docker") is None:
        monkeypatch.setenv("DOCKER_HOST", OFFLINE_ENGINE)


@pytest.fixture(scope="session")
def root() -> Path:
    """The repository root (where the embedded matrix.yaml lives)."""
    return ROOT


@pytest.fixture(scope="session")
def embedded_matrix_path() -> Path:
    return ROOT / "matrix.yaml"


@pytest.fixture(scope="session")
def embedded_matrix(embedded_matrix_path: Path) -> Matrix:
    return load_matrix(embedded_matrix_path)


@pytest.fixture(scope="session")
def embedded_workspace(embedded_matrix_path: Path) -> Workspace:
    return Workspace(embedded_matrix_path)


@pytest.fixture(scope="session")
def embedded_plan(embedded_workspace: Workspace) -> Plan:
    return embedded_workspace.plan


@pytest.fixture(scope="session")
def rendered(embedded_workspace: Workspace) -> Rendered:
    files: dict[str, dict[str, bytes]] = {}
    lines: dict[str, bytes] = {}
    for rel, data in embedded_workspace.rendered_tree().items():
        if rel.startswith(LINES):
            lines[rel] = data
            continue
        if "/" not in rel:
            continue  # images/.rendered.json, the manifest of the whole tree
        image_id, name = rel.split("/", 1)
        files.setdefault(image_id, {})[name] = data
    contexts = embedded_workspace.contexts(embedded_workspace.plan.images)
    return Rendered(plan=embedded_workspace.plan, files=files, contexts=contexts, lines=lines)


@pytest.fixture
def small_matrix() -> str:
    return SMALL_MATRIX


@pytest.fixture
def write_matrix(tmp_path: Path) -> WriteMatrix:
    """Write a matrix file (dedented) into tmp_path, or `folder`, and return its path."""

    def write(text: str = SMALL_MATRIX, name: str = "matrix.yaml", folder: Path | None = None) -> Path:
        path = (folder or tmp_path) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> RunCli:
    """Invoke `builder ARGS...` in-process; $BUILDER_MATRIX is unset unless `env=` sets it."""
    monkeypatch.delenv(MATRIX_ENV, raising=False)

    def run(*args: str, env: dict[str, str] | None = None) -> Result:
        return CliRunner().invoke(main, list(args), env=env, catch_exceptions=True)

    return run


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Work from tmp_path, so messages name files relative to it (`matrix.yaml:12: ...`)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


ERROR = re.compile(r"^error: (?P<file>[^:\n]+):(?P<line>[0-9]+): (?P<what>.+)$")  # a one-line error naming file and line


def one_line_error(result: Result) -> re.Match[str]:
    """The one stderr line of a command refused with exit 2: `error: FILE:LINE: what`."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    match = ERROR.match(lines[0])
    assert match, lines[0]
    return match
