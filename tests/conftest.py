"""Shared fixtures for the generator-core tests (matrix, rules, plan, render, cli, properties).

Everything here is pure: no Docker, no network. The embedded matrix is planned and rendered once
per session; tests that need their own matrix write one into tmp_path with `write_matrix`.

Test modules take what they need as fixtures and never `import conftest` (tests/integration has
its own conftest.py, and pytest swaps the module named `conftest` between directories).
"""

from __future__ import annotations

import signal
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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

from builder.cli import main  # noqa: E402
from builder.records import ImageSpec, Matrix, Plan  # noqa: E402
from builder.spec.matrix import load_matrix  # noqa: E402
from builder.workspace import MATRIX_ENV, Workspace  # noqa: E402

# A small valid matrix the error tests start from: one torch 2.5.1 image on CUDA 12.4.1.
SMALL_MATRIX = """\
registry: ghcr.io/example/gpu-images
bases:
  cuda12.4-ubuntu22.04:
    vendor: cuda
    version: "12.4.1"
    os: ubuntu22.04
    image: nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04
python: ["3.11"]
frameworks:
  torch: ["2.5.1"]
stacks:
  torch: [torch]
"""

WriteMatrix = Callable[..., Path]
RunCli = Callable[..., Result]


@dataclass(frozen=True)
class Rendered:
    """The embedded matrix's plan and every file `builder render` would write, by image id."""

    plan: Plan
    files: dict[str, dict[str, bytes]]  # image id -> file name -> bytes, as images/<id>/ holds them
    contexts: dict[str, dict[str, bytes]]  # image id -> file name -> bytes of the build context (with the probe)

    def spec(self, image_id: str) -> ImageSpec:
        return next(s for s in self.plan.images if s.id == image_id)

    def text(self, image_id: str, name: str) -> str:
        return self.files[image_id][name].decode()


INTEGRATION = "tests/integration/"
SHARED_FOLDER = "tests/test_bake.py"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under `-n 2` (pyproject's addopts) every test in tests/integration/ is one unit of work, run in
    file order on one worker (they build, count and remove the engine's images and containers, and
    later files reuse what earlier ones built), while the other worker takes the offline tests one
    at a time, except tests/test_bake.py, whose tests run on one worker in turn (each rewrites the
    repository's build/bake/ and reads it back). An explicit `--dist` other than the default keeps
    xdist's own scheduler.

    (`--dist loadgroup` with xdist_group markers would say the same, but xdist 3.8 writes the group
    into `item._nodeid`, which pytest 9 no longer reads: the groups were silently ignored.)"""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class IntegrationTierTogether(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no type hints
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(INTEGRATION):
                return INTEGRATION
            if nodeid.startswith(SHARED_FOLDER):  # its tests rewrite and read the one build/bake/ in turn
                return SHARED_FOLDER
            return nodeid

    return IntegrationTierTogether(config, log)


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
    for rel, data in embedded_workspace.rendered_tree().items():
        if "/" not in rel:
            continue  # images/.rendered.json, the manifest of the whole tree
        image_id, name = rel.split("/", 1)
        files.setdefault(image_id, {})[name] = data
    contexts = embedded_workspace.contexts(embedded_workspace.plan.images)
    return Rendered(plan=embedded_workspace.plan, files=files, contexts=contexts)


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
