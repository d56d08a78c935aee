"""arm64 images on an amd64 host (issue 19): built and smoke-tested for their platform under qemu-user
emulation, offline against the in-memory engine. The build request, the base import and the smoke
container name the platform; the result and the known-good record say the platform and that the
checks ran emulated; a host without emulation is refused in one line before anything is built.
What only a real engine shows (the image config's architecture, RUN steps under qemu) is in
tests/integration/test_arm64.py.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from builder.catalog import records as catalog_records
from builder.engine import bootstrap
from builder.engine.client import create_kwargs
from builder.engine.port import ContainerSpec, ExecResult
from builder.host import doctor
from builder.host import facts as hostinfo
from builder.host.facts import EmulationFacts, runs_emulated
from builder.model import results
from builder.model.plan import AMD64, ARM64, ImageSpec
from builder.model.results import GpuUse, SmokeResult
from builder.model.sources import Sources
from builder.probes.hello_gpu import diagnose
from builder.render.tree import write_tree
from builder.smoke.runner import emulated_diagnoses
from builder.usecases import build as building
from builder.usecases import test as testing
from builder.util.errors import UserError
from builder.workspace import Workspace
from tests.catalog_fixtures import record
from tests.fake_engine import FakeEngine, connect_to
from tests.usecase_fixtures import HOST, REAL_RUN

MATRIX = """\
registry: 127.0.0.1:5000/arm-images
bases:
  local-debian12: {vendor: cpu, os: debian12, bootstrap: debootstrap, platforms: [linux/amd64, linux/arm64]}
python: ["3.11"]
frameworks:
  numba: ["0.68.0"]
stacks:
  numba: [numba]
