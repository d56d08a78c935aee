"""doctor's verdicts over hand-built HostInfo and ImageSpec records, and log diagnosis."""

from __future__ import annotations

import dataclasses
import json

import pytest
from rich.console import Console

from builder.compat.rules import cuda as rules_cuda
from builder.compat.rules import table
from builder.engine.diagnose import Diagnosis, diagnose_text
from builder.host import doctor
from builder.host.facts import AmdInfo, DeviceNode, EngineFacts, HostInfo, NvidiaGpu, NvidiaInfo
from builder.lock.files import lock_text
from builder.lock.files import parse as parse_lock
from builder.model.plan import Accelerator, Base, ImageSpec, Install
from builder.probes import hello_gpu
from builder.ui.doctor import render_table

ENGINE = EngineFacts(reachable=True, version="27.1.1", runtimes=("nvidia",))
H200 = NvidiaGpu(0, "NVIDIA H200", "9.0", 143771)
P100 = NvidiaGpu(0, "Tesla P100-PCIE-16GB", "6.0", 16384)
NO_AMD = AmdInfo()


def nvidia(*gpus: NvidiaGpu, driver: str = "580.159.03") -> NvidiaInfo:
    return NvidiaInfo(status="ok", driver=driver, gpus=gpus, device_nodes=True)


def host(nv: NvidiaInfo | None = None, amd: AmdInfo = NO_AMD, engine: EngineFacts = ENGINE) -> HostInfo:
    return HostInfo(engine=engine, nvidia=nv or NvidiaInfo(status="absent"), amd=amd)


def cuda_image(
    *installs: Install,
    version: str = "12.4.1",
    min_driver: str | None = "550.54.15",
    mvc_driver: str | None = "525.60.13",
    require: str | None = "",
) -> ImageSpec:
    """A CUDA image; its NVIDIA_REQUIRE_CUDA is the one the rules render for `version` unless given (None: none)."""
    base = Base(name=f"cuda{version}", vendor="cuda", os="ubuntu22.04", version=version, image="x")
    require_cuda = rules_cuda.require_cuda(version, table()) if require == "" else require
    acc = Accelerator("cuda", version, min_driver=min_driver, mvc_driver=mvc_driver, require_cuda=require_cuda)
    return _image(base, acc, installs or (torch("2.5.1", "cu124"),))


def rocm_image() -> ImageSpec:
    base = Base(name="rocm6.2", vendor="rocm", os="ubuntu22.04", version="6.2", image="x")
    return _image(base, Accelerator("rocm", "6.2"), (torch("2.5.1", "rocm6.2"),))


def cpu_image() -> ImageSpec:
    base = Base(name="local-debian12", vendor="cpu", os="debian12", bootstrap="debootstrap")
    return _image(base, Accelerator("cpu", None), (torch("2.5.1", "cpu"),))


def _image(base: Base, acc: Accelerator, installs: tuple[Install, ...]) -> ImageSpec:
    name = "-".join(f"{i.framework}{i.version}-{i.variant}" for i in installs)
    return ImageSpec(
        id=f"{name}-py3.11-{base.os}",
        tag=f"reg/x:{name}",
        base=base,
        stack=installs[0].framework,
        python="3.11",
        frameworks=tuple((i.framework, i.version) for i in installs),
        installs=installs,
        packages=(),
        index_urls=(),
        accelerator=acc,
    )


def torch(version: str, variant: str) -> Install:
    return Install("torch", version, (f"torch=={version}+{variant}",), variant=variant)


def other(framework: str, version: str, variant: str) -> Install:
    return Install(framework, version, (f"{framework}=={version}",), variant=variant)


def verdict(h: HostInfo, image: ImageSpec) -> doctor.ImageVerdict:
    (only,) = doctor.image_verdicts(h, [image])
    return only


def amd(in_group: bool = True, render: bool = True) -> AmdInfo:
    kfd = DeviceNode("/dev/kfd", 109, "render", in_group)
    nodes = (DeviceNode("/dev/dri/renderD128", 109, "render", in_group),) if render else ()
    return AmdInfo(kfd=kfd, render_nodes=nodes)


# --- CUDA images ---------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["absent", "no_devices"])
def test_cuda_image_without_nvidia_gpu_is_not_applicable(status: str) -> None:
    nv = NvidiaInfo(status="absent" if status == "absent" else "no_devices")
    got = verdict(host(nv), cuda_image())
    assert (got.status, got.reason) == ("n/a", "no NVIDIA GPU on this host; the GPU checks will be skipped")


