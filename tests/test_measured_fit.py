"""The measured fit (issue 17): the record, the scan's output read into it, and `builder fit` with it.

The fixtures in tests/fixtures/fit/ are real: fit/scan.py's output inside the built CUDA-from-wheels
images, by their own Python in a read-only container without network (tests/integration/
test_wheels_slice.py measures them again and compares each library with NVIDIA's cuobjdump).
"""

from __future__ import annotations

import ast
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from builder.catalog.records import KnownGood, MeasuredAccelerator, RecordError
from builder.catalog.records import from_json as record_from_json
from builder.catalog.store import Catalog
from builder.compat.rules import table
from builder.engine.port import ExecResult
from builder.fit import measure, rule, scan
from builder.fit.host import FitHost
from builder.fit.runs_on import RunsOn, runs_on
from builder.model import measured_fit, results
from builder.model.measured_fit import MeasuredFit
from builder.usecases.fit import judge
from builder.util.errors import RunFailure, UserError
from tests.catalog_fixtures import record, smoke
from tests.conftest import RunCli

FIXTURES = Path(__file__).parent / "fixtures" / "fit"
CU130 = MeasuredAccelerator("cuda", "13.0", cuda="13.0", cudnn="9.15.1")


def scanned(image_id: str, jit: dict[str, bool]) -> MeasuredFit:
    return measure.parse((FIXTURES / f"{image_id}.scan.json").read_text(), jit, table(), 1.0)


TORCH_ID = "torch2.14.1-cu130-py3.11-debian12"
NUMBA_ID = "numba0.68.0-cu130-py3.11-debian12"
TORCH_FIT = scanned(TORCH_ID, {"torch": False})
NUMBA_FIT = scanned(NUMBA_ID, {"numba": True})
CUPY_ID = "cupy14.0.0-cu130-py3.11-debian12"
CUPY_FIT = scanned(CUPY_ID, {"cupy": True})
TF_ID = "tensorflow2.21.0-cu125-py3.11-debian12"
TF_FIT = scanned(TF_ID, {"tensorflow": False})
JAX_ID = "jax0.10.2-cu130-py3.11-debian12"
JAX_FIT = scanned(JAX_ID, {"jax": False})
TORCH215_ID = "torch2.15.0-cu132-py3.11-debian12"
TORCH215_FIT = scanned(TORCH215_ID, {"torch": False})


def nvidia(*ccs: str, driver: str | None = "580.65.06") -> FitHost:
    return FitHost("amd64", "nvidia", ccs, driver)


# --- the scan's output, read ------------------------------------------------------------------


def test_torch_cu130_as_measured_in_its_image() -> None:
    """What the image's libraries say, and why the whole is narrower than libtorch_cuda.so."""
    torch = TORCH_FIT.framework("torch")
    assert torch is not None and not torch.jit
    main = TORCH_FIT.library("torch/lib/libtorch_cuda.so")
    linalg = TORCH_FIT.library("torch/lib/libtorch_cuda_linalg.so")
    assert main is not None and linalg is not None
    # equal to cuobjdump's listing of the same library (tests/fixtures/cuobjdump/, real output)
    assert dict(main.sass) == {
        "sm_75": 475, "sm_80": 475, "sm_86": 475, "sm_89": 1, "sm_90": 475, "sm_90a": 4,
        "sm_100": 475, "sm_100a": 59, "sm_103": 59, "sm_120": 475, "sm_120a": 1, "sm_121a": 1,
    }  # fmt: skip
    assert main.ptx == () and "7.5" in main.runs_on
    assert "sm_75" not in dict(linalg.sass) and "7.5" not in linalg.runs_on
    assert torch.runs_on == ("8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.3", "12.0", "12.1")
    assert len(torch.libraries) == 22 and all(p.startswith(("torch/", "nvidia/")) for p in torch.libraries)
    assert TORCH_FIT.cc_label() == "8.0 8.6 8.7 8.9 9.0 10.0 10.3 12.0 12.1"
    assert TORCH_FIT.driver_floor() == "580.65.06"
    assert TORCH_FIT.driver == measured_fit.DriverNeed(
        "13.0", "580.65.06", "580.65.06", "cuda-compat-13-0", "nvidia/cu13/lib/libcudart.so.13"
    )
    assert TORCH_FIT.jit is not None and TORCH_FIT.jit.version == "13.0" and TORCH_FIT.jit.lowest == "7.5"
    assert "sm_121" in TORCH_FIT.jit.archs and "sm_70" not in TORCH_FIT.jit.archs
    floors = {f.component: f.cc for f in TORCH_FIT.floors}
    assert floors["cudnn"] == floors["cublas"] == floors["nccl"] == "7.5"


