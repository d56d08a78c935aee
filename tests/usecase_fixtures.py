"""What the offline use-case tests (tests/test_usecase_*.py) share: a two-image workspace, an in-memory
engine that already holds the bootstrapped base the images build FROM, a stand-in for the smoke
checks' pytest subprocess, a stand-in for uv's resolver, and the use-cases' events objects (the
nightly's records its stages and locks; the others are ignored: the tests assert what the engine,
images/, build/results and the catalog hold).

Nothing here reaches the network or a Docker engine: the engine is tests/fake_engine.py, the
resolver writes the lock uv would write for the image's own requirements plus chosen pins, and the
smoke checks write the junit.xml and probe report the real checks would.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from builder.engine import bootstrap
from builder.engine.image_build import BuildResult
from builder.host.facts import AmdInfo, EngineFacts, HostInfo, NvidiaInfo
from builder.lock.resolve import LockFailed
from builder.lock.target import LockTarget
from builder.model.plan import ImageSpec
from builder.model.results import SmokeResult
from builder.model.sources import Sources
from builder.usecases import lock as locking
from builder.usecases import publish as publishing
from builder.workspace import Workspace
from tests.fake_engine import FakeEngine

REPO = "127.0.0.1:5000/uc-nightly"
JAX = "jax0.10.2-cpu-py3.11-debian12"
NUMBA = "numba0.68.0-cpu-py3.11-debian12"
MATRIX = f"""\
# two frameworks on the shared bootstrapped base (the nightly end-to-end test's matrix, offline)
registry: {REPO}
bases:
  local-debian12: {{vendor: cpu, os: debian12, bootstrap: debootstrap}}
python: ["3.11"]
frameworks:
  jax: ["0.10.2"]
  numba: ["0.68.0"]
stacks:
  jax: [jax]
  numba: [numba]
"""
OFFLINE = Sources(use_host=False)  # never this host's pip configuration or CA bundle
HOST = HostInfo(engine=EngineFacts(True, "20.10.24", ()), nvidia=NvidiaInfo(status="absent"), amd=AmdInfo())

SUITE = '<testsuite name="{name}" tests="3" failures="{failed}" errors="0" skipped="0">{cases}</testsuite>'


def fake_with_base(specs: Sequence[ImageSpec]) -> FakeEngine:
    """An engine holding the bootstrapped base of `specs` (its recipe label current, so it is not rebuilt)."""
    engine = FakeEngine()
    base = specs[0].base
    recipe = bootstrap.recipe_for(base, "http://deb.debian.org/debian")
    engine.add_image("sha256:base-debian12", base.local_tag, labels={bootstrap.HASH_LABEL: bootstrap.recipe_hash(recipe)}, size=120_000_000)
    return engine


REAL_RUN = subprocess.run


@dataclass
class Probe:
    """What the probe reports for one image: a framework that failed to import, with its diagnosis."""

    framework: str
    reason: str
    cause: str = ""
    fix: str = ""

    def report(self) -> dict[str, Any]:
        failed: dict[str, Any] = {"status": "failed", "reason": self.reason}
        if self.cause:
            failed["diagnosis"] = {"cause": self.cause, "fix": self.fix}
        return {"frameworks": {self.framework: failed}, "host": {"python": "3.11.2"}}


@dataclass
class Checks:
    """Stands in for the smoke checks' pytest subprocess (every other subprocess is the real one):
    each image passes unless `broken` names it; `seen` lists the images tested, in order."""

    fake: FakeEngine
    broken: dict[str, Probe] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)

    def __call__(self, argv: list[str], env: Mapping[str, str] | None = None, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if env is None or "BUILDER_SMOKE_CONTAINER" not in env:
            return REAL_RUN(argv, env=env, **kwargs)
        container = self.fake.live[env["BUILDER_SMOKE_CONTAINER"]]
        assert container.started, "the checks run against a started container"
        junit = Path(next(a for a in argv if a.startswith("--junitxml=")).split("=", 1)[1])
        image = next(a for a in argv if a.startswith("junit_suite_name=")).split("=", 1)[1]
        self.seen.append(image)
        probe = self.broken.get(image)
        cases = f'<testcase name="test_import"><failure message="{probe.reason}"/></testcase>' if probe else '<testcase name="test_probe"/>'
        junit.write_text(SUITE.format(name=image, failed=int(bool(probe)), cases=cases), encoding="utf-8")
        report = probe.report() if probe else {"frameworks": {}, "host": {"python": "3.11.2"}}
        Path(env["BUILDER_SMOKE_PROBE_OUT"]).write_text(json.dumps(report), encoding="utf-8")
        return subprocess.CompletedProcess(argv, 1 if probe else 0, "", "")


def uv_output(target: LockTarget, pins: Mapping[str, str]) -> str:
    """What uv prints for `target`: the image's own requirements pinned `via -r requirements.in`,
    then `pins` as their dependencies, each hashed."""
    top = {}
    for line in target.requirements:
        requirement = Requirement(line)
        top[str(canonicalize_name(requirement.name))] = next(iter(requirement.specifier)).version
    first = sorted(top)[0]
    rows = {name: (version, "-r requirements.in") for name, version in top.items()}
    rows.update({name: (version, first) for name, version in pins.items() if name not in top})
    return "".join(
        f"{name}=={version} \\\n    --hash=sha256:{'a' * 64}\n    # via {via}\n" for name, (version, via) in sorted(rows.items())
    )


class Resolver:
    """Stands in for builder.lock.resolve.resolve (uv): an image's lock pins numpy 2.4.6 and what
    `pins[image]` adds or changes, or the resolver raises what `fails[image]` holds; `asked`
    lists the images resolved, in the order they were."""

    def __init__(self) -> None:
        self.pins: dict[str, dict[str, str]] = {}
        self.fails: dict[str, LockFailed] = {}
        self.asked: list[str] = []

    def __call__(self, target: LockTarget, *args: object, **kwargs: object) -> str:
        self.asked.append(target.image)
        if target.image in self.fails:
            raise self.fails[target.image]
        return uv_output(target, {"numpy": "2.4.6", **self.pins.get(target.image, {})})


def planned(ws: Workspace) -> tuple[ImageSpec, ...]:
    return tuple(ws.selected(None, use_default=False))


class BuildEvents:
    """The build's events, ignored: the tests assert what the engine and the results hold."""

    def begin(self, total: int) -> None: ...
    def end(self) -> None: ...
    def info(self, text: str) -> None: ...
    def line(self, image: str, text: str) -> None: ...
    def done(self, result: BuildResult) -> None: ...


