"""One CUDA per image, and every claim an image makes read from its lock.

The first half re-reads every committed lock on its own (no builder code decides what a lock's
CUDA is) and compares it with what the image says: the Dockerfile's NVIDIA_REQUIRE_CUDA and labels,
image.json (the plan JSON entry) and its compute-capability floor. The second half pins the
mechanisms: the component table, the constraints made from it, `builder lock`'s refusal, the
`cuda_exceptions` policy and the rules that follow from one CUDA per image.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from builder.compat import cuda_components
from builder.compat.rules import cuda as rules_cuda
from builder.compat.rules import decide, table
from builder.lock.claims import cc_floor, refusals
from builder.lock.files import parse
from builder.model.plan import Base, ImageSpec
from builder.model.sources import Sources
from builder.spec.matrix import load_matrix
from builder.usecases import lock as locking
from builder.util.errors import UserError
from builder.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "images"
LOCKED = sorted(p.parent.name for p in IMAGES.glob("*/requirements.lock"))
# Versioned with the toolkit (their X.Y is the CUDA minor), spelled out here, independently of builder.
TOOLKIT = re.compile(
    r"^(?:cuda-toolkit|nvidia-(?:cuda-runtime|cuda-nvrtc|cuda-nvcc|nvvm|cuda-crt|cuda-cupti|nvjitlink|nvfatbin|nvptxcompiler)(?:-cu\d+)?)$"
)
CUDNN_DROPS_OLD_GPUS = (9, 11)  # cuDNN 9.11 dropped Maxwell, Pascal and Volta (compat.yaml cuda.cudnn_cc, S25)


def _pins(image: str) -> dict[str, str]:
    lock = parse((IMAGES / image / "requirements.lock").read_text(encoding="utf-8"))
    assert lock is not None, image
    return dict(lock.pins)


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _labels(dockerfile: str) -> dict[str, str]:
    return dict(re.findall(r'(io\.builder\.[a-z-]+)="([^"]*)"', dockerfile))


def _exceptions() -> list[str]:
    ws = Workspace(ROOT / "matrix.yaml")
    return [s.id for s in ws.decided.images if s.cuda_exception]


@pytest.fixture(scope="module")
def exceptions() -> list[str]:
    return _exceptions()


def test_there_are_locks_to_check() -> None:
    assert len(LOCKED) >= 30


@pytest.mark.parametrize("image", LOCKED)
def test_every_claim_about_an_image_agrees_with_its_lock(image: str, exceptions: list[str]) -> None:
    entry = json.loads((IMAGES / image / "image.json").read_text(encoding="utf-8"))
    dockerfile = (IMAGES / image / "Dockerfile").read_text(encoding="utf-8")
    labels = _labels(dockerfile)
    pins = _pins(image)
    if entry["base"]["vendor"] != "cuda":
        assert not any(TOOLKIT.match(name) for name in pins), f"{image}: a non-CUDA image locks CUDA toolkit wheels"
        return
    base_minor = _minor(entry["base"]["version"])
    toolkit = {name: version for name, version in pins.items() if TOOLKIT.match(name)}
    runtime = next((v for n, v in pins.items() if n.startswith("nvidia-cuda-runtime")), None)
    loaded = _minor(runtime) if runtime else base_minor
    # one CUDA: every toolkit wheel on one minor, the base's unless matrix.yaml states the exception
    assert {_minor(v) for v in toolkit.values()} <= {loaded}, f"{image}: toolkit wheels on several minors: {toolkit}"
    if image not in exceptions:
        assert loaded == base_minor, f"{image}: the lock loads CUDA {loaded}, the base is CUDA {base_minor}"
    # NVIDIA_REQUIRE_CUDA, the accelerator and its label: the CUDA the image loads
    require = re.search(r'NVIDIA_REQUIRE_CUDA="cuda>=(\d+\.\d+)', dockerfile)
    assert require is not None and require.group(1) == loaded, image
    assert _minor(entry["accelerator"]["version"]) == loaded
    assert _minor(labels["io.builder.accelerator-version"]) == loaded
    # one driver number: Table 3's for the CUDA release the image carries, the lock's update release
    # (its cudart names it: 13.0.96 is 13.0.2), else the base's patch release; none when the table
    # does not list the lock's update (13.2.86 is 13.2.2): no other release's number stands in
    releases = dict(table().cuda_toolkits)
    if runtime is not None and _minor(runtime) == loaded:
        release = rules_cuda.update_release(runtime, table())
        assert entry["accelerator"].get("min_driver") == (releases[release] if release else None), image
    elif "." in entry["accelerator"]["version"][len(loaded) :]:  # a patch release: Table 3 names its driver
        assert entry["accelerator"].get("min_driver") == releases.get(entry["accelerator"]["version"]), image
    # cuDNN, cuBLAS, NCCL, the runtime: plan JSON and labels say what the lock pins
    for library, prefix in (
        ("cudnn", "nvidia-cudnn-cu"),
        ("nccl", "nvidia-nccl-cu"),
        ("cublas", "nvidia-cublas"),
        ("cuda-runtime", "nvidia-cuda-runtime"),
    ):
        locked = next((v for n, v in pins.items() if n.startswith(prefix)), None)
        assert entry["libraries"].get(library) == locked, (image, library)
        assert labels.get(f"io.builder.{library}") == locked, (image, library)
    cudnn = next((v for n, v in pins.items() if n.startswith("nvidia-cudnn-cu")), None)
    for framework, claimed in entry["cudnn"].items():
        assert cudnn is None or claimed == cudnn, f"{image}: the plan says {framework}'s cuDNN is {claimed}, the lock pins {cudnn}"
    # the compute-capability floor follows the locked cuDNN
    if cudnn is not None and tuple(int(p) for p in cudnn.split(".")[:2]) >= CUDNN_DROPS_OLD_GPUS:
        assert entry.get("cc_min") is not None and float(entry["cc_min"]) >= 7.5, (
            f"{image}: cuDNN {cudnn} needs CC >= 7.5, the plan says {entry.get('cc_min')}"
        )
    assert labels.get("io.builder.cc-min") == entry.get("cc_min"), image


def test_an_independent_reread_finds_no_cuda_wheel_outside_its_minor(exceptions: list[str]) -> None:
    ws = Workspace(ROOT / "matrix.yaml")
    broken = {spec.id: refusals(spec, spec.lock, table()) for spec in ws.decided.images if spec.lock is not None}
    assert {image: found for image, found in broken.items() if found} == {}
    assert set(exceptions) == {"torch2.5.1-cu124-on-cu128-py3.12-ubuntu24.04", *(s for s in exceptions if "-on-" in s)}


# -- the component table and what is made from it ----------------------------------------------------

OLD_JAX_LOCK_PINS = (  # jax0.10.2-cu124's lock before this change: CUDA 12.9 wheels on a 12.4 base
    ("jax-cuda12-plugin", "0.10.2"),
    ("nvidia-cublas-cu12", "12.9.3.13"),
    ("nvidia-cuda-nvcc-cu12", "12.9.86"),
    ("nvidia-cuda-runtime-cu12", "12.9.79"),
    ("nvidia-cudnn-cu12", "9.28.0.42"),
    ("nvidia-cufft-cu12", "11.4.1.4"),
)


def test_toolkit_wheels_of_a_newer_minor_are_found() -> None:
    found = cuda_components.problems(OLD_JAX_LOCK_PINS, "12.4", table().toolkit_components)
    assert any("nvidia-cuda-runtime-cu12 12.9.79 is CUDA 12.9, the image is CUDA 12.4" in p for p in found)
    assert any(p.startswith("nvidia-cublas-cu12 12.9.3.13 ships with CUDA 12.9") for p in found)
    assert any(p.startswith("nvidia-cufft-cu12 11.4.1.4 ships with CUDA 12.9") for p in found)
    assert not any("cudnn" in p for p in found)  # cuDNN follows no toolkit minor


def test_a_cuda_13_0_update_may_ship_cublas_13_1() -> None:
    pins = (
        ("nvidia-cublas", "13.1.1.3"),
        ("nvidia-cuda-runtime", "13.0.96"),
        ("nvidia-cudnn-cu13", "9.24.0.43"),
        ("cuda-toolkit", "13.0.3.0"),
    )
    assert cuda_components.problems(pins, "13.0", table().toolkit_components) == []
    assert cuda_components.problems((("nvidia-cublas", "13.2.0.9"),), "13.0", table().toolkit_components)  # 13.1's


def test_a_library_built_for_another_major_is_found() -> None:
    found = cuda_components.problems((("nvidia-cudnn-cu12", "9.10.2.21"),), "13.0", table().toolkit_components)
    assert found == ["nvidia-cudnn-cu12 9.10.2.21 is built for CUDA 12, the image is CUDA 13.0"]


def test_constraints_hold_every_component_between_its_minor_and_the_next() -> None:
    made = cuda_components.constraints("12.4", table().toolkit_components)
    assert not isinstance(made, str)
    assert "cuda-toolkit>=12.4.0,<12.5.0" in made
    assert "nvidia-cuda-runtime-cu12>=12.4.99,<12.5.39" in made
    assert "nvidia-cublas-cu12>=12.4.2.65,<12.5.2.13" in made
    assert "nvidia-cublas>=13.0.0.19,<13.2.0.9" in cuda_components.constraints("13.0", table().toolkit_components)
    newest = table().toolkit_components[-1][0]
    assert "cannot be capped" in str(cuda_components.constraints(newest, table().toolkit_components))


def test_every_cuda_image_on_a_known_minor_is_constrained_to_it() -> None:
    """Not only the CUDA-from-wheels bases: the nvidia/cuda ones too (they were not, and locked 12.9/13.5)."""
    ws = Workspace(ROOT / "matrix.yaml")
    for spec in ws.decided.images:
        if spec.base.vendor == "cuda" and spec.base.version and not spec.cuda_exception and _minor(spec.base.version) != "11.8":
            assert any(c.startswith(f"cuda-toolkit>={_minor(spec.base.version)}.0,") for c in spec.constraints), spec.id


# -- builder lock refuses a second CUDA -------------------------------------------------------------


def _resolved(spec: ImageSpec, pins: tuple[tuple[str, str], ...]) -> str:
    """What uv would print for `spec`: its top-level pins `via -r requirements.in`, then `pins` as
    their dependencies (sorted, hashed, each reachable), so only the CUDA content is under test."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from builder.lock.target import target_for

    top = {}
    for line in target_for(spec, table()).requirements:
        requirement = Requirement(line)
        top[str(canonicalize_name(requirement.name))] = next(iter(requirement.specifier)).version
    first = sorted(top)[0]
    rows = {name: (version, "-r requirements.in") for name, version in top.items()}
    rows.update({name: (version, first) for name, version in pins if name not in top})
    return "".join(
        f"{name}=={version} \\\n    --hash=sha256:{'a' * 64}\n    # via {via}\n" for name, (version, via) in sorted(rows.items())
    )