def test_nvidia_libraries_impose_their_floor_not_their_fatbin_list() -> None:
    """cuFFT 12's fatbin is one sm_75 stub (cuobjdump says the same): its kernels live elsewhere,
    so an NVIDIA library counts from its lowest SASS on."""
    cufft = TORCH_FIT.library("nvidia/cu13/lib/libcufft.so.12")
    assert cufft is not None and dict(cufft.sass) == {"sm_75": 1}
    assert cufft.runs_on == ("7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")  # fit/rule.py's answer
    torch = TORCH_FIT.library("torch/lib/libtorch_cuda.so")
    assert torch is not None and "11.0" not in torch.runs_on and "12.0" in torch.runs_on, "any other library: exactly its SASS"
    assert rule.nvidia_component("nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9") == "cudnn"
    assert rule.nvidia_component("nvidia/cu13/lib/libcublasLt.so.13") == "cublasLt"
    assert rule.nvidia_component("torch/lib/libtorch_cuda.so") is None


def test_numba_compiles_at_run_time_through_the_bundled_nvrtc() -> None:
    numba = NUMBA_FIT.framework("numba")
    assert numba is not None and numba.jit and numba.libraries == ()
    assert NUMBA_FIT.jit is not None and NUMBA_FIT.jit.lowest == "7.5"
    assert numba.runs_on[0] == "7.5" and "12.1" in numba.runs_on and "7.0" not in numba.runs_on


def test_a_framework_loads_its_own_and_the_shared_libraries_never_another_frameworks() -> None:
    lib = {"path": "", "entries": [[2, 80, 0, 0, 3]]}
    doc = {
        "libraries": [{**lib, "path": "a/liba.so"}, {**lib, "path": "b/libb.so"}, {**lib, "path": "nvidia/x/lib/libx.so.1"}],
        "frameworks": {"a": ["a"], "b": ["b"]},
        "cudart": {},
        "nvrtc": {},
    }
    fit = measure.parse(json.dumps(doc), {"a": False, "b": True}, table(), 0.5)
    a, b = fit.framework("a"), fit.framework("b")
    assert a is not None and a.libraries == ("a/liba.so", "nvidia/x/lib/libx.so.1") and a.runs_on == ("8.0", "8.6", "8.7", "8.9")
    assert b is not None and b.runs_on == ()  # it compiles at run time and the image has no NVRTC
    assert fit.driver is None and fit.jit is None and fit.cc_label() == "none" and fit.driver_floor() is None


@pytest.mark.parametrize(
    ("output", "says"),
    [
        ("not json", "not JSON"),
        ("[]", "the output"),
        (
            '{"libraries": [{"path": "x.so", "entries": [[2, 80]]}], "frameworks": {}, "cudart": {}, "nvrtc": {}}',
            "[kind, sm, flags, code, count]",
        ),
        (
            '{"libraries": [], "frameworks": {}, "cudart": {}, "nvrtc": {"n.so": {"version": "13.0", "archs": ["75"]}}}',
            "archs must be numbers",
        ),
    ],
)
def test_a_scan_output_of_the_wrong_shape_is_one_line(output: str, says: str) -> None:
    with pytest.raises(RunFailure, match="fit scan") as caught:
        measure.parse(output, {}, table(), 0.0)
    assert says in str(caught.value) and "\n" not in str(caught.value)


class _Container:
    def __init__(self, result: ExecResult) -> None:
        self.result = result
        self.commands: list[tuple[str, ...]] = []

    def exec(self, command: Any) -> ExecResult:
        self.commands.append(tuple(command))
        return self.result