def test_cuda_image_with_nvidia_gpu_is_judged() -> None:
    got = verdict(host(nvidia(H200)), cuda_image())
    assert got.status == "ok"
    assert got.reason.startswith("driver 580.159.03 reports CUDA 13.0, which meets NVIDIA_REQUIRE_CUDA cuda>=12.4"), got.reason
    assert "torch 2.5.1+cu124 supports compute capability 5.0-9.0; GPU 9.0" in got.reason


def test_cuda_image_with_broken_driver_fails_with_the_driver_fix() -> None:
    nv = NvidiaInfo(status="failed", error="Failed to initialize NVML: Driver/library version mismatch")
    got = verdict(host(nv), cuda_image())
    assert got.status == "fail"
    assert got.reason == "the NVIDIA driver does not answer: Failed to initialize NVML: Driver/library version mismatch"
    assert "reboot" in got.fix


def test_a_driver_the_container_runtime_refuses_fails() -> None:
    """Judged as libnvidia-container judges NVIDIA_REQUIRE_CUDA: R575 reports CUDA 12.9, below cuda>=13.0,
    and a CUDA-from-wheels image has no brand clause to let it through."""
    got = verdict(host(nvidia(H200, driver="575.57.08")), cuda_image(torch("2.9.1", "cu130"), version="13.0"))
    assert got.status == "fail"
    assert got.reason.startswith(
        "`docker run --gpus all` refuses it: driver 575.57.08 reports CUDA 12.9, NVIDIA_REQUIRE_CUDA asks cuda>=13.0"
    )
    assert got.fix == "update the driver, or use an image of an older CUDA"


def test_brand_clauses_start_an_nvidia_cuda_image_on_older_data_center_branches() -> None:
    """nvidia/cuda:13.0.0's requirement admits R535 for data-center brands (forward compatibility), not GeForce."""
    image = cuda_image(torch("2.9.1", "cu130"), version="13.0.0", min_driver="580.65.06")
    on = {
        brand: verdict(host(nvidia(dataclasses.replace(H200, brand=brand), driver="535.104.05")), image)
        for brand in ("nvidia", "geforce", None)
    }
    assert on["nvidia"].status == "ok" and "through its clause brand=nvidia,driver>=535,driver<536" in on["nvidia"].reason
    assert on["geforce"].status == "fail" and "none of its 60 brand/branch clauses matches" in on["geforce"].reason
    assert on[None].status == "warn" and "only on GPUs of brand unknown, grid, tesla, nvidia" in on[None].reason


@pytest.mark.parametrize("driver", ["550.54.14", "550.40.07"])
def test_a_driver_below_the_one_its_cuda_release_shipped_with_warns(driver: str) -> None:
    got = verdict(host(nvidia(H200, driver=driver)), cuda_image())
    assert got.status == "warn"
    assert got.reason == (
        f"driver {driver} reports CUDA 12.4, which meets NVIDIA_REQUIRE_CUDA cuda>=12.4; below 550.54.15, the driver of CUDA 12.4.1, "
        "it runs by minor-version compatibility (PTX newer than the driver is not JIT-compiled)"
    )
    assert got.fix == "update the driver to >= 550.54.15"


@pytest.mark.parametrize("driver", ["550.54.15", "580.159.03", "1000.1"])
def test_driver_at_or_above_toolkit_minimum_is_ok(driver: str) -> None:
    assert verdict(host(nvidia(H200, driver=driver)), cuda_image()).status == "ok"


def test_driver_versions_compare_numerically_not_as_text() -> None:
    image = cuda_image(torch("2.9.1", "cu130"), version="13.0.1", min_driver="580.65.06", mvc_driver="580")
    assert verdict(host(nvidia(H200, driver="580.159.03")), image).status == "ok"
    assert verdict(host(nvidia(H200, driver="575.57.08")), image).status == "fail"


def test_a_branch_the_table_does_not_list_is_placed_between_its_neighbours() -> None:
    """R565 shipped with no toolkit (it reports CUDA 12.7): below R570's 12.8, above R560's 12.6."""
    assert verdict(host(nvidia(H200, driver="565.57.01")), cuda_image(version="12.8", require=None, min_driver=None)).status == "ok"
    refused = verdict(host(nvidia(H200, driver="565.57.01")), cuda_image(version="12.8", require="cuda>=12.8", min_driver=None))
    assert refused.status == "fail" and "reports CUDA 12.6 or newer, below 12.8" in refused.reason