def test_lock_refuses_a_lock_that_leaves_the_base_minor_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    ws = Workspace(tmp_path / "matrix.yaml")
    spec = next(s for s in ws.decided.images if s.id == "jax0.4.35-cu124-py3.11-ubuntu22.04")
    monkeypatch.setattr(locking, "resolve", lambda *a, **k: _resolved(spec, OLD_JAX_LOCK_PINS))
    monkeypatch.setattr(locking, "uv_binary", lambda: "uv")
    with pytest.raises(UserError) as caught:
        locking.lock_images(ws, (spec,), locking.LockOptions(sources=Sources(use_host=False)), lambda r: None)
    message = str(caught.value)
    assert re.match(r"\S*matrix\.yaml:\d+: ", message) and "\n" not in message
    assert "jax0.4.35-cu124-py3.11-ubuntu22.04" in message and "ships with CUDA 12.9, the image is CUDA 12.4" in message
    assert "cuda_exceptions" in message
    assert not (tmp_path / "images").exists()


def test_lock_writes_a_lock_on_the_base_minor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    ws = Workspace(tmp_path / "matrix.yaml")
    spec = next(s for s in ws.decided.images if s.id == "jax0.4.35-cu124-py3.11-ubuntu22.04")
    good = (("nvidia-cuda-runtime-cu12", "12.4.127"), ("nvidia-cublas-cu12", "12.4.5.8"), ("nvidia-cudnn-cu12", "9.10.2.21"))
    monkeypatch.setattr(locking, "resolve", lambda *a, **k: _resolved(spec, good))
    monkeypatch.setattr(locking, "uv_binary", lambda: "uv")
    results = locking.lock_images(ws, (spec,), locking.LockOptions(sources=Sources(use_host=False), upgrade=True), lambda r: None)
    assert [r.status for r in results] == ["locked"]
    assert (tmp_path / "images" / spec.id / "requirements.lock").is_file()