def test_measure_runs_the_scan_with_the_images_python_and_reads_it() -> None:
    container = _Container(ExecResult(0, (FIXTURES / f"{TORCH_ID}.scan.json").read_bytes(), b""))
    fit = measure.measure(container, ["torch"], table())  # type: ignore[arg-type]
    (command,) = container.commands
    assert command[:6] == ("timeout", "-s", "KILL", str(measure.TIMEOUT_S), "python", "-I") and command[-1] == "torch"
    assert command[7] == (Path(scan.__file__).read_text())
    assert replace(fit, seconds=1.0) == TORCH_FIT
    failed = _Container(ExecResult(1, b"", b"Traceback...\nOSError: boom\n"))
    with pytest.raises(RunFailure, match="exited 1: OSError: boom"):
        measure.measure(failed, ["torch"], table())  # type: ignore[arg-type]


def test_the_scan_is_stdlib_only_so_any_images_python_runs_it() -> None:
    tree = ast.parse(Path(scan.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_the_scan_reads_a_venv_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The script's own walk, on a folder laid out like site-packages (a real fatbin inside)."""
    site = tmp_path / "site"
    (site / "pkg" / "lib").mkdir(parents=True)
    probe = Path(__file__).parent / "fixtures" / "cuobjdump" / "probe.o"
    (site / "pkg" / "lib" / "libprobe.so").write_bytes(probe.read_bytes())
    (site / "pkg" / "__init__.py").write_text("")
    (site / "pkg" / "lib" / "libnot.so").write_bytes(b"not an elf")
    import sysconfig

    real = sysconfig.get_paths()  # the other keys stay real: coverage, when measuring, asks for them mid-test
    monkeypatch.setattr(sysconfig, "get_paths", lambda *args, **kwargs: {**real, "purelib": str(site), "platlib": str(site)})
    monkeypatch.syspath_prepend(str(site))
    found = scan.main(["pkg", "absent_framework_xyz"])
    libraries = found["libraries"]
    assert isinstance(libraries, list) and [lib["path"] for lib in libraries] == ["pkg/lib/libprobe.so"]
    assert found["frameworks"] == {"pkg": ["pkg"], "absent_framework_xyz": []}
    fit = measure.parse(json.dumps(found), {"pkg": False}, table(), 0.1)
    assert fit.libraries[0].ptx == ("compute_90",) and fit.framework("pkg") is not None


# --- the record: JSON both ways, old files, bad values ---------------------------------------


def fail(what: str) -> UserError:
    return UserError(f"refused: {what}", "results/x.json")


def test_the_record_round_trips() -> None:
    for fit in (TORCH_FIT, NUMBA_FIT, CUPY_FIT, TF_FIT, JAX_FIT, TORCH215_FIT):
        assert measured_fit.from_json(json.loads(json.dumps(fit.to_json())), "fit", fail) == fit


def test_a_smoke_result_carries_it_and_old_results_still_read() -> None:
    result = smoke("torch-x", "gpu-skipped", fit=TORCH_FIT)
    assert results.from_json(json.loads(json.dumps(result.to_json())), "x.json") == result
    old = result.to_json()
    del old["fit"], old["fit_error"]
    assert results.from_json(old, "x.json").fit is None
    failed = replace(result, fit=None, fit_error="measuring the fit in the container exited 1: boom")
    assert results.from_json(json.loads(json.dumps(failed.to_json())), "x.json").fit_error.endswith("boom")


def test_a_catalog_record_carries_it_and_old_records_keep_their_form() -> None:
    with_fit = record("torch-x", accelerator=CU130, frameworks={"torch": "2.14.1"}, fit=TORCH_FIT)
    assert record_from_json(json.loads(json.dumps(with_fit.to_json())), "known-good.json") == with_fit
    old = record("torch-y").to_json()
    assert "fit" not in old and record_from_json(old, "known-good.json").fit is None


def _bad(path: list[Any], value: Any) -> dict[str, Any]:
    doc: Any = json.loads(json.dumps(TORCH_FIT.to_json()))
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return dict(doc)


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ([], "must be an object"),
        (_bad(["libraries"], KeyError), "lacks libraries"),
        (_bad(["extra"], 1), "unknown keys extra"),
        (_bad(["seconds"], -1), "'seconds' must be >= 0"),
        (_bad(["seconds"], "fast"), "seconds"),
        (_bad(["libraries", 0, "sass", "sm_86"], 0), "cubin count >= 1"),
        (_bad(["libraries", 0, "sass", "gfx90a"], 1), "gfx90a"),
        (_bad(["libraries", 0, "ptx"], ["sm_90"]), "not a PTX target"),
        (_bad(["libraries", 0, "runs_on"], ["8"]), "not a compute capability"),
        (_bad(["libraries", 0, "path"], "a\nb"), "one line"),
        (_bad(["frameworks", 0, "libraries"], ["nowhere.so"]), "which is not in 'libraries'"),
        (_bad(["frameworks", 0, "jit"], "no"), "jit"),
        (_bad(["floors", 0, "cc"], "7"), "not a compute capability"),
        (_bad(["jit", "archs"], [75]), "not an architecture"),
        (_bad(["jit", "version"], "latest"), "not a version"),
        (_bad(["driver", "floor"], "new"), "not a version like 580.65.06"),
        (_bad(["driver", "cuda"], KeyError), "lacks cuda"),
    ],
)
def test_a_malformed_fit_is_refused_in_one_line(doc: Any, says: str) -> None:
    with pytest.raises(UserError) as caught:
        measured_fit.from_json(doc, "fit", fail)
    assert says in str(caught.value) and "\n" not in str(caught.value)
    # the same through both readers that hold it, each naming its file
    result = {**smoke("torch-x", "gpu-skipped").to_json(), "fit": doc}
    with pytest.raises(UserError, match=r"^x\.json: not a smoke result this tool wrote: fit"):
        results.from_json(result, "x.json")
    entry = {**record("torch-x").to_json(), "fit": doc}
    with pytest.raises(RecordError, match=r"^known-good\.json: record 'torch-x' field fit"):
        record_from_json(entry, "known-good.json")