def test_unknown_requirement_is_reported_as_not_checked() -> None:
    got = verdict(host(nvidia(H200)), cuda_image(min_driver=None, mvc_driver=None, require=None))
    assert got.status == "ok"
    assert "no NVIDIA_REQUIRE_CUDA known for CUDA 12.4.1" in got.unchecked


def test_gpu_below_variant_range_fails_and_names_a_variant_that_works() -> None:
    got = verdict(host(nvidia(P100)), cuda_image(torch("2.9.1", "cu130"), version="13.0.1"))
    assert got.status == "fail"
    assert got.reason == ("torch 2.9.1+cu130 supports compute capability 7.5-12.0; this GPU is 6.0 (Tesla P100-PCIE-16GB)")
    assert got.fix == "use a cu126 image"


def test_gpu_inside_variant_range_is_ok() -> None:
    got = verdict(host(nvidia(H200)), cuda_image(torch("2.9.1", "cu130"), version="13.0.1"))
    assert got.status == "ok"


def test_gpu_above_range_without_ptx_fails() -> None:
    blackwell = NvidiaGpu(0, "NVIDIA GeForce RTX 5090", "12.0", 32607)
    got = verdict(host(nvidia(blackwell)), cuda_image(torch("2.9.1", "cu126"), version="12.6.3"))
    assert got.status == "fail"
    assert got.reason.endswith("this GPU is 12.0 (NVIDIA GeForce RTX 5090)")
    assert got.fix == "use a cu130 image"


def test_gpu_of_a_newer_major_with_ptx_warns() -> None:
    future = NvidiaGpu(0, "a future GPU", "13.0", None)
    got = verdict(host(nvidia(future)), cuda_image(torch("2.12.0", "cu130"), version="13.0.1"))
    assert got.status == "warn" and "runs through PTX JIT" in got.reason


def test_gpu_of_a_newer_major_without_ptx_fails() -> None:
    future = NvidiaGpu(0, "a future GPU", "13.0", None)
    got = verdict(host(nvidia(future)), cuda_image(torch("2.11.0", "cu130"), version="13.0.1"))
    assert got.status == "fail"


def test_gpu_of_a_newer_minor_runs_the_same_major_sass() -> None:
    spark = NvidiaGpu(0, "NVIDIA GB10", "12.1", None)
    got = verdict(host(nvidia(spark)), cuda_image(torch("2.11.0", "cu130"), version="13.0.1"))
    assert got.status == "ok"


def test_gpu_range_failure_without_any_variant_says_so() -> None:
    kepler = NvidiaGpu(0, "Tesla K80", "3.7", 11441)
    got = verdict(host(nvidia(kepler)), cuda_image(torch("2.9.1", "cu130"), version="13.0.1"))
    assert got.status == "fail"
    assert got.fix.startswith("no torch 2.9.1 wheel variant covers it")


def test_other_frameworks_suggest_their_own_variant_names() -> None:
    volta = NvidiaGpu(0, "Tesla V100-SXM2-16GB", "7.0", 16384)
    got = verdict(host(nvidia(volta)), cuda_image(other("jax", "0.8.0", "cuda13"), version="13.0.1"))
    assert got.status == "fail"
    assert got.reason == "jax 0.8.0 (cuda13) supports compute capability >= 7.5; this GPU is 7.0 (Tesla V100-SXM2-16GB)"
    assert got.fix == "use a cuda12 image"


def test_mixed_gpus_warn_and_name_the_usable_ones() -> None:
    a100 = NvidiaGpu(0, "NVIDIA A100-SXM4-80GB", "8.0", 81920)
    p100 = NvidiaGpu(1, "Tesla P100-PCIE-16GB", "6.0", 16384)
    got = verdict(host(nvidia(a100, p100)), cuda_image(torch("2.9.1", "cu130"), version="13.0.1"))
    assert got.status == "warn"
    assert got.reason.endswith("GPU 1 is 6.0 (Tesla P100-PCIE-16GB)")
    assert got.fix == "restrict it to GPU 0 (NVIDIA_VISIBLE_DEVICES=0), or use a cu126 image"