class TestEvents:
    __test__ = False  # not a pytest class

    def started(self, spec: ImageSpec) -> None: ...
    def done(self, result: SmokeResult) -> None: ...


class PublishEvents:
    def info(self, text: str) -> None: ...
    def done(self, outcome: publishing.Published) -> None: ...


class NightlyEvents:
    """The nightly's events: the stages in order and every lock result."""

    def __init__(self) -> None:
        self.stages: list[str] = []
        self.locks: list[locking.LockResult] = []

    def stage(self, name: str) -> None:
        self.stages.append(name)

    def info(self, text: str) -> None: ...
    def lock(self, result: locking.LockResult) -> None:
        self.locks.append(result)

    def build(self) -> BuildEvents:
        return BuildEvents()

    def test(self) -> TestEvents:
        return TestEvents()

    def publish(self) -> PublishEvents:
        return PublishEvents()


def locations(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """Every Workspace.locate from here on (its --matrix argument), still locating: how many workspaces a run makes."""
    located: list[str | None] = []
    locate = Workspace.locate

    def counted(option: str | None) -> Workspace:
        located.append(option)
        return locate(option)

    monkeypatch.setattr(Workspace, "locate", staticmethod(counted))
    return located


class Deferred:
    """A future that runs its work when its result is asked for, and can be cancelled until then."""

    def __init__(self, work: Callable[[], Any]) -> None:
        self.work = work
        self.cancelled = False

    def cancel(self) -> bool:
        self.cancelled = True
        return True

    def result(self) -> Any:
        return self.work()


class InOrder:
    """A ThreadPoolExecutor whose single worker takes each job only when the caller waits for it, so
    which locks are cancelled after a failure is the same on every machine."""

    def __init__(self, max_workers: int) -> None:
        self.max_workers = max_workers

    def __enter__(self) -> InOrder:
        return self

    def __exit__(self, *exc: object) -> None: ...

    def submit(self, fn: Callable[..., Any], *args: Any) -> Deferred:
        return Deferred(lambda: fn(*args))