# --- judge: every generation against a catalog of measured images ---------------------------

TORCH = record(TORCH_ID, accelerator=CU130, frameworks={"torch": "2.14.1"}, fit=TORCH_FIT)
NUMBA = record(NUMBA_ID, accelerator=replace(CU130, cudnn=None), frameworks={"numba": "0.68.0"}, fit=NUMBA_FIT)
CU125 = MeasuredAccelerator("cuda", "12.5", cuda="12.5", cudnn="9.3.0")
TF = record(TF_ID, accelerator=CU125, frameworks={"tensorflow": "2.21.0"}, fit=TF_FIT)
CU132 = MeasuredAccelerator("cuda", "13.2", cuda="13.2", cudnn="9.20.0")
TORCH215 = record(TORCH215_ID, accelerator=CU132, frameworks={"torch": "2.15.0"}, fit=TORCH215_FIT)
JAX = record(JAX_ID, accelerator=CU130, frameworks={"jax": "0.10.2"}, fit=JAX_FIT)
CUPY = record(CUPY_ID, accelerator=replace(CU130, cudnn=None), frameworks={"cupy": "14.0.0"}, fit=CUPY_FIT)
MEASURED = "(measured from the image's binaries)"


@pytest.mark.parametrize(
    ("cc", "torch", "numba", "cupy", "tf", "jax", "torch215"),
    [
        ("6.1", "no", "no", "no", "no", "no", "no"),  # Pascal: CUDA 13 dropped it (cuBLAS floor 7.5, NVRTC from sm_75); TF: cuDNN 9's 7.5
        ("7.0", "no", "no", "no", "no", "no", "no"),  # Volta: the same
        (
            "7.5",
            "no",
            "fits",
            "fits",
            "fits",
            "fits",
            "fits",
        ),  # Turing: torch 2.14.1's libtorch_cuda_linalg.so has no sm_75 cubin (2.15.0's has)
        ("8.0", "fits", "fits", "fits", "fits", "fits", "fits"),  # Ampere data center
        ("8.6", "fits", "fits", "fits", "fits", "fits", "fits"),  # Ampere consumer
        ("8.9", "fits", "fits", "fits", "fits", "fits", "fits"),  # Ada: through sm_86 cubins (and libtorch_cuda's one sm_89)
        ("9.0", "fits", "fits", "fits", "fits", "fits", "fits"),  # Hopper
        ("10.0", "fits", "fits", "fits", "fits", "fits", "fits"),  # Blackwell data center (TF: through its compute_90 PTX)
        ("12.0", "fits", "fits", "fits", "fits", "fits", "fits"),  # Blackwell consumer (RTX 50)
        ("11.0", "no", "fits", "no", "fits", "fits", "no"),  # Thor: no sm_110 cubin nor PTX it can JIT in torch's or cupy's own libraries
    ],
)
def test_every_generation_against_the_measured_images(cc: str, torch: str, numba: str, cupy: str, tf: str, jax: str, torch215: str) -> None:
    for rec, want in ((TORCH, torch), (NUMBA, numba), (CUPY, cupy), (TF, tf), (JAX, jax), (TORCH215, torch215)):
        driver = "595.58.03" if rec is TORCH215 else "580.65.06"  # one its NVIDIA_REQUIRE_CUDA admits (cuda>=13.2 needs R595)
        got = judge(rec, nvidia(cc, driver=driver), table())
        assert got.measured and got.reason.endswith(MEASURED), got.reason
        assert got.status == ("fits" if want == "fits" else "does not fit"), (rec.id, cc, got.reason)