def test_frameworks_without_cc_facts_are_not_checked() -> None:
    image = cuda_image(other("tensorflow", "2.18.0", "cuda12"), other("cupy", "13.3.0", "cuda12x"))
    got = verdict(host(nvidia(P100)), image)
    assert got.status == "ok"
    assert got.unchecked == (
        "tensorflow 2.18.0 (cuda12): compute capability range unknown, not checked",
        "cupy 13.3.0 (cuda12x): compute capability range unknown, not checked",
    )


def test_gpu_without_reported_cc_is_not_checked() -> None:
    old = NvidiaGpu(0, "Tesla K80", None, 11441)
    got = verdict(host(nvidia(old)), cuda_image(torch("2.9.1", "cu130"), version="13.0.1"))
    assert got.status == "ok"
    assert "GPU 0 (Tesla K80): compute capability not reported" in got.unchecked


def test_engine_without_nvidia_runtime_warns() -> None:
    plain = EngineFacts(reachable=True, version="20.10.24", runtimes=())
    got = verdict(host(nvidia(H200), engine=plain), cuda_image())
    assert got.status == "warn"
    assert got.fix.startswith("install nvidia-container-toolkit and run nvidia-ctk runtime configure --runtime=docker")


@pytest.mark.parametrize(
    "engine",
    [ENGINE, EngineFacts(reachable=True, runtimes=("nvidia-cdi",)), EngineFacts(reachable=False, error="x")],
)
def test_engine_with_nvidia_runtime_or_unreachable_has_no_runtime_finding(engine: EngineFacts) -> None:
    got = verdict(host(nvidia(H200), engine=engine), cuda_image())
    assert all(f.name != "nvidia runtime" for f in got.findings)


def test_a_host_whose_smoke_checks_cannot_reach_a_container_fails_its_own_row() -> None:
    """No docker CLI: `builder test` refuses the host (tests/test_usecases.py); doctor says so first."""
    blocked = EngineFacts(reachable=True, version="20.10.24", checks_blocked="no `docker` is on PATH: install it")
    rows = {c.name: c for c in doctor.host_checks(host(nvidia(H200), engine=blocked))}
    assert rows["engine"].status == "ok" and rows["smoke checks"].status == "fail"
    assert rows["smoke checks"].detail == "no `docker` is on PATH: install it"
    assert "smoke checks" not in {c.name for c in doctor.host_checks(host(nvidia(H200), engine=ENGINE))}
    down = EngineFacts(reachable=False, error="x", checks_blocked="no `docker` is on PATH")
    assert [c.name for c in doctor.host_checks(host(nvidia(H200), engine=down))][:2] == ["engine", "nvidia driver"], "one cause at a time"


def test_worst_finding_wins_and_the_rest_are_counted() -> None:
    plain = EngineFacts(reachable=True, runtimes=())
    got = verdict(host(nvidia(P100, driver="418.87.01"), engine=plain), cuda_image(torch("2.9.1", "cu130")))
    assert got.status == "fail"
    assert [f.status for f in got.findings] == ["fail", "fail", "warn"]
    assert got.reason.endswith("(+2 more)")


# --- ROCm and CPU images -------------------------------------------------------------------


def test_rocm_image_without_kfd_is_not_applicable() -> None:
    got = verdict(host(nvidia(H200)), rocm_image())
    assert got.status == "n/a" and got.reason.startswith("no /dev/kfd on this host")


def test_rocm_image_with_kfd_and_groups_is_ok_and_says_what_it_did_not_check() -> None:
    """No kernel known and no gfx judge: each is listed as not checked, with its reason (never a pass)."""
    got = verdict(host(amd=amd()), rocm_image())
    assert got.status == "ok"
    assert got.unchecked == (
        "kernel driver: the host's kernel is not known (not detected): ROCm 6.2 needs Linux >= 4.18",
        "torch2.5.1-rocm6.2-py3.11-ubuntu22.04: this host's gfx targets against its code objects are not checked",
    )


def test_rocm_kernel_older_than_amds_oldest_supported_fails_naming_it() -> None:
    """ROCm 5.7's oldest supported OS kernel is 5.15 (compat.yaml rocm.releases): Linux 5.4 is refused."""
    image = rocm_image()
    old = dataclasses.replace(image, accelerator=Accelerator("rocm", "5.7"))
    got = verdict(host(amd=dataclasses.replace(amd(), kernel="5.4.0-150-generic")), old)
    assert got.status == "fail"
    assert got.reason == (
        "Linux 5.4 is older than every kernel AMD supports ROCm 5.7 on (>= 5.15); run a newer kernel or an image of an older ROCm"
    )