def test_a_stated_exception_lets_the_lock_through_and_the_claims_follow_it(tmp_path: Path) -> None:
    ws = Workspace(ROOT / "matrix.yaml")
    spec = next(s for s in ws.decided.images if s.id == "torch2.5.1-cu124-on-cu128-py3.12-ubuntu24.04")
    assert spec.cuda_exception and spec.lock is not None and spec.constraints == ()
    assert refusals(spec, spec.lock, table()) == []
    assert spec.accelerator.version == "12.4" and spec.accelerator.require_cuda == "cuda>=12.4"
    assert spec.accelerator.min_driver == dict(table().cuda_toolkits)["12.4.1"]  # its cudart 12.4.127 is 12.4 Update 1
    assert any("two CUDA user spaces" in w for w in ws.decided.warnings)
    # the same lock, without the exception: constrained to 12.8, and refused
    text = (ROOT / "matrix.yaml").read_text(encoding="utf-8")
    (tmp_path / "matrix.yaml").write_text(text.split("\ncuda_exceptions:")[0] + "\n", encoding="utf-8")
    bare = next(s for s in Workspace(tmp_path / "matrix.yaml").decided.images if s.id == spec.id)
    assert bare.cuda_exception is None and any(c.startswith("cuda-toolkit>=12.8.0,") for c in bare.constraints)
    assert any("nvidia-cuda-runtime-cu12 12.4.127 is CUDA 12.4, the image is CUDA 12.8" in p for p in refusals(bare, spec.lock, table()))