"""
EMULATED = EmulationFacts("x86_64", "enabled", "POF")
NO_QEMU = EmulationFacts("x86_64", "absent")
OFFLINE = building.BuildOptions(sources=Sources(use_host=False))
SUITE = '<testsuite name="{name}" tests="3" failures="0" errors="0" skipped="0"><testcase name="test_probe"/></testsuite>'


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    (tmp_path / "matrix.yaml").write_text(MATRIX, encoding="utf-8")
    workspace = Workspace(tmp_path / "matrix.yaml")
    write_tree(workspace.images_dir, workspace.rendered_tree())
    monkeypatch.setattr(hostinfo, "gather", lambda **kwargs: replace(HOST, emulation=EMULATED))
    monkeypatch.setattr(hostinfo, "gather_emulation", lambda *args: EMULATED)
    monkeypatch.setenv("BUILDER_LOCK_DIR", str(tmp_path / "locks"))
    return workspace


@pytest.fixture
def specs(ws: Workspace) -> tuple[ImageSpec, ...]:
    found = tuple(sorted(ws.selected(None, use_default=False), key=lambda s: s.platform))
    assert [s.platform for s in found] == [AMD64, ARM64]
    return found


@pytest.fixture
def fake(specs: Sequence[ImageSpec]) -> FakeEngine:
    """The two bootstrapped bases (amd64 and arm64) current, each of its own architecture."""
    engine = FakeEngine()
    for spec in specs:
        recipe = bootstrap.recipe_for(spec.base, "http://deb.debian.org/debian")
        image = engine.add_image(
            f"sha256:base-{spec.platform.split('/')[1]}", spec.base.local_tag, labels={bootstrap.HASH_LABEL: bootstrap.recipe_hash(recipe)}
        )
        engine.architectures[image] = spec.platform.split("/")[1]
    return engine


class Events:
    def begin(self, total: int) -> None: ...
    def end(self) -> None: ...
    def info(self, text: str) -> None: ...
    def line(self, image: str, text: str) -> None: ...
    def done(self, result: Any) -> None: ...
    def started(self, spec: ImageSpec) -> None: ...


def checks(argv: list[str], env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """The smoke checks' pytest subprocess: what the real checks write (junit and the probe's report)."""
    if env is None or "BUILDER_SMOKE_CONTAINER" not in env:
        return REAL_RUN(argv, env=env, **kwargs)
    junit = Path(next(a for a in argv if a.startswith("--junitxml=")).split("=", 1)[1])
    junit.write_text(SUITE.format(name=junit.parent.name), encoding="utf-8")
    probe = {"frameworks": {"numba": {"version": "0.68.0", "status": "ok"}}, "host": {"python": "3.11.2"}}
    Path(env["BUILDER_SMOKE_PROBE_OUT"]).write_text(json.dumps(probe), encoding="utf-8")
    return subprocess.CompletedProcess(argv, 0, "3 passed", "")


# -- which platform runs emulated where ---------------------------------------------------------
@pytest.mark.parametrize(
    ("platform", "machine", "emulated"),
    [(ARM64, "x86_64", True), (AMD64, "x86_64", False), (ARM64, "aarch64", False), (AMD64, "aarch64", True), (ARM64, "arm64", False)],
)
def test_an_image_runs_emulated_when_its_architecture_is_not_the_hosts(platform: str, machine: str, emulated: bool) -> None:
    assert runs_emulated(platform, machine) is emulated


@pytest.mark.parametrize(
    ("emulation", "refused"),
    [
        (NO_QEMU, "no qemu-aarch64 binfmt handler is registered"),
        (EmulationFacts("x86_64", "unmounted"), "/proc/sys/fs/binfmt_misc is not mounted"),
        (EmulationFacts("x86_64", "enabled", "PO"), "qemu-aarch64 is enabled without the F (fix-binary) flag (PO)"),
        (EmulationFacts("x86_64", "disabled"), "the qemu-aarch64 handler is registered but disabled"),
        (EMULATED, None),
        (EmulationFacts("aarch64", "native"), None),
    ],
)
def test_an_arm64_image_without_emulation_is_refused_in_one_line(emulation: EmulationFacts, refused: str | None) -> None:
    refusal = doctor.emulation_refusal([AMD64, ARM64], emulation)
    if refused is None:
        assert refusal is None
    else:
        assert refusal == f"arm64 image needs emulation: install qemu-user-static (scripts/setup.sh does); here {refused}"
    assert doctor.emulation_refusal([AMD64], NO_QEMU) is None, "amd64 images need no emulation"


def test_the_build_refuses_before_anything_is_built(
    ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hostinfo, "gather_emulation", lambda *args: NO_QEMU)
    with pytest.raises(UserError, match=r"^arm64 image needs emulation: install qemu-user-static \(scripts/setup.sh does\)") as refused:
        building.build_images(ws, specs, OFFLINE, Events(), connect_to(fake))
    assert "\n" not in str(refused.value)  # a UserError: one line on stderr, exit code 2
    assert fake.builds == [] and not (ws.build_dir / "results" / "build.json").exists()
    assert [r.status for r in building.build_images(ws, specs[:1], OFFLINE, Events(), connect_to(fake))] == ["built"], "amd64 alone builds"


def test_the_test_run_refuses_too(ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostinfo, "gather", lambda **kwargs: replace(HOST, emulation=NO_QEMU))
    with pytest.raises(UserError, match="arm64 image needs emulation"):
        testing.test_images(ws, specs, testing.TestOptions(timeout_s=60), Events(), connect_to(fake))
    assert fake.created == [], "no container was made"


# -- built and tested for its platform ----------------------------------------------------------
def test_each_image_is_built_and_tested_for_its_platform(
    ws: Workspace, specs: tuple[ImageSpec, ...], fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = building.build_images(ws, specs, OFFLINE, Events(), connect_to(fake))
    assert [r.status for r in built] == ["built", "built"]
    assert {r.tag: r.platform for r in fake.builds} == {s.tag: s.platform for s in specs}, "the build request names the platform"
    assert [getattr(fake.inspect_image(s.tag), "architecture", None) for s in specs] == ["amd64", "arm64"]

    monkeypatch.setattr(subprocess, "run", checks)
    fake.exec_result = lambda container, command: ExecResult(0, b'{"frameworks": {}}', b"")
    tested = testing.test_images(ws, specs, testing.TestOptions(timeout_s=60), Events(), connect_to(fake))
    assert [c.spec.platform for c in fake.created] == [AMD64, ARM64], "each smoke container is created for its image's platform"
    assert [(r.verdict, r.platform, r.emulated) for r in tested] == [("passed", AMD64, False), ("passed", ARM64, True)]
    for spec, result in zip(specs, tested, strict=True):
        assert results.load(ws.build_dir / "results", spec.id) == result, "platform and emulated are written and read back"


def test_a_container_of_another_platform_than_its_image_is_refused_by_the_engine(specs: tuple[ImageSpec, ...], fake: FakeEngine) -> None:
    """What the engine does (API 1.41 `platform` on create), which the fake does too: the smoke run
    must name the image's own platform."""
    arm = specs[1]
    with (
        pytest.raises(Exception, match="does not match the specified platform"),
        fake.container(ContainerSpec(arm.base.local_tag, ("true",), platform=AMD64)),
    ):
        pass
    with fake.container(ContainerSpec(arm.base.local_tag, ("true",), platform=ARM64)):
        pass


def test_the_adapter_passes_the_platform_only_when_there_is_one() -> None:
    assert create_kwargs(ContainerSpec("i", ("true",), platform=ARM64))["platform"] == ARM64
    assert "platform" not in create_kwargs(ContainerSpec("i", ("true",)))


