"""Host facts: nvidia-smi output parsing, AMD device nodes in a fake /dev, engine facts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from builder.engine import client as engine
from builder.host import facts as hostinfo
from builder.host.facts import EngineFacts, NvidiaGpu, NvidiaInfo
from builder.util.errors import UserError
from tests.fake_engine import FakeEngine, connect_to

# Format as measured on the H200 machine (driver there: 580.159.04).
H200 = "NVIDIA H200, 580.159.03, 9.0, 143771\n"
MULTI = (
    "NVIDIA A100-SXM4-80GB, 550.54.15, 8.0, 81920\n"
    "NVIDIA A100-SXM4-80GB, 550.54.15, 8.0, 81920\n"
    "Tesla P100-PCIE-16GB, 550.54.15, 6.0, 16384\n"
)
SMI_FAILED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n\n"
)
MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.54\n"


class FakeRun:
    """Answers commands from a script and records what was asked."""

    def __init__(self, *answers: tuple[int, str]) -> None:
        self.answers = list(answers)
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> tuple[int, str]:
        self.calls.append(argv)
        return self.answers.pop(0)


def test_parse_h200_line() -> None:
    driver, gpus = hostinfo.parse_gpu_csv(H200)
    assert driver == "580.159.03"
    assert gpus == (NvidiaGpu(index=0, name="NVIDIA H200", compute_cap="9.0", memory_mib=143771),)


def test_parse_multi_gpu_keeps_order_and_indices() -> None:
    driver, gpus = hostinfo.parse_gpu_csv(MULTI)
    assert driver == "550.54.15"
    assert [(g.index, g.name, g.compute_cap) for g in gpus] == [
        (0, "NVIDIA A100-SXM4-80GB", "8.0"),
        (1, "NVIDIA A100-SXM4-80GB", "8.0"),
        (2, "Tesla P100-PCIE-16GB", "6.0"),
    ]
    assert gpus[2].memory_mib == 16384


def test_parse_tolerates_na_values_commas_in_names_and_noise() -> None:
    text = "WARNING: something odd\nNVIDIA GB10, 580.95.05, 12.1, [N/A]\nWeird, GPU, Name, 570.86.10, 10.0, 1024\n"
    driver, gpus = hostinfo.parse_gpu_csv(text)
    assert driver == "580.95.05"
    assert gpus[0] == NvidiaGpu(0, "NVIDIA GB10", "12.1", None)
    assert gpus[1].name == "Weird, GPU, Name" and gpus[1].compute_cap == "10.0"


def test_parse_rejects_lines_that_are_not_gpu_rows() -> None:
    assert hostinfo.parse_gpu_csv(SMI_FAILED) == (None, ())
    assert hostinfo.parse_gpu_csv("a, b, c, d\n") == (None, ())  # cc "c" is not a CC


def test_gather_nvidia_ok_uses_the_documented_query(tmp_path: Path) -> None:
    run = FakeRun((0, H200))
    info = hostinfo.gather_nvidia(run, tmp_path)
    assert run.calls == [
        [
            "nvidia-smi",
            "--query-gpu=name,driver_version,compute_cap,memory.total",
            "--format=csv,noheader,nounits",
        ]
    ]
    assert info.status == "ok" and info.has_gpu and info.driver == "580.159.03"
    assert info.error is None


def test_gather_nvidia_absent_binary_is_no_gpu(tmp_path: Path) -> None:
    info = hostinfo.gather_nvidia(FakeRun((127, "nvidia-smi: command not found")), tmp_path)
    assert info.status == "absent" and not info.has_gpu and info.error is None


def test_gather_nvidia_absent_binary_with_device_nodes_is_a_failure(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidiactl").touch()
    info = hostinfo.gather_nvidia(FakeRun((127, "")), tmp_path)
    assert info.status == "failed" and info.device_nodes
    assert info.error == "nvidia-smi not found, but /dev/nvidiactl exists"


@pytest.mark.parametrize(
    ("rc", "output", "error"),
    [
        (9, SMI_FAILED, SMI_FAILED.strip()),
        (18, MISMATCH, "Failed to initialize NVML: Driver/library version mismatch"),
        (124, "nvidia-smi: timed out after 30 s", "nvidia-smi: timed out after 30 s"),
        (0, "garbage\n", "garbage"),
        (3, "", "nvidia-smi exited with 3 and printed nothing"),
    ],
)
def test_gather_nvidia_failures(tmp_path: Path, rc: int, output: str, error: str) -> None:
    info = hostinfo.gather_nvidia(FakeRun((rc, output)), tmp_path)
    assert info.status == "failed" and not info.has_gpu and info.gpus == ()
    assert info.error == error


def test_gather_nvidia_nonzero_exit_ignores_rows(tmp_path: Path) -> None:
    info = hostinfo.gather_nvidia(FakeRun((1, H200)), tmp_path)
    assert info.status == "failed"


def test_gather_nvidia_no_devices(tmp_path: Path) -> None:
    info = hostinfo.gather_nvidia(FakeRun((6, "No devices were found\n")), tmp_path)
    assert info.status == "no_devices" and not info.has_gpu
    assert info.error == "No devices were found"


def test_gather_nvidia_old_driver_without_compute_cap_field(tmp_path: Path) -> None:
    run = FakeRun(
        (2, 'Field "compute_cap" is not a valid field to query.\n'),  # rc and text as nvidia-smi 580 prints
        (0, "Tesla K80, 470.82.01, 11441\n"),
    )
    info = hostinfo.gather_nvidia(run, tmp_path)
    assert run.calls[1][1] == "--query-gpu=name,driver_version,memory.total"
    assert info.status == "ok" and info.driver == "470.82.01"
    assert info.gpus == (NvidiaGpu(0, "Tesla K80", None, 11441),)


def test_run_command_reports_missing_binary_and_output() -> None:
    assert hostinfo.run_command(["builder-no-such-binary-xyz"])[0] == 127
    assert hostinfo.run_command(["sh", "-c", "echo out; echo err >&2; exit 3"]) == (3, "out\nerr\n")


# --- AMD -----------------------------------------------------------------------------------


def _dev_tree(root: Path, *names: str) -> Path:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    return root


def _names(gid: int) -> str | None:
    return "render"


def test_gather_amd_without_kfd_is_absent(tmp_path: Path) -> None:
    _dev_tree(tmp_path, "dev/dri/renderD128")
    info = hostinfo.gather_amd(tmp_path)
    assert not info.present and info.render_nodes == ()


def test_gather_amd_lists_render_nodes_in_order(tmp_path: Path) -> None:
    own_gid = (tmp_path).stat().st_gid
    _dev_tree(tmp_path, "dev/kfd", "dev/dri/card0", "dev/dri/renderD129", "dev/dri/renderD128")
    info = hostinfo.gather_amd(tmp_path, lambda: (1000, frozenset({own_gid})), _names)
    assert info.present and info.kfd is not None
    assert info.kfd.path == "/dev/kfd" and info.kfd.group == "render" and info.kfd.user_in_group
    assert [n.path for n in info.render_nodes] == ["/dev/dri/renderD128", "/dev/dri/renderD129"]
    assert all(n.user_in_group and n.gid == own_gid for n in info.render_nodes)


def test_gather_amd_user_not_in_group(tmp_path: Path) -> None:
    _dev_tree(tmp_path, "dev/kfd", "dev/dri/renderD128")
    info = hostinfo.gather_amd(tmp_path, lambda: (1000, frozenset({4242424})), lambda gid: None)
    assert info.kfd is not None and not info.kfd.user_in_group
    assert info.kfd.group is None and info.kfd.group_label == str(info.kfd.gid)
    assert not info.render_nodes[0].user_in_group


def test_gather_amd_root_can_open_everything(tmp_path: Path) -> None:
    _dev_tree(tmp_path, "dev/kfd", "dev/dri/renderD128")
    info = hostinfo.gather_amd(tmp_path, lambda: (0, frozenset()), _names)
    assert info.kfd is not None and info.kfd.user_in_group


def test_gather_amd_kfd_without_render_nodes(tmp_path: Path) -> None:
    _dev_tree(tmp_path, "dev/kfd")
    info = hostinfo.gather_amd(tmp_path, lambda: (1000, frozenset()), _names)
    assert info.present and info.render_nodes == ()


# --- gather and the engine -----------------------------------------------------------------


def test_gather_composes_injected_sources(tmp_path: Path) -> None:
    _dev_tree(tmp_path, "dev/kfd", "dev/dri/renderD128")
    engine = EngineFacts(reachable=True, version="27.1.1", runtimes=("nvidia",))
    host = hostinfo.gather(
        FakeRun((0, H200), (0, "GPU 00000000:01:00.0\n    Product Name : NVIDIA H200\n    Product Brand : NVIDIA\n")),
        tmp_path,
        lambda: engine,
        identity=lambda: (1000, frozenset()),
        name=_names,
    )
    assert host.engine == engine
    assert host.nvidia.has_gpu and host.nvidia.gpus[0].name == "NVIDIA H200"
    assert host.nvidia.gpus[0].brand == "nvidia"  # nvidia-smi -q's Product Brand, as the container runtime names it
    assert host.amd.present and not host.amd.render_nodes[0].user_in_group


def test_engine_facts_from_builder_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeEngine()
    fake.runtimes = ("nvidia", "amd")
    monkeypatch.setattr(engine, "open_engine", connect_to(fake))
    facts = hostinfo.engine_facts()
    assert facts == EngineFacts(reachable=True, version="20.10.24", runtimes=("amd", "nvidia"))
    assert fake.closed


def test_engine_facts_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:

    def refuse(**_: Any) -> None:
        raise UserError("no Docker engine answers at unix:///var/run/docker.sock: refused\nmore")

    monkeypatch.setattr(engine, "open_engine", refuse)
    facts = hostinfo.engine_facts()
    assert not facts.reachable
    assert facts.error == "no Docker engine answers at unix:///var/run/docker.sock: refused"


def test_brands_are_read_per_gpu_as_the_container_runtime_names_them() -> None:
    """`nvidia-smi -q` prints "Product Brand" per GPU; libnvidia-container compares its own names
    (compat/require.py BRANDS) with an image's `brand=` clauses."""
    report = (
        "GPU 0\n    Product Brand : NVIDIA RTX\nGPU 1\n    Product Brand                   : GeForce\nGPU 2\n    Product Brand : Made Up\n"
    )
    assert hostinfo.parse_brands(report) == ("nvidiartx", "geforce", None)
    two = NvidiaInfo(status="ok", driver="580.65.06", gpus=(NvidiaGpu(0, "a", "8.6", 1), NvidiaGpu(1, "b", "8.6", 1)))
    run = FakeRun((0, report))  # three brands for two GPUs: not trusted, the GPUs stay unbranded
    assert [g.brand for g in hostinfo.with_brands(two, run).gpus] == [None, None]
    assert run.calls == [["nvidia-smi", "-q"]]
    failed = FakeRun((9, "NVIDIA-SMI has failed"))
    assert [g.brand for g in hostinfo.with_brands(two, failed).gpus] == [None, None]
    assert hostinfo.with_brands(NvidiaInfo(status="absent"), FakeRun()) == NvidiaInfo(status="absent")  # nothing asked