@pytest.mark.parametrize(
    ("entry", "complaint"),
    [
        ('  - {reason: "x"}\n', "cuda_exceptions entry needs 'select:'"),
        ('  - {select: "stack=torch"}\n', "needs 'reason:'"),
        ('  - {select: "flavour=x", reason: "y"}\n', "cuda_exceptions.select: unknown select key 'flavour'"),
    ],
)
def test_bad_cuda_exceptions_are_one_line_errors(tmp_path: Path, small_matrix: str, entry: str, complaint: str) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(small_matrix + "cuda_exceptions:\n" + entry, encoding="utf-8")
    with pytest.raises(UserError, match=complaint) as caught:
        load_matrix(path)
    assert caught.value.line is not None


# -- the floors and the rules that follow ------------------------------------------------------------


def test_the_compute_capability_floor_follows_the_locked_cudnn() -> None:
    """gpu_arch.yaml says jax cuda12 runs from 5.2; with cuDNN 9.28 locked it needs 7.5 (it said 5.2)."""
    ws = Workspace(ROOT / "matrix.yaml")
    spec = next(s for s in ws.decided.images if s.id == "jax0.10.2-cu128-py3.12-ubuntu24.04")
    assert spec.lock is not None and not any(c.startswith("nvidia-cudnn") for c in spec.constraints)
    assert tuple(int(p) for p in dict(spec.lock.pins)["nvidia-cudnn-cu12"].split(".")[:2]) >= CUDNN_DROPS_OLD_GPUS
    assert cc_floor(spec, table()) == "7.5"
    assert cc_floor(dataclasses.replace(spec, lock=None), table()) == "5.2"  # the kernels alone


