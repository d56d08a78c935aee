"""The ROCm base's base-level smoke test against fakes: the HIP probe's output read (smoke/hip.py),
its verdict (no device: gpu-skipped, never passed; a failing hiprtc: failed), the code objects read
by fit/offload.py, the measured AMD fit, the result file, and the runner on the fake engine."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path
from typing import Any

import pytest

from builder.engine.port import ExecResult
from builder.fit import offload
from builder.model import results
from builder.model.plan import Base
from builder.model.results import HipCheck
from builder.probes import hip_base
from builder.smoke import base as base_smoke
from builder.smoke import hip
from builder.util.errors import UserError
from tests.fake_engine import FakeContainer, FakeEngine

ROCM = Base("rocm5.7-debian13", "rocm", "debian13", version="5.7", bootstrap="debootstrap", packages=("libamdhip64-5", "librocblas0"))
MACH = {"gfx90a": 0x3F, "gfx942": 0x4C, "gfx1100": 0x41, "gfx906": 0x2F, "gfx908": 0x30}


def code_object(target: str) -> bytes:
    """A bare AMDGPU ELF header (code object V4) naming `target`: what hiprtc returns, cut to its header."""
    head = bytearray(64)
    head[0:4], head[4], head[5], head[7], head[8] = b"\x7fELF", 2, 1, 64, 2
    struct.pack_into("<H", head, 18, offload.EM_AMDGPU)
    struct.pack_into("<I", head, 48, MACH[target])
    return bytes(head)


def probe_output(
    *, compiled: dict[str, str] | None = None, failing: tuple[str, ...] = (), devices: dict[str, Any] | None = None, hip_loads: bool = True
) -> str:
    """What probes/hip_base.py prints; `compiled`: target asked -> target its code object holds."""
    compiled = {t: t for t in hip.TARGETS} if compiled is None else compiled
    checks = [hip_base.check("hip-runtime", hip_loads, "libamdhip64.so.5 loaded"), hip_base.check("rocblas", True, "rocBLAS 2.47.0")]
    checks += [
        hip_base.check(f"hiprtc {t}", t not in failing, "compiled" if t not in failing else "hiprtcCompileProgram returned 6")
        for t in hip.TARGETS
    ]
    code = {asked: base64.b64encode(code_object(held)).decode() for asked, held in compiled.items() if asked not in failing}
    found = {"error": 100, "name": "hipErrorNoDevice", "count": 0} if devices is None else devices
    confinement = {"uid": 65534, "interfaces": ["lo"]}
    return json.dumps(
        {"schema": 1, "checks": checks, "code_objects": code, "devices": found if hip_loads else None, "confinement": confinement}
    )


def test_no_device_is_gpu_skipped_never_passed() -> None:
    checks = hip.parse(probe_output())
    assert [c.name for c in checks] == ["hip-runtime", "rocblas", *(f"hiprtc {t}" for t in hip.TARGETS), "hip-device-count", "locked-down"]
    assert all(c.ok for c in checks), checks
    assert hip.verdict(checks) == "gpu-skipped"
    assert "holding gfx942" in next(c.detail for c in checks if c.name == "hiprtc gfx942")  # read by fit/offload.py
    assert "hipErrorNoDevice (100)" in checks[-2].detail and checks[-1].detail == "ran as uid 65534, network interfaces: lo"


def test_a_failing_hiprtc_fails() -> None:
    checks = hip.parse(probe_output(failing=("gfx942",)))
    bad = [c for c in checks if not c.ok]
    assert [c.name for c in bad] == ["hiprtc gfx942"] and "returned 6" in bad[0].detail
    assert hip.verdict(checks) == "failed"


def test_a_code_object_for_another_target_fails() -> None:
    checks = hip.parse(probe_output(compiled={"gfx90a": "gfx906", "gfx942": "gfx942", "gfx1100": "gfx1100"}))
    bad = [c for c in checks if not c.ok]
    assert [c.name for c in bad] == ["hiprtc gfx90a"] and "holds gfx906, not gfx90a" in bad[0].detail
    assert hip.verdict(checks) == "failed"


def test_a_compile_without_its_code_object_or_with_a_broken_one_fails() -> None:
    output = json.loads(probe_output())
    del output["code_objects"]["gfx1100"]
    output["code_objects"]["gfx90a"] = base64.b64encode(b"not an ELF file at all, 64 bytes long or more......................").decode()
    checks = {c.name: c for c in hip.parse(json.dumps(output))}
    assert not checks["hiprtc gfx1100"].ok and "no code object" in checks["hiprtc gfx1100"].detail
    assert not checks["hiprtc gfx90a"].ok and "unreadable" in checks["hiprtc gfx90a"].detail


def test_a_target_the_probe_never_tried_fails() -> None:
    output = json.loads(probe_output())
    output["checks"] = [c for c in output["checks"] if c["name"] != "hiprtc gfx1100"]
    checks = hip.parse(json.dumps(output))
    assert [c.name for c in checks if not c.ok] == ["hiprtc gfx1100"]


@pytest.mark.parametrize(
    ("devices", "ok", "said"),
    [
        ({"error": 100, "name": "hipErrorNoDevice", "count": 0}, True, "no device"),
        ({"error": 0, "name": "hipSuccess", "count": 0}, True, "no device"),
        ({"error": 0, "name": "hipSuccess", "count": 2}, False, "2 device(s) in a container given no GPU"),
        ({"error": 35, "name": "hipErrorInsufficientDriver", "count": 0}, False, "not hipErrorNoDevice"),
    ],
)
def test_the_device_call(devices: dict[str, Any], ok: bool, said: str) -> None:
    checks = hip.parse(probe_output(devices=devices))
    assert checks[-2].ok is ok and said in checks[-2].detail
    assert hip.verdict(checks) == ("gpu-skipped" if ok else "failed")


def test_a_runtime_that_does_not_load_fails_and_asks_no_device() -> None:
    checks = hip.parse(probe_output(hip_loads=False))
    assert hip.verdict(checks) == "failed"
    assert checks[-2] == HipCheck("hip-device-count", False, "not asked: the HIP runtime did not load")


@pytest.mark.parametrize(
    ("seen", "ok"),
    [
        ({"uid": 0, "interfaces": ["lo"]}, False),
        ({"uid": 1000, "interfaces": ["eth0", "lo"]}, False),
        ({"uid": 1000, "interfaces": []}, True),
    ],
)
def test_a_container_as_root_or_on_a_network_fails(seen: dict[str, Any], ok: bool) -> None:
    output = json.loads(probe_output())
    output["confinement"] = seen
    checks = hip.parse(json.dumps(output))
    assert checks[-1].name == "locked-down" and checks[-1].ok is ok
    assert hip.verdict(checks) == ("gpu-skipped" if ok else "failed")


@pytest.mark.parametrize("bad", ["", "[]", '{"schema": 2}', '{"schema": 1, "checks": [{"name": 1}], "code_objects": {}}'])
def test_output_of_the_wrong_shape_is_refused(bad: str) -> None:
    with pytest.raises(Exception, match="probes/hip_base.py"):
        hip.parse(bad)


def test_no_checks_never_pass() -> None:
    assert hip.verdict(()) == "failed"


def test_the_measured_fit_from_the_code_object_scan() -> None:
    scan = {
        "libraries": [
            {"path": "librocblas.so.0.1", "root": "/usr/lib/x86_64-linux-gnu", "targets": [["gfx1030", 65], ["gfx90a", 65]]},
            {
                "path": "rocblas/2.47.0/library/Kernels.so-000-gfx90a-xnack+.hsaco",
                "root": "/usr/lib/x86_64-linux-gnu/",
                "targets": [["gfx90a:xnack+", 1]],
            },
        ]
    }
    fit = hip.amd_fit(json.dumps(scan), "5.7")
    assert fit.targets == ("gfx90a", "gfx1030") and fit.rocm == "5.7"
    assert fit.libraries[1].path == "/usr/lib/x86_64-linux-gnu/rocblas/2.47.0/library/Kernels.so-000-gfx90a-xnack+.hsaco"
    with pytest.raises(Exception, match="not \\[target, count\\] rows"):
        hip.amd_fit(json.dumps({"libraries": [{"path": "x", "root": "/", "targets": [["gfx90a"]]}]}), "5.7")


def scan_output() -> bytes:
    return json.dumps(
        {"libraries": [{"path": "librocblas.so.0.1", "root": "/usr/lib/x86_64-linux-gnu", "targets": [["gfx90a", 3]]}]}
    ).encode()


def fake_engine(probe: str, probe_rc: int = 0) -> FakeEngine:
    engine = FakeEngine()
    engine.add_image("sha256:rocmbase", ROCM.local_tag, labels={"io.builder.recipe-hash": "sha256:recipe"})

    def answer(container: FakeContainer, command: tuple[str, ...]) -> ExecResult:
        if command[-1] == "/usr/lib/x86_64-linux-gnu":
            return ExecResult(0, scan_output(), b"")
        return ExecResult(probe_rc, probe.encode(), b"Traceback ...\nOSError: boom" if probe_rc else b"")

    engine.exec_result = answer
    return engine


def test_the_runner_locks_the_container_down_and_writes_the_result(tmp_path: Path) -> None:
    engine = fake_engine(probe_output())
    result = base_smoke.smoke_base(engine, ROCM, tmp_path)
    [container] = engine.created
    assert container.spec.user == "65534:65534" and container.spec.image == ROCM.local_tag  # never root
    assert not container.spec.gpus and not container.spec.devices
    assert container.execs[0][-len(hip.TARGETS) :] == hip.TARGETS and container.execs[0][4:7] == ("python3", "-I", "-c")
    assert result.verdict == "gpu-skipped" and not result.gpu.attached
    assert result.content_hash == "sha256:recipe" and result.image_id == "sha256:rocmbase"
    assert result.amd_fit is not None and result.amd_fit.targets == ("gfx90a",)
    loaded = results.load(tmp_path, ROCM.name)
    assert loaded == result  # read back through the same types
    assert json.loads((tmp_path / ROCM.name / "hip-probe.json").read_text())["rc"] == 0


def test_a_probe_that_crashes_fails_with_its_last_line(tmp_path: Path) -> None:
    result = base_smoke.smoke_base(fake_engine("", probe_rc=1), ROCM, tmp_path)
    assert result.verdict == "failed" and result.failures == ("hip-probe: the HIP probe exited 1: OSError: boom",)
    assert results.load(tmp_path, ROCM.name) == result


def test_a_result_edited_to_passed_is_refused(tmp_path: Path) -> None:
    result = base_smoke.smoke_base(fake_engine(probe_output()), ROCM, tmp_path)
    forged = {**result.to_json(), "verdict": "passed", "gpu": {"attached": True, "reason": "edited"}}
    with pytest.raises(UserError, match="a base never passes"):
        results.from_json(forged, "x.json")


def test_only_a_bootstrapped_rocm_base_has_a_base_smoke_test(tmp_path: Path) -> None:
    assert base_smoke.has_smoke_test(ROCM)
    cpu = Base("local-debian12", "cpu", "debian12", bootstrap="debootstrap")
    assert not base_smoke.has_smoke_test(cpu)
    with pytest.raises(UserError, match="only a bootstrapped ROCm base"):
        base_smoke.smoke_base(FakeEngine(), cpu, tmp_path)


# -- the use-case and the report --------------------------------------------------------------------


def test_the_report_shows_each_base_test(tmp_path: Path) -> None:
    from builder.report.html import render_html
    from builder.report.markdown import render_markdown
    from builder.report.model import Report, base_rows

    good = base_smoke.smoke_base(fake_engine(probe_output()), ROCM, tmp_path / "a")
    bad = base_smoke.smoke_base(fake_engine(probe_output(failing=("gfx1100",))), ROCM, tmp_path / "b")
    rows = base_rows({"rocm5.7-debian13": good, "other": bad, "never": None})
    assert [(r.base, r.status) for r in rows] == [("rocm5.7-debian13", "gpu-skipped"), ("other", "failed"), ("never", "not-built")]
    assert rows[0].checks == "7/7 HIP checks passed" and rows[0].runs_on == "gfx90a"
    assert rows[1].checks == "6/7 HIP checks passed" and rows[1].detail.startswith("hiprtc gfx1100: hiprtcCompileProgram returned 6")
    assert "builder test --base never" in rows[2].detail
    report = Report(rows=(), bases=(), stacks=(), base_tests=rows)
    assert "| rocm5.7-debian13 | gpu-skipped | 7/7 HIP checks passed | gfx90a |" in render_markdown(report)
    assert 'data-base="other"' in render_html(report) and "## Bases tested at base level" not in render_markdown(Report((), (), ()))


def test_the_use_case_refuses_a_base_without_a_base_test(tmp_path: Path) -> None:
    from builder.usecases.test import base_to_test
    from builder.workspace import Workspace

    ws = Workspace(Path(__file__).resolve().parents[1] / "matrix.yaml")
    assert base_to_test(ws, "rocm5.7-debian13").packages == ("libamdhip64-5", "librocblas0")
    with pytest.raises(UserError, match="has no base-level smoke test in .*bases with one \\(bootstrapped ROCm bases\\): rocm5.7-debian13"):
        base_to_test(ws, "local-debian12")
    with pytest.raises(UserError, match="--base nope: the base is not in"):
        base_to_test(ws, "nope")


def test_the_use_case_bootstraps_then_tests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.engine import bootstrap
    from builder.usecases.test import TestOptions, test_base
    from builder.workspace import Workspace

    (tmp_path / "matrix.yaml").write_text((Path(__file__).resolve().parents[1] / "matrix.yaml").read_text(encoding="utf-8"))
    ws = Workspace(tmp_path / "matrix.yaml")
    engine = fake_engine(probe_output())
    made: list[str] = []
    monkeypatch.setattr(bootstrap, "ensure_base", lambda engine, base, log: made.append(base.local_tag))
    result = test_base(ws, "rocm5.7-debian13", TestOptions(timeout_s=60), log=print, connect=lambda timeout=600: engine)
    assert made == [ROCM.local_tag] and result.verdict == "gpu-skipped" and engine.closed
    assert results.load(ws.store.results, "rocm5.7-debian13") == result
    assert engine.created[0].spec.command == ("sleep", "120")