def test_the_base_is_imported_for_its_platform(specs: tuple[ImageSpec, ...], tmp_path: Path) -> None:
    fake = FakeEngine()
    arm = specs[1].base
    recipe = bootstrap.recipe_for(arm, "http://deb.debian.org/debian")
    assert recipe.arch == "arm64"
    tarball = tmp_path / "rootfs.tar"
    tarball.write_bytes(b"")
    bootstrap._import(fake, tarball, "builder-base/debian12-arm64:tmp-1", recipe, bootstrap.recipe_hash(recipe), arm.platform)
    assert fake.imports == [("builder-base/debian12-arm64:tmp-1", ARM64)]
    assert getattr(fake.inspect_image("builder-base/debian12-arm64:tmp-1"), "architecture", None) == "arm64"


# -- the result file and the record: typed, malformed refused -----------------------------------
def _result(**changes: Any) -> dict[str, Any]:
    result = SmokeResult(
        "x-arm64", "r:x-arm64", "passed", GpuUse(False, "cpu"), 1.0, tests=results.TestCounts(3), returncode=0, vendor="cpu"
    )
    return {**replace(result, platform=ARM64, emulated=True).to_json(), **changes}


def test_a_result_says_its_platform_and_whether_it_ran_emulated() -> None:
    doc = _result()
    assert (doc["platform"], doc["emulated"]) == (ARM64, True)
    read = results.from_json(doc, "x.json")
    assert (read.platform, read.emulated) == (ARM64, True)
    older = {k: v for k, v in doc.items() if k not in ("platform", "emulated")}
    assert (results.from_json(older, "x.json").platform, results.from_json(older, "x.json").emulated) == (AMD64, False)


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"platform": "linux/s390x"}, "platform 'linux/s390x' is not one of linux/amd64, linux/arm64"),
        ({"platform": 64}, "'platform' must be"),
        ({"emulated": "yes"}, "'emulated' must be true or false"),
    ],
)
def test_a_malformed_platform_or_emulated_is_refused_in_one_line(changes: dict[str, Any], why: str) -> None:
    with pytest.raises(UserError, match="not a smoke result this tool wrote") as refused:
        results.from_json(_result(**changes), "build/results/x-arm64.json")
    assert why in str(refused.value) and "\n" not in str(refused.value)


def test_a_record_says_its_platform_and_an_amd64_record_keeps_its_signed_form() -> None:
    amd = record("numba0.68.0-cpu-py3.11-debian12")
    assert "platform" not in amd.to_json() and "emulated" not in amd.to_json(), "old records (and their signatures) are unchanged"
    arm = replace(record("numba0.68.0-cpu-py3.11-debian12-arm64"), platform=ARM64, emulated=True)
    doc = arm.to_json()
    assert (doc["platform"], doc["emulated"]) == (ARM64, True)
    assert catalog_records.from_json(doc, "known-good.json") == arm
    for key, value, want in (("platform", "linux/riscv64", "one of linux/amd64, linux/arm64"), ("emulated", 1, "true or false")):
        with pytest.raises(catalog_records.RecordError, match=f"field '{key}' must be {want}"):
            catalog_records.from_json({**doc, key: value}, "known-good.json")


def test_a_base_of_the_wrong_architecture_is_bootstrapped_again(
    specs: tuple[ImageSpec, ...], fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its recipe label current, its config amd64 (an engine that ignored the import's platform): not current."""
    monkeypatch.setattr(bootstrap, "_tool_binary", lambda: None)
    arm = specs[1].base
    assert not bootstrap.ensure_base(fake, arm, log=lambda line: None).built, "the arm64 base of arm64 architecture is current"
    fake.architectures[fake.resolve(arm.local_tag)] = "amd64"
    with pytest.raises(UserError, match="mmdebstrap is not installed"):
        bootstrap.ensure_base(fake, arm, log=lambda line: None)


def test_an_emulated_crash_is_diagnosed_as_the_emulations_not_the_images() -> None:
    """torch's aarch64 wheel crashes on import under qemu-user (pytorch/pytorch#188255, seen here
    with torch 2.14.1 cu130 arm64): the diagnosis says so, and where to test it instead."""
    crash = diagnose("torch: crashed with signal SIGSEGV")
    assert crash is not None
    other = results.Diagnosed("jax", "the GPU ran out of memory", "free it")
    torch, kept = emulated_diagnoses((results.Diagnosed("torch", *crash), other))
    assert torch.cause.startswith("the check process was killed by SIGSEGV under qemu-user emulation")
    assert "pytorch/pytorch#188255" in torch.cause and "arm64 host" in torch.fix
    assert kept == other, "only a crash is the emulation's"