def test_keep_older_gpus_holds_cudnn_below_the_release_that_dropped_them() -> None:
    ws = Workspace(ROOT / "matrix.yaml")
    spec = next(s for s in ws.decided.images if s.id == "jax0.4.35-cu124-py3.11-ubuntu22.04")
    assert "nvidia-cudnn-cu12<9.11" in spec.constraints
    assert spec.lock is not None and tuple(int(p) for p in dict(spec.lock.pins)["nvidia-cudnn-cu12"].split(".")[:2]) < (9, 11)
    assert cc_floor(spec, table()) == "5.2"


@pytest.mark.parametrize("key", ["keep_older_gpus", "cuda_exceptions"])
def test_a_policy_without_a_reason_is_a_one_line_error(tmp_path: Path, small_matrix: str, key: str) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(small_matrix + f"{key}:\n" + '  - {select: "stack=torch"}\n', encoding="utf-8")
    with pytest.raises(UserError, match=f"an {key} entry needs 'reason:'") as caught:
        load_matrix(path)
    assert caught.value.line is not None


def test_tensorflow_on_a_base_older_than_its_cuda_wheels_is_not_planned() -> None:
    """It was planned with a warning naming CUDA 12.5 while its lock loaded 12.9: two CUDAs."""
    base = Base("cuda12.4-ubuntu22.04", "cuda", "ubuntu22.04", "12.4.1", image="nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04")
    verdict = decide("tensorflow", base, "3.11", "2.21.0", table())
    assert not verdict.ok and "one CUDA per image" in verdict.reason


def test_the_report_and_the_catalog_record_name_the_cuda_the_lock_loads() -> None:
    """They named the base's CUDA (12.8.1) for an image whose lock loads 12.4."""
    from builder.publish.publisher import measured
    from builder.report.model import build_report
    from tests.catalog_fixtures import smoke

    ws = Workspace(ROOT / "matrix.yaml")
    spec = next(s for s in ws.decided.images if s.id == "torch2.5.1-cu124-on-cu128-py3.12-ubuntu24.04")
    report = build_report(ws.decided, (spec,), {}, (), {})
    assert next(r for r in report.rows if r.id == spec.id).accelerator == "CUDA 12.4"
    assert measured(spec, smoke(spec.id)).accelerator.version == "12.4"