def test_measured_reasons_name_the_library_and_the_generation() -> None:
    pascal = judge(TORCH, nvidia("6.1"), table()).reason
    assert pascal.startswith("libcublas.so.13 (NVIDIA's) has no SASS below sm_75: Pascal 6.1 cannot run torch 2.14.1"), pascal
    turing = judge(TORCH, nvidia("7.5"), table()).reason
    assert turing.startswith("no sm_75 SASS and no PTX: Turing cannot run torch 2.14.1 (libtorch_cuda_linalg.so)"), turing
    volta = judge(NUMBA, nvidia("7.0"), table()).reason
    assert volta.startswith("numba 0.68.0 compiles its kernels with NVRTC 13.0, which targets 7.5 and newer: Volta 7.0 cannot run it"), (
        volta
    )
    old = judge(TORCH, nvidia("12.0", driver="575.51.03"), table())
    assert old.status == "does not fit" and old.reason.startswith(
        "`docker run --gpus all` refuses it: driver 575.51.03 reports CUDA 12.9, NVIDIA_REQUIRE_CUDA asks cuda>=13.0: update the driver to R580"
    ), old.reason
    fits = judge(TORCH, nvidia("12.0", driver="580.65.06"), table())
    assert fits.reason.startswith(
        "driver 580.65.06 reports CUDA 13.0, which meets NVIDIA_REQUIRE_CUDA cuda>=13.0; torch 2.14.1 runs on 12.0 through the device code of its 22 libraries"
    ), fits.reason
    numba = judge(NUMBA, nvidia("7.5"), table()).reason
    assert "numba 0.68.0 runs on 7.5 through NVRTC 13.0 compiling its kernels" in numba, numba
    assert judge(TORCH, nvidia("9.0", driver=None), table()).reason.startswith("driver not checked (NVIDIA_REQUIRE_CUDA asks cuda>=13.0")
    assert judge(TORCH, nvidia(), table()).status == "unknown"
    assert judge(TORCH, FitHost("arm64", "nvidia", ("9.0",), None), table()).status == "does not fit"
    both = judge(TORCH, nvidia("8.6", "7.5"), table())
    assert both.status == "does not fit" and "Turing" in both.reason  # every GPU of the host must run it
    pascal_tf = judge(TF, nvidia("6.1"), table()).reason
    assert pascal_tf.startswith("libcudnn_adv.so.9 (NVIDIA's) has no SASS below sm_75: Pascal 6.1 cannot run tensorflow 2.21.0"), pascal_tf
    jit = judge(TF, nvidia("12.0"), table())
    assert jit.status == "fits" and "the driver JIT-compiles the PTX of 12.0: libtensorflow_cc.so.2" in jit.reason, jit.reason
    # R535 reports CUDA 12.2: minor-version compatibility would run CUDA 12.5 there, but the image's
    # cuda>=12.5 (no brand clauses on a CUDA-from-wheels base) makes the container runtime refuse it
    for gpu in ("12.0", "9.0"):
        refused = judge(TF, nvidia(gpu, driver="535.104.05"), table())
        assert refused.status == "does not fit" and "NVIDIA_REQUIRE_CUDA asks cuda>=12.5" in refused.reason, refused.reason
    assert judge(TF, nvidia("9.0", driver="555.42.02"), table()).status == "fits"  # R555 reports CUDA 12.5