# The head of `nvidia-smi -q` on this project's GPU machine (H200, driver 580.159.04), 2026-12-04;
# nvmlDeviceGetBrand answered 14 (NVML_BRAND_NVIDIA) and nvmlSystemGetCudaDriverVersion 13000 there,
# and `nvidia-smi --help-query-gpu` has no brand field (hence the -q report).
H200_Q = """
==============NVSMI LOG==============

Timestamp                                              : Fri Dec  4 17:32:28 2026
Driver Version                                         : 580.159.04
CUDA Version                                           : 13.0

Attached GPUs                                          : 1
GPU 00000000:00:06.0
    Product Name                                       : NVIDIA H200
    Product Brand                                      : NVIDIA
    Product Architecture                               : Hopper
    Persistence Mode                                   : Enabled
"""


def test_the_h200s_own_report_reads_as_the_runtime_sees_it() -> None:
    """The brand and the CUDA version libnvidia-container would judge this machine's NVIDIA_REQUIRE_CUDA by."""
    from builder.compat.require import driver_cuda
    from builder.compat.rules import table
    from builder.fit import host as hosts

    def run(argv: list[str]) -> tuple[int, str]:
        return (0, H200_Q) if argv == ["nvidia-smi", "-q"] else (0, "NVIDIA H200, 580.159.04, 9.0, 143771")

    found = hosts.detect(run, Path("/nonexistent"), "x86_64")
    assert (found.gpus, found.driver, found.brand) == (("9.0",), "580.159.04", "nvidia")
    assert str(driver_cuda("580.159.04", table())) == "13.0"  # as its "CUDA Version" line and NVML said