def test_the_smoke_check_accepts_the_cuda_the_image_declares() -> None:
    """The in-container check compared NVIDIA_REQUIRE_CUDA with the base's CUDA: an exception image
    (which declares its lock's 12.4 on a 12.8 base) failed it."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    from builder.model import image_entry
    from builder.smoke.checks.test_image import test_accelerator_environment as check

    path = IMAGES / "torch2.5.1-cu124-on-cu128-py3.12-ubuntu24.04" / "image.json"
    entry = image_entry.from_json(json.loads(path.read_text(encoding="utf-8")), str(path))
    require = entry.accelerator.require_cuda
    assert require is not None
    done: Future[object] = Future()
    done.set_result(
        SimpleNamespace(stdout=f"NVIDIA_VISIBLE_DEVICES=all\nNVIDIA_DRIVER_CAPABILITIES=compute,utility\nNVIDIA_REQUIRE_CUDA={require}\n")
    )
    check({"environment": done}, entry)
    assert require.startswith("cuda>=12.4") and entry.base.version == "12.8.1"


def test_lock_check_finds_a_committed_lock_with_a_second_cuda(tmp_path: Path) -> None:
    """Its inputs may be current (an 11.8 base has no constraints to change): the check reads the pins too."""
    from builder.lock.files import lock_text
    from builder.lock.target import target_for

    ws = Workspace(ROOT / "matrix.yaml")
    spec = next(s for s in ws.decided.images if s.id == "cupy13.6.0-cu118-py3.11-ubuntu22.04")
    target = target_for(spec, table())
    bad = parse(
        lock_text(
            spec.id,
            target.inputs,
            target.python,
            target.platform,
            _resolved(spec, (("nvidia-cuda-nvrtc-cu12", "12.9.86"),)),
        )
    )
    assert bad is not None
    [result] = locking.check((dataclasses.replace(spec, lock=bad),))
    assert result.status == "stale" and "nvidia-cuda-nvrtc-cu12 12.9.86 is built for CUDA 12" in result.detail
    [fine] = locking.check((spec,))
    assert fine.status == "current"


def test_an_unlocked_exception_declares_the_cuda_its_wheel_was_built_for() -> None:
    """torch cu126 on the 12.8 base (download.pytorch.org, unlocked) said cuda>=12.8 while it loads 12.6."""
    ws = Workspace(ROOT / "matrix.yaml")
    spec = next(s for s in ws.decided.images if s.id == "torch2.14.1-cu126-on-cu128-py3.12-ubuntu24.04")
    assert spec.lock is None and spec.cuda_exception
    assert spec.accelerator.version == "12.6" and spec.accelerator.require_cuda == "cuda>=12.6"
    dockerfile = (IMAGES / spec.id / "Dockerfile").read_text(encoding="utf-8")
    assert 'NVIDIA_REQUIRE_CUDA="cuda>=12.6"' in dockerfile


def test_the_last_minor_of_a_major_is_capped_by_the_next_major() -> None:
    """CUDA 12.9 has no 12.10: its -cu12 wheels cannot leave 12.x, and cuda-toolkit stops below 13.0."""
    made = cuda_components.constraints("12.9", table().toolkit_components)
    assert not isinstance(made, str) and made[0] == "cuda-toolkit>=12.9.0,<13.0.0"
    assert "nvidia-cublas-cu12>=12.9.0.13" in made


def test_the_cli_refuses_in_one_line_with_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Any) -> None:
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    spec = next(s for s in Workspace(ROOT / "matrix.yaml").decided.images if s.id == "jax0.4.35-cu124-py3.11-ubuntu22.04")
    monkeypatch.setattr(locking, "resolve", lambda *a, **k: _resolved(spec, OLD_JAX_LOCK_PINS))
    monkeypatch.setattr(locking, "uv_binary", lambda: "uv")
    result = cli("--matrix", str(tmp_path / "matrix.yaml"), "lock", "--select", "id=jax0.4.35-cu124-*", "--no-host-settings")
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "second CUDA" in lines[0] and "nothing written" in lines[0]
    assert "Traceback" not in result.output
    assert not (tmp_path / "images").exists()


def test_doctor_judges_the_driver_against_the_cuda_the_lock_loads() -> None:
    """A 560 driver runs torch 2.5.1's CUDA 12.4 wheels on the 12.8 base; doctor warned it was older
    than the 570 CUDA 12.8.1 wants (the base's, not what the image loads)."""
    from builder.host import doctor
    from builder.host.facts import AmdInfo, EngineFacts, HostInfo, NvidiaGpu, NvidiaInfo

    ws = Workspace(ROOT / "matrix.yaml")
    spec = next(s for s in ws.decided.images if s.id == "torch2.5.1-cu124-on-cu128-py3.12-ubuntu24.04")
    host = HostInfo(
        engine=EngineFacts(reachable=True, version="27.1.1", runtimes=("nvidia",)),
        nvidia=NvidiaInfo(status="ok", driver="560.35.03", gpus=(NvidiaGpu(0, "NVIDIA H200", "9.0", 143771),), device_nodes=True),
        amd=AmdInfo(),
    )
    got = doctor.image_verdict(host, spec)
    assert got.status == "ok", got.reason
    assert "driver 560.35.03 reports CUDA 12.6, which meets NVIDIA_REQUIRE_CUDA cuda>=12.4" in got.reason, got.reason