def test_rocm_in_tree_amdgpu_leaves_the_kernel_driver_unknown_with_its_reason() -> None:
    got = verdict(host(amd=dataclasses.replace(amd(), kernel="6.8.0-45-generic")), rocm_image())
    assert got.status == "ok" and not any(f.name == "amd kernel driver" for f in got.findings)
    (driver,) = [u for u in got.unchecked if u.startswith("kernel driver")]
    assert "Linux 6.8 >= 4.18" in driver and "no version (/sys/module/amdgpu/version" in driver
    assert "ROCm 6.2 is tested with amdgpu KMD 6.0, 6.1, 6.2, 6.3" in driver


def test_rocm_gfx_finding_comes_from_the_injected_judge() -> None:
    """doctor's own stage cannot judge code objects (fit/ comes after host/): the use-case injects it,
    and its refusal fails the image naming the library, its `unknown` is listed as not checked."""
    image = rocm_image()
    no = doctor.image_verdicts(
        host(amd=amd()), [image], lambda spec: doctor.GfxFinding("does not fit", f"{spec.id}: lib.so has no gfx906", "gfx942")
    )[0]
    assert no.status == "fail" and no.reason == "torch2.5.1-rocm6.2-py3.11-ubuntu22.04: lib.so has no gfx906"
    assert "builder fit --planned --vendor amd" in no.fix
    unknown = doctor.image_verdicts(host(amd=amd()), [image], lambda spec: doctor.GfxFinding("unknown", "compressed", "gfx ?"))[0]
    assert unknown.status == "ok" and "gfx targets: compressed" in unknown.unchecked
    yes = doctor.image_verdicts(host(amd=amd()), [image], lambda spec: doctor.GfxFinding("fits", "runs on gfx942", "gfx942"))[0]
    assert any(f.name == "gfx targets" and f.status == "ok" and f.detail == "runs on gfx942" for f in yes.findings)
    away = doctor.image_verdicts(host(), [image], lambda spec: doctor.GfxFinding("unknown", "no GPUs", "gfx942, Linux >= 4.18"))[0]
    assert away.status == "n/a" and away.reason.endswith("the GPU checks will be skipped; it runs on gfx942, Linux >= 4.18")


def test_rocm_user_not_in_render_group_warns_with_group_add() -> None:
    got = verdict(host(amd=amd(in_group=False)), rocm_image())
    assert got.status == "warn"
    assert got.reason == "you are not in group(s) render, which own /dev/kfd, /dev/dri/renderD128"
    assert "sudo usermod -aG render $USER" in got.fix and "--group-add 109" in got.fix


def test_rocm_groups_name_each_missing_group() -> None:
    info = AmdInfo(
        kfd=DeviceNode("/dev/kfd", 109, "render", False),
        render_nodes=(DeviceNode("/dev/dri/renderD128", 44, "video", False),),
    )
    got = verdict(host(amd=info), rocm_image())
    assert "group(s) render, video" in got.reason
    assert "--group-add 44 --group-add 109" in got.fix


def test_rocm_kfd_without_render_nodes_fails() -> None:
    got = verdict(host(amd=amd(render=False)), rocm_image())
    assert got.status == "fail" and "no renderD* nodes" in got.reason


def test_cpu_image_is_ok_anywhere() -> None:
    assert verdict(host(), cpu_image()).status == "ok"


# --- host checks and output ----------------------------------------------------------------


def _by_name(checks: list[doctor.Check]) -> dict[str, doctor.Check]:
    return {check.name: check for check in checks}


def test_host_checks_on_a_working_nvidia_host() -> None:
    checks = _by_name(doctor.host_checks(host(nvidia(H200))))
    assert checks["engine"].status == "ok" and "27.1.1" in checks["engine"].detail
    assert checks["nvidia driver"].detail == "driver 580.159.03; 1 GPU"
    assert checks["gpu 0"].detail == "NVIDIA H200, compute capability 9.0, 140.4 GiB"
    assert checks["nvidia runtime"].status == "ok"
    assert checks["amd /dev/kfd"].status == "n/a"