def test_nothing_fits_below_its_images_own_requirement() -> None:
    """torch 2.15.0 cu132 says cuda>=13.2: R580, the long-term data-center branch, reports CUDA 13.0
    and the container runtime refuses it there, though CUDA 13.2's runtime would run by minor-version
    compatibility (the audit's worst case, which `fit` called a fit)."""
    on_r580 = judge(TORCH215, nvidia("9.0", driver="580.159.04"), table())
    assert on_r580.status == "does not fit", on_r580.reason
    assert "driver 580.159.04 reports CUDA 13.0, NVIDIA_REQUIRE_CUDA asks cuda>=13.2" in on_r580.reason
    assert "R595 or newer (>= 595.45.04, the driver CUDA 13.2 shipped with)" in on_r580.reason
    assert judge(TORCH215, nvidia("9.0", driver="595.45.04"), table()).status == "fits"
    for cc in ("7.5", "8.0", "9.0", "10.0", "12.0"):  # no GPU makes a driver the runtime refuses fit
        assert judge(TORCH215, nvidia(cc, driver="590.48.01"), table()).status == "does not fit"
    unmeasured = replace(TORCH, fit=None, frameworks={"torch": "2.14.1+cu130"})
    assert not judge(unmeasured, nvidia("9.0"), table()).measured  # no fit: the compat tables, as before


@pytest.fixture
def catalog_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    from builder.fit import host as hosts

    monkeypatch.setattr(hosts, "detect", lambda: FitHost("amd64", "none", (), None, ("arch", "vendor", "gpus")))
    records: list[KnownGood] = [TORCH, NUMBA, CUPY, JAX, TF, record("torch2.14-cpu", frameworks={"torch": "2.14.1"})]
    Catalog(tmp_path / "catalog").add(records, {})
    return str(tmp_path / "catalog")


def test_builder_fit_with_measured_records(cli: RunCli, catalog_dir: str) -> None:
    refused = cli("fit", "--catalog", catalog_dir, "vendor=cuda", "--gpu-cc", "6.1", "--format", "json")
    assert refused.exit_code == 1, refused.output
    rows = json.loads(refused.stdout)["records"]
    assert [r["status"] for r in rows] == ["does not fit"] * 5 and all(r["measured"] for r in rows)
    fits = cli("fit", "--catalog", catalog_dir, "torch=2.14", "cuda=13", "--gpu-cc", "12.0", "--driver", "580.65.06")
    assert fits.exit_code == 0, fits.output
    assert f"newest that fits: {TORCH_ID}" in fits.stdout


# --- the smoke run measures it (the runner against the in-memory engine) ---------------------


def test_the_smoke_run_of_a_cuda_image_records_its_measured_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from builder.smoke.runner import smoke_one
    from builder.workspace import Workspace
    from tests.fake_engine import FakeEngine
    from tests.usecase_fixtures import HOST, Checks

    root = Path(__file__).resolve().parents[1]
    (spec,) = Workspace.locate(str(root / "matrix.yaml")).selected(f"id={TORCH_ID}", use_default=False)
    fake = FakeEngine()
    fake.add_image("sha256:torch", spec.tag)
    scan_output = (FIXTURES / f"{TORCH_ID}.scan.json").read_bytes()

    def exec_result(container: Any, command: tuple[str, ...]) -> ExecResult:
        if "-I" in command:  # the fit scan, by the image's own Python
            return ExecResult(0, scan_output, b"")
        return ExecResult(0, b'{"frameworks": {}}', b"")

    fake.exec_result = exec_result
    monkeypatch.setattr(subprocess, "run", Checks(fake))
    result = smoke_one(fake, spec, HOST, "auto", 60, tmp_path)
    assert result.verdict == "gpu-skipped" and result.fit_error == ""
    assert result.fit is not None and replace(result.fit, seconds=1.0) == TORCH_FIT
    (container,) = fake.created
    assert not container.spec.gpus and any("-I" in c for c in container.execs), "measured in the smoke container itself"
    assert results.load(tmp_path, spec.id) == result, "written and read back with its fit"

    fake.exec_result = lambda container, command: ExecResult(1, b"", b"python: not found") if "-I" in command else ExecResult(0, b"{}", b"")
    failed = smoke_one(fake, spec, HOST, "auto", 60, tmp_path)
    assert failed.fit is None and failed.fit_error.endswith("exited 1: python: not found")
    assert failed.verdict == "gpu-skipped", "a fit that cannot be measured does not fail the smoke test"


def test_family_ptx_keeps_its_f_as_cuobjdump_lists_it_and_runs_within_its_major() -> None:
    """cuDNN 9 for CUDA 12 (the tensorflow image) carries compute_120f PTX; cuobjdump says sm_120f.ptx."""
    from builder.fit.arch import Arch, ptx_runs

    cudnn = TF_FIT.library("nvidia/cudnn/lib/libcudnn_ops.so.9")
    assert cudnn is not None and cudnn.ptx == ("compute_120f",)
    family = Arch.parse("compute_100f")
    assert ptx_runs(family, Arch.cc("10.3")) and not ptx_runs(family, Arch.cc("12.0"))
    assert ptx_runs(Arch.parse("compute_100"), Arch.cc("12.0"))  # plain PTX: any newer GPU


def test_publish_carries_the_smoke_results_fit_into_the_record() -> None:
    from builder.catalog.records import BaseIdentity
    from builder.publish.inventory import Inventory
    from builder.publish.publisher import Local, build_record
    from builder.workspace import Workspace

    root = Path(__file__).resolve().parents[1]
    (spec,) = Workspace.locate(str(root / "matrix.yaml")).selected(f"id={TORCH_ID}", use_default=False)
    base = BaseIdentity("cuda13-debian12", "builder-base/debian12:latest", "sha256:" + "b" * 64)
    local = Local("pip freeze ...", base, 5670.0, Inventory((), ()))
    result = replace(smoke(spec.id, "gpu-skipped", fit=TORCH_FIT), tag=spec.tag)
    made = build_record(spec, local, result, "127.0.0.1:5000/gpu-images", "sha256:" + "0" * 64, accepted=True)
    assert made.fit == TORCH_FIT and made.fit.cc_label() == TORCH_FIT.cc_label()
    assert record_from_json(json.loads(json.dumps(made.to_json())), "known-good.json") == made
    assert build_record(spec, local, replace(result, fit=None), "127.0.0.1:5000/gpu-images", "sha256:" + "0" * 64, True).fit is None


def test_the_runs_on_column_of_a_measured_record_is_its_measured_fit() -> None:
    """The report's and `builder catalog`'s "runs on" cell says what the image's binaries say: torch
    2.14.1 cu130 is refused on Turing by its linalg library, where the table claims sm 7.5 onward."""
    measured = runs_on(TORCH, table())
    assert measured == RunsOn("sm 8.0 8.6 8.7 8.9 9.0 10.0 10.3 12.0 12.1", "580.65.06", "amd64", "measured")
    assert measured.label == "sm 8.0 8.6 8.7 8.9 9.0 10.0 10.3 12.0 12.1, driver >= 580.65.06, amd64 (measured)"
    from_table = runs_on(replace(TORCH, fit=None), table())
    assert from_table.source == "table" and "7.5" in from_table.gpus


def test_the_attestation_carries_the_measured_fit() -> None:
    from builder.publish import attestation

    with_fit = json.loads(attestation.statement(TORCH, smoke(TORCH_ID, "gpu-skipped", fit=TORCH_FIT), "{}\n"))
    assert with_fit["predicate"]["fit"] == TORCH_FIT.to_json()
    assert measured_fit.from_json(with_fit["predicate"]["fit"], "fit", ValueError) == TORCH_FIT
    without = json.loads(attestation.statement(TORCH, smoke(TORCH_ID, "gpu-skipped"), "{}\n"))
    assert without["predicate"]["fit"] is None