def test_host_checks_report_problems_with_fixes() -> None:
    broken = NvidiaInfo(status="failed", error="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    down = EngineFacts(reachable=False, error="no Docker engine answers")
    checks = _by_name(doctor.host_checks(host(broken, amd=amd(in_group=False), engine=down)))
    assert checks["engine"].status == "fail" and "systemctl start docker" in checks["engine"].fix
    assert checks["nvidia driver"].status == "fail" and "lsmod" in checks["nvidia driver"].fix
    assert "nvidia runtime" not in checks
    assert checks["amd groups"].status == "warn"


def test_host_checks_without_gpus() -> None:
    checks = doctor.host_checks(host())
    assert [c.status for c in checks] == ["ok", "n/a", "n/a"]


def test_host_checks_warn_about_missing_runtime_and_cc() -> None:
    old = NvidiaGpu(0, "Tesla K80", None, 11441)
    checks = _by_name(doctor.host_checks(host(nvidia(old), engine=EngineFacts(reachable=True))))
    assert checks["nvidia runtime"].status == "warn"
    assert checks["gpu 0"].status == "warn"


def test_report_json_is_serialisable_and_counts() -> None:
    h = host(nvidia(H200))
    verdicts = doctor.image_verdicts(h, [cuda_image(), rocm_image(), cpu_image()])
    report = doctor.report_json(h, doctor.host_checks(h), verdicts)
    decoded = json.loads(json.dumps(report))
    assert decoded["summary"] == {"ok": 2, "warn": 0, "fail": 0, "n/a": 1}
    assert decoded["host"]["nvidia"]["gpus"][0]["compute_cap"] == "9.0"
    assert [i["status"] for i in decoded["images"]] == ["ok", "n/a", "ok"]


def test_render_table_prints_host_images_and_unchecked() -> None:
    h = host(nvidia(P100))
    image = cuda_image(torch("2.9.1", "cu130"), other("tensorflow", "2.18.0", "cuda12"))
    console = Console(record=True, width=300, color_system=None)
    render_table(console, h, doctor.host_checks(h), doctor.image_verdicts(h, [image]))
    out = console.export_text()
    assert "Host" in out and "Images" in out and image.id in out
    assert "use a cu126 image" in out and "fail" in out
    assert "tensorflow 2.18.0 (cuda12): compute capability range unknown, not checked" in out


def test_render_table_does_not_eat_brackets_as_markup() -> None:
    h = host(nvidia(H200), engine=EngineFacts(reachable=True, runtimes=()))
    console = Console(record=True, width=300, color_system=None)
    render_table(console, h, doctor.host_checks(h), [])
    assert "capabilities: [[gpu]]" in console.export_text()


# --- log diagnosis -------------------------------------------------------------------------

TABLE = (
    (r"CUDA driver version is insufficient", "old driver", "update the driver"),
    (r"Numba needs NumPy (\d+\.\d+)", "numpy too new for numba", "pin numpy<=\\1"),
    (r"sees no GPU", "no GPU", "pass --gpus all"),
    (r"first half\nsecond half", "split message", "join it"),
)


def fake_match(text: str) -> tuple[str, str] | None:
    import re

    for pattern, cause, fix in TABLE:
        hit = re.search(pattern, text, re.IGNORECASE)
        if hit:
            return hit.expand(cause), hit.expand(fix)
    return None


def test_diagnose_text_prefers_the_root_cause_and_returns_its_first_line() -> None:
    log = "\n".join(
        [
            "Step 3/9 : RUN pip install",
            "torch sees no GPU",
            "\x1b[31mRuntimeError: CUDA driver version is insufficient for CUDA runtime version\x1b[0m",
            "again: CUDA driver version is insufficient",
        ]
    )
    got = diagnose_text(log, fake_match, TABLE)
    assert got == Diagnosis(
        "old driver",
        "update the driver",
        "RuntimeError: CUDA driver version is insufficient for CUDA runtime version",
    )


def test_diagnose_text_expands_templated_messages() -> None:
    got = diagnose_text("ImportError: Numba needs NumPy 2.0 or less. Got NumPy 2.1.", fake_match, TABLE)
    assert got is not None and got.fix == "pin numpy<=2.0"


def test_diagnose_text_finds_the_line_of_a_multi_line_match() -> None:
    got = diagnose_text("noise\nfirst half\nsecond half\n", fake_match, TABLE)
    assert got == Diagnosis("split message", "join it", "first half")


def test_diagnose_text_without_a_known_message_is_none() -> None:
    assert diagnose_text("all good\nexit 0\n", fake_match, TABLE) is None


def test_diagnose_text_trims_very_long_lines() -> None:
    got = diagnose_text("x" * 1000 + " sees no GPU", fake_match, TABLE)
    assert got is not None and len(got.line) == 300 and got.line.endswith("...")


def test_diagnose_text_uses_the_probe_table_by_default() -> None:
    log = "Traceback...\nRuntimeError: CUDA driver version is insufficient for CUDA runtime version\n"
    got = diagnose_text(log)
    assert got is not None
    assert (got.cause, got.fix) == hello_gpu.diagnose(log)
    assert got.line == "RuntimeError: CUDA driver version is insufficient for CUDA runtime version"


def test_troubleshooting_doc_covers_every_known_message() -> None:
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    rows = [line for line in doc.splitlines() if line.startswith("| `")]
    messages = [m for row in rows for m in re.findall(r"`([^`]+)`", row.split(" | ")[0])]
    missing = [pattern for pattern, _, _ in hello_gpu.DIAGNOSES if not any(re.search(pattern, m, re.IGNORECASE) for m in messages)]
    assert missing == []


# -- cuDNN's GPU floor, from the lock -----------------------------------------------------------
def _locked(image: ImageSpec, cudnn: str) -> ImageSpec:
    resolved = f"nvidia-cudnn-cu12=={cudnn} \\\n    --hash=sha256:{'1' * 64}\n    # via -r requirements.in\n"
    lock = parse_lock(lock_text("x", f"sha256:{'0' * 64}", "3.11", "x86_64-manylinux_2_35", resolved))
    assert lock is not None
    return dataclasses.replace(image, lock=lock)


def test_a_lock_with_cudnn_9_11_or_newer_fails_on_a_pascal_gpu() -> None:
    """Review: cuDNN >= 9.11 dropped Maxwell, Pascal and Volta; doctor says so from the locked cuDNN."""
    image = _locked(cuda_image(torch("2.5.1", "cu124")), "9.20.0.48")
    verdict = doctor.image_verdict(host(nvidia(P100)), image)
    finding = next(f for f in verdict.findings if f.name == "cudnn")
    assert finding.status == "fail" and "cuDNN 9.20.0.48 (locked) needs compute capability >= 7.5" in finding.detail
    assert "cuDNN < 9.11" in finding.fix


def test_an_older_locked_cudnn_or_a_newer_gpu_is_ok() -> None:
    old = _locked(cuda_image(torch("2.5.1", "cu124")), "9.1.0.70")
    assert not [f for f in doctor.image_verdict(host(nvidia(P100)), old).findings if f.name == "cudnn"]
    new = _locked(cuda_image(torch("2.5.1", "cu124")), "9.20.0.48")
    assert next(f for f in doctor.image_verdict(host(nvidia(H200)), new).findings if f.name == "cudnn").status == "ok"


def test_an_unlocked_cudnn_is_reported_as_not_checked() -> None:
    image = cuda_image(Install("torch", "2.5.1", ("torch==2.5.1",), variant="cu124", cudnn="9.1.0.70"))
    verdict = doctor.image_verdict(host(nvidia(H200)), image)
    assert any("cuDNN is not locked" in note for note in verdict.unchecked)


def test_a_driver_branch_past_nvidias_end_of_life_warns() -> None:
    """NVIDIA publishes an end of life per data-center branch (compat/data/lifecycle.yaml `driver`): R535's was 2026-06-30."""
    import datetime as dt

    def driver_check(driver: str, today: dt.date) -> doctor.Check:
        return next(c for c in doctor.host_checks(host(nvidia(H200, driver=driver)), today) if c.name == "nvidia driver")

    old = driver_check("535.104.05", dt.date(2026, 12, 4))
    assert (
        old.status == "warn"
        and old.detail
        == "driver 535.104.05; 1 GPU; NVIDIA driver R535 (end of life 2026-06-30) is past: NVIDIA no longer fixes this branch"
    )
    assert driver_check("535.104.05", dt.date(2026, 6, 30)).status == "ok"
    assert driver_check("580.159.03", dt.date(2026, 12, 4)).status == "ok"
    assert driver_check("590.48.01", dt.date(2030, 1, 1)).status == "ok"  # a new feature branch: no date published, none guessed
