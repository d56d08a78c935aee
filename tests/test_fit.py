"""`builder fit`: the device rules, driver floors, cuobjdump parsing on real output, host facts,
and the command (decisions, json shape, every bad option value)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import Result

from builder.catalog.records import MeasuredAccelerator
from builder.catalog.store import Catalog
from builder.compat import ptx_isa
from builder.compat.rules import table
from builder.fit import cuobjdump, fatbin
from builder.fit import driver as drivers
from builder.fit import host as hosts
from builder.fit.arch import Arch, Embedded, decide
from builder.fit.host import FitHost
from builder.usecases.fit import judge, judge_embedded
from builder.util.errors import RunFailure, UserError
from tests.catalog_fixtures import record
from tests.conftest import RunCli

FIXTURES = Path(__file__).parent / "fixtures" / "cuobjdump"
TORCH = "torch 2.14.1+cu130"
# libtorch_cuda.so of PyPI's torch 2.14.1 (cu130), as NVIDIA's cuobjdump lists it (real output).
TORCH_LISTING = cuobjdump.parse(
    (FIXTURES / "torch-2.14.1+cu130.libtorch_cuda.list-elf.txt").read_text(),
    (FIXTURES / "torch-2.14.1+cu130.libtorch_cuda.list-ptx.txt").read_text(),
)


# --- the device rules ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cc", "how", "via"),
    [
        ("6.1", "none", None),  # Pascal
        ("7.0", "none", None),  # Volta
        ("7.5", "sass", "sm_75"),  # Turing
        ("8.0", "sass", "sm_80"),  # Ampere, data center
        ("8.6", "sass", "sm_86"),  # Ampere, consumer
        ("8.9", "sass", "sm_86"),  # Ada runs the sm_86 cubins
        ("9.0", "sass", "sm_90"),  # Hopper (and its 4 sm_90a cubins)
        ("10.0", "sass", "sm_100"),  # Blackwell, data center
        ("10.3", "sass", "sm_100"),  # 475 sm_100 cubins; 59 sm_103
        ("12.0", "sass", "sm_120"),  # Blackwell, consumer
        ("12.1", "sass", "sm_120"),
    ],
)
def test_torch_2_14_1_cu130_runs_where_its_cubins_do(cc: str, how: str, via: str | None) -> None:
    fit = decide(TORCH_LISTING, Arch.cc(cc), TORCH)
    assert (fit.how, fit.via.sm if fit.via else None) == (how, via)
    assert fit.fits is (how != "none")


def test_the_real_torch_listing() -> None:
    assert TORCH_LISTING.label == "sm_75 sm_80 sm_86 sm_89 sm_90 sm_90a sm_100 sm_100a sm_103 sm_120 sm_120a sm_121a"
    assert TORCH_LISTING.ptx == () and TORCH_LISTING.count(Arch.parse("sm_86")) == 475
    assert TORCH_LISTING.count(Arch.parse("sm_89")) == 1  # one kernel: 8.9 runs the rest through sm_86


def test_one_library_of_a_wheel_can_lack_a_target_the_main_one_has() -> None:
    linalg = cuobjdump.parse(
        (FIXTURES / "torch-2.14.1+cu130.libtorch_cuda_linalg.list-elf.txt").read_text(),
        (FIXTURES / "torch-2.14.1+cu130.libtorch_cuda_linalg.list-ptx.txt").read_text(),
    )
    assert linalg.label == "sm_80 sm_86 sm_90 sm_100 sm_120"
    turing = nvidia("7.5")
    assert judge_embedded("libtorch_cuda.so", TORCH_LISTING, turing, table()).status == "fits"
    assert judge_embedded("libtorch_cuda_linalg.so", linalg, turing, table()).reason == (
        "no sm_75 SASS and no PTX: Turing cannot run libtorch_cuda_linalg.so"
    )


def test_a_gpu_without_sass_or_ptx_gets_the_reason_in_one_line() -> None:
    assert decide(TORCH_LISTING, Arch.cc("7.0"), TORCH).reason == "no sm_70 SASS and no PTX: Volta cannot run torch 2.14.1+cu130"
    assert decide(TORCH_LISTING, Arch.cc("6.1"), TORCH).reason == "no sm_61 SASS and no PTX: Pascal cannot run torch 2.14.1+cu130"
    assert decide(TORCH_LISTING, Arch.cc("8.9"), TORCH).reason == "8.9 (Ada) runs torch 2.14.1+cu130 through its sm_86 SASS"


def test_sass_stays_within_its_major_and_arch_specific_cubins_on_their_target() -> None:
    only = Embedded.of([Arch.parse("sm_90a"), Arch.parse("sm_86")], [])
    assert not decide(only, Arch.cc("9.1"), "x").fits  # sm_90a: 9.0 only; sm_86: major 8 only
    assert not decide(Embedded.of([Arch.parse("sm_86")], []), Arch.cc("8.0"), "x").fits  # not downwards
    assert decide(Embedded.of([Arch.parse("sm_100f")], []), Arch.cc("10.3"), "x").via == Arch.parse("sm_100f")


def test_ptx_is_jit_compiled_on_newer_devices_only() -> None:
    ptx = Embedded.of([Arch.parse("sm_80")], [Arch.parse("compute_80")])
    assert decide(ptx, Arch.cc("9.0"), "x").how == "ptx"
    assert decide(ptx, Arch.cc("12.0"), "x").via == Arch.parse("compute_80")
    late = Embedded.of([], [Arch.parse("compute_90")])
    assert decide(late, Arch.cc("8.9"), "x").reason == "no sm_89 SASS and no PTX at or below compute_89: Ada cannot run x"


@pytest.mark.parametrize("bad", ["sm_8", "sm_86b", "gfx90a", "86.0", ""])
def test_an_architecture_that_is_not_one_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a GPU architecture"):
        Arch.parse(bad)


# --- cuobjdump, on real output ---------------------------------------------------------------


def test_the_parser_reads_real_cuobjdump_output() -> None:
    embedded = cuobjdump.parse(
        (FIXTURES / "nvjpeg-13.3.2.43.list-elf.txt").read_text(),
        (FIXTURES / "nvjpeg-13.3.2.43.list-ptx.txt").read_text(),
        (FIXTURES / "nvjpeg-13.3.2.43.dump-ptx-headers.txt").read_text(),
    )
    assert embedded.label == "sm_75 sm_80 sm_86 sm_89 sm_90 sm_100 sm_103 sm_107 sm_120 sm_121 compute_121"
    assert embedded.ptx_isa == ("9.4",)


def test_measure_is_one_cuobjdump_pass_read_from_the_entry_headers() -> None:
    calls: list[list[str]] = []
    headers = (FIXTURES / "probe.headers.txt").read_text()

    def run(argv: Sequence[str]) -> tuple[int, str]:
        calls.append(list(argv))
        return 0, headers

    assert cuobjdump.measure(Path("lib.so"), Path("cuobjdump"), run) == cuobjdump.parse_headers(headers)
    assert calls == [["cuobjdump", "lib.so"]], "no list or dump option: one pass over the fatbin"


@pytest.mark.parametrize(
    ("headers", "lists", "dump"),
    [
        ("probe.headers", ("probe.list-elf", "probe.list-ptx"), "probe.dump-ptx-headers"),
        (
            "torch-2.14.1+cu130.libtorch_cuda_linalg.headers",
            ("torch-2.14.1+cu130.libtorch_cuda_linalg.list-elf", "torch-2.14.1+cu130.libtorch_cuda_linalg.list-ptx"),
            "torch-2.14.1+cu130.libtorch_cuda_linalg.dump-ptx-headers",
        ),
        # family cubins: the header says sm_100f / sm_120f, --list-elf names the files sm_100 / sm_120
        (
            "cudnn-9.24.0.43.libcudnn_ops.headers",
            ("cudnn-9.24.0.43.libcudnn_ops.list-elf-ptx",) * 2,
            "cudnn-9.24.0.43.libcudnn_ops.dump-ptx-headers",
        ),
    ],
)
def test_the_headers_say_what_the_lists_and_the_ptx_dump_say(headers: str, lists: tuple[str, str], dump: str) -> None:
    """Real output of one file each way (cuobjdump 13.5): the one-pass reading equals the three-option one."""
    text = (FIXTURES / f"{headers}.txt").read_text()
    expected = cuobjdump.parse(*((FIXTURES / f"{name}.txt").read_text() for name in (*lists, dump)))
    assert cuobjdump.parse_headers(text) == expected
    assert expected.sass and (expected.ptx_isa or not expected.ptx)
    if "cudnn" in headers:
        assert "sm_100f" in text and "sm_100f" not in expected.label, "the family cubins are in this file"


def test_a_family_cubin_reads_as_its_list_name_and_family_ptx_keeps_its_f() -> None:
    """What --list-elf and --list-ptx say of the same entries (cuDNN 9.5's jax wheel has family PTX:
    tests/integration/test_wheels_slice.py compares the two readings on every library of the slice)."""

    def entry(kind: str, arch: str, version: str) -> str:
        return f"Fatbin {kind} code:\n================\narch = {arch}\ncode version = [{version}]\nhost = linux\ncompressed\n\n"

    text = entry("elf", "sm_100f", "1,8") + entry("elf", "sm_90a", "1,8") + entry("ptx", "sm_120f", "9,5")
    assert cuobjdump.parse_headers(text) == cuobjdump.parse(
        "ELF file    1: lib.1.sm_100.cubin\nELF file    2: lib.2.sm_90a.cubin\n",
        "PTX file    1: lib.1.sm_120f.ptx\n",
        "Fatbin ptx code:\n================\narch = sm_120f\ncode version = [9,5]\n",
    )
    assert cuobjdump.parse_headers(text).label == "sm_90a sm_100 compute_120f"


def test_a_file_without_device_code_is_empty_and_a_failure_is_one_line() -> None:
    none = "cuobjdump info    : File 'libc.so' does not contain device code"
    assert cuobjdump.measure(Path("libc.so"), Path("c"), lambda argv: (255, none)) == Embedded((), ())
    with pytest.raises(RunFailure, match="exited 1: cuobjdump fatal"):
        cuobjdump.measure(Path("x.so"), Path("c"), lambda argv: (1, "cuobjdump fatal : bad ELF"))
    printed = "cuobjdump fatal    : Invalid ELF file\n\nFatbin elf code:\n================\narch = sm_75\ncompile_size = 64bit\n"
    with pytest.raises(RunFailure, match="exited 1: cuobjdump fatal    : Invalid ELF file$"):  # its message, not the last header line
        cuobjdump.measure(Path("libcufile.so.0"), Path("c"), lambda argv: (1, printed))
    # stdout flushed in blocks: its message can land inside a header line (a CI run of the wheels
    # slice got "...compile_si" + the message + "ze = 64bit", and said only "compile_size = 64bit")
    inside = "Fatbin elf code:\n================\narch = sm_75\ncompile_sicuobjdump fatal    : Invalid ELF file\nze = 64bit\n"
    with pytest.raises(RunFailure, match="exited 1: cuobjdump fatal    : Invalid ELF file$"):
        cuobjdump.measure(Path("libcufile.so.0"), Path("c"), lambda argv: (1, inside))
    with pytest.raises(RunFailure, match="exited 2: Segmentation fault$"):  # nothing of its own: the last line
        cuobjdump.measure(Path("x.so"), Path("c"), lambda argv: (2, "arch = sm_75\nSegmentation fault\n"))


def test_the_binary_comes_from_the_env_path_or_the_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / cuobjdump.WHEEL_PATH
    wheel.parent.mkdir(parents=True)
    wheel.write_text("")
    assert cuobjdump.find_binary({"PATH": ""}, [str(tmp_path)]) == wheel
    assert cuobjdump.find_binary({cuobjdump.ENV: str(wheel)}, []) == wheel
    with pytest.raises(UserError, match="pip install nvidia-cuda-cuobjdump"):
        cuobjdump.find_binary({"PATH": ""}, [])
    with pytest.raises(UserError, match="not a file"):
        cuobjdump.find_binary({cuobjdump.ENV: str(tmp_path / "nope")}, [])


def _cuobjdump_fixture(name: str) -> Embedded:
    return cuobjdump.parse(*((FIXTURES / f"{name}.{part}.txt").read_text() for part in ("list-elf", "list-ptx", "dump-ptx-headers")))


def test_the_fatbin_reader_equals_cuobjdump_on_a_real_elf_file() -> None:
    expected = _cuobjdump_fixture("probe")
    assert expected.label == "sm_75 sm_86 sm_90a sm_100 sm_120a compute_90" and expected.ptx_isa == ("9.0",)
    assert fatbin.read(FIXTURES / "probe.o") == expected


def test_the_fatbin_reader_on_files_without_device_code(tmp_path: Path) -> None:
    assert fatbin.read(Path(sys.executable).resolve()) == Embedded((), ())
    text = tmp_path / "notes.txt"
    text.write_text("not an ELF file at all, but long enough to have a header of sixty-four bytes....")
    with pytest.raises(fatbin.NotElf):
        fatbin.read(text)


def test_a_cut_or_damaged_file_is_a_not_elf_error_never_a_crash(tmp_path: Path) -> None:
    whole = (FIXTURES / "probe.o").read_bytes()
    damaged = tmp_path / "damaged.o"
    for at in range(0, len(whole), 97):
        flipped = bytearray(whole)
        flipped[at] ^= 0xFF
        for data in (whole[:at], bytes(flipped)):
            damaged.write_bytes(data)
            with contextlib.suppress(fatbin.NotElf):
                fatbin.read(damaged)


def test_the_real_cuobjdump_agrees() -> None:
    """NVIDIA's cuobjdump is a dev dependency (`nvidia-cuda-cuobjdump`, pyproject.toml): no skip."""
    binary = cuobjdump.find_binary()  # a UserError saying `pip install nvidia-cuda-cuobjdump` when it is missing
    assert cuobjdump.measure(FIXTURES / "probe.o", binary) == fatbin.read(FIXTURES / "probe.o")


# --- driver floors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cuda", "floor", "full"),
    [
        ("11.8", "450.80.02", "520.61.05"),
        ("12.4", "525.60.13", "550.54.14"),
        ("13.0", "580.65.06", "580.65.06"),
        ("13.2", "580.65.06", "595.45.04"),
    ],
)
def test_minor_version_compatibility_floors(cuda: str, floor: str, full: str) -> None:
    assert drivers.floor_for(cuda, table()) == drivers.DriverFloor(cuda, floor, full)


def test_an_old_driver_is_refused_with_the_forward_compat_way_out() -> None:
    floor = drivers.floor_for("13.0", table())
    assert floor is not None
    old = drivers.check("535.104.05", floor)
    assert not old.fits
    assert old.reason.startswith("driver 535.104.05 < 580.65.06 needed by CUDA 13.0")
    assert "forward-compat package cuda-compat-13-0" in old.reason and "data-center" in old.reason
    assert drivers.check("580.65.06", floor).fits
    newer = drivers.floor_for("12.9", table())
    assert newer is not None and "575.51.03 for every feature" in drivers.check("550.54.15", newer).reason


def test_ptx_needs_the_driver_of_its_isa() -> None:
    assert drivers.ptx_driver("9.0", table()) == ("13.0", "580.65.06")
    assert drivers.ptx_driver("8.6", table()) == ("12.7", "570.26")  # 12.7 was never released: 12.8's driver
    assert not drivers.check_ptx("575.51.03", "9.0", table()).fits
    assert "not checked" in drivers.check_ptx("575.51.03", "9.4", table()).reason


def test_the_ptx_table_is_guarded(tmp_path: Path) -> None:
    path = tmp_path / "ptx.yaml"
    path.write_text('schema: 1\nrows:\n  - {ptx: "9.0", cuda: "13.0"}\n')
    with pytest.raises(UserError, match="no source"):
        ptx_isa.load_table(path)
    path.write_text('schema: 1\nrows:\n  - {ptx: "9.1", cuda: "13.1", source: PTX_ISA}\n  - {ptx: "9.0", cuda: "13.0", source: PTX_ISA}\n')
    with pytest.raises(UserError, match="sorted"):
        ptx_isa.load_table(path)
    path.write_text('schema: 1\nrows:\n  - {ptx: "9.1", cuda: "13.1", source: PTX_ISA}\n')
    assert ptx_isa.cuda_for("9.1", ptx_isa.load_table(path)) == "13.1"
    assert ptx_isa.cuda_for("9.4") is None  # not in the shipped table: unknown, never guessed


# --- the host --------------------------------------------------------------------------------

KFD_GPU = "cpu_cores_count 0\nsimd_count 256\ngfx_target_version 90010\nvendor_id 4098\n"
KFD_CPU = "cpu_cores_count 16\nsimd_count 0\ngfx_target_version 0\n"
ROCMINFO = (
    "Agent 1\n  Name:                    AMD EPYC 7763\nAgent 2\n  Name:                    gfx942\n  Name:                    gfx942\n"
)


def test_amd_targets_from_sysfs_and_rocminfo(tmp_path: Path) -> None:
    assert hosts.parse_kfd_properties(KFD_GPU) == "gfx90a"
    assert hosts.parse_kfd_properties(KFD_CPU) is None
    assert [hosts.gfx_target(v) for v in (110000, 90402, 100302)] == ["gfx1100", "gfx942", "gfx1032"]
    assert hosts.parse_rocminfo(ROCMINFO) == ("gfx942",)
    for node, text in (("0", KFD_CPU), ("1", KFD_GPU)):
        folder = tmp_path / hosts.KFD_NODES / node
        folder.mkdir(parents=True)
        (folder / "properties").write_text(text)
    assert hosts.amd_targets(tmp_path) == ("gfx90a",)
    assert hosts.detect(lambda argv: (127, "nvidia-smi: command not found"), tmp_path, "x86_64", lambda: "6.8.0-45-generic") == FitHost(
        "amd64", "amd", ("gfx90a",), None, ("arch", "vendor", "gpus", "kernel"), kernel="6.8.0-45-generic"
    )
    (tmp_path / "sys/module/amdgpu").mkdir(parents=True)
    (tmp_path / "sys/module/amdgpu/version").write_text("6.8.5\n")  # AMD's amdgpu-dkms driver has this file
    assert hosts.detect(lambda argv: (127, "x"), tmp_path, "x86_64", lambda: "6.8.0").amdgpu == "6.8.5"


def test_rocminfo_when_sysfs_has_no_kfd(tmp_path: Path) -> None:
    def run(argv: list[str]) -> tuple[int, str]:
        return (0, ROCMINFO) if argv[0] == "rocminfo" else (127, f"{argv[0]}: command not found")

    assert hosts.detect(run, tmp_path, "x86_64").gpus == ("gfx942",)
    assert hosts.detect(lambda argv: (127, "not found"), tmp_path, "x86_64").vendor == "none"


def test_nvidia_smi_gives_the_driver_and_every_gpu(tmp_path: Path) -> None:
    smi = "NVIDIA GeForce RTX 5090, 580.65.06, 12.0, 32607\nTesla V100-SXM2-16GB, 580.65.06, 7.0, 16384\n"
    host = hosts.detect(lambda argv: (0, smi), tmp_path, "aarch64")
    assert (host.arch, host.vendor, host.gpus, host.driver) == ("arm64", "nvidia", ("12.0", "7.0"), "580.65.06")


def test_given_values_replace_detected_ones() -> None:
    detected = FitHost("amd64", "nvidia", ("8.6",), "550.54.15", ("arch", "vendor", "gpus", "driver"))
    assert hosts.given(detected, gpu_cc=["9.0"]) == FitHost("amd64", "nvidia", ("9.0",), "550.54.15", ("arch", "vendor", "driver"))
    assert hosts.given(detected, brand="tesla").brand == "tesla"
    assert hosts.given(detected, vendor="none", arch="arm64") == FitHost("arm64", "none", (), None, ())
    assert hosts.given(FitHost("amd64", "none", (), None, ("arch", "vendor", "gpus")), gpu_cc=["6.1"]).vendor == "nvidia"
    assert hosts.given(None, driver="550.54.15").vendor == "nvidia"


def test_a_fully_described_host_is_not_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    def detect() -> FitHost:
        raise AssertionError("detected although the options said it all")

    monkeypatch.setattr(hosts, "detect", detect)
    assert hosts.host_for(gpu_cc=["9.0"], driver="580.65.06").gpus == ("9.0",)
    assert hosts.host_for(vendor="none", arch="arm64") == FitHost("arm64", "none", (), None, ())


# --- decisions on catalog records (from the compat table) ------------------------------------

CU130 = MeasuredAccelerator("cuda", "13.0", cuda="13.0", cudnn="9.15.1")
CU126 = MeasuredAccelerator("cuda", "12.6", cuda="12.6", cudnn="9.10.2")
TORCH_CU130 = record("torch2.14-cu130", frameworks={"torch": "2.14.1+cu130"}, accelerator=CU130)


def nvidia(*ccs: str, driver: str | None = "580.65.06") -> FitHost:
    return FitHost("amd64", "nvidia", ccs, driver)


@pytest.mark.parametrize(
    ("cc", "status"),
    [("6.1", "does not fit"), ("7.0", "does not fit"), ("7.5", "fits"), ("8.0", "fits"), ("8.6", "fits"), ("8.9", "fits")]
    + [("9.0", "fits"), ("10.0", "fits"), ("12.0", "fits"), ("12.1", "fits")],
)
def test_generations_against_the_torch_cu130_record(cc: str, status: str) -> None:
    fit = judge(TORCH_CU130, nvidia(cc), table())
    assert fit.status == status, fit.reason
    assert "from the compat table, not measured" in fit.reason and not fit.measured


def test_record_reasons() -> None:
    volta = judge(TORCH_CU130, nvidia("7.0"), table()).reason
    assert volta.startswith("torch 2.14.1+cu130 ships kernels for 7.5-12.0: Volta 7.0 cannot run it")
    old = judge(TORCH_CU130, nvidia("9.0", driver="535.104.05"), table()).reason
    assert old.startswith(
        "`docker run --gpus all` refuses it: driver 535.104.05 reports CUDA 12.2, NVIDIA_REQUIRE_CUDA asks cuda>=13.0: update the driver to R580"
    ), old
    pascal = record("torch2.14-cu126", frameworks={"torch": "2.14.1+cu126"}, accelerator=replace(CU126, cudnn="9.11.0"))
    assert judge(pascal, nvidia("6.1"), table()).reason.startswith("cuDNN 9.11.0 needs compute capability >= 7.5: Pascal 6.1")
    assert judge(TORCH_CU130, nvidia("8.6", driver=None), table()).status == "fits"  # the driver is only noted as unchecked
    assert judge(TORCH_CU130, nvidia(), table()).status == "unknown"  # no GPU known: not a yes
    assert judge(TORCH_CU130, FitHost("arm64", "nvidia", ("9.0",), None), table()).reason == (
        "another CPU architecture: an amd64 image; this host is arm64 (run it on an amd64 host)"
    )
    assert judge(record("torch2.14-cpu"), FitHost("amd64", "none", (), None), table()).status == "fits"
    assert judge(TORCH_CU130, FitHost("amd64", "amd", ("gfx90a",), None), table()).status == "does not fit"
    cupy = judge(record("cupy14-cuda13", frameworks={"cupy": "14.0.0"}, accelerator=CU130), nvidia("9.0"), table())
    assert (cupy.status, cupy.reason) == (
        "unknown",
        "not checked: the compute capabilities of cupy 14.0.0 (not in gpu_arch.yaml) (from the compat table, not measured)",
    )
    jax = record("jax0.9-cuda13", frameworks={"jax": "0.9.0"}, accelerator=CU130)
    assert "jax 0.9.0 ships kernels for >= 7.5" in judge(jax, nvidia("9.0"), table()).reason  # variant cuda13 from the CUDA
    newer = judge(
        record("torch2.14-cu130b", frameworks={"torch": "2.14.1+cu130"}, accelerator=replace(CU130, cudnn=None)), nvidia("13.0"), table()
    )
    assert "(13.0 through its PTX, slow first start)" in newer.reason  # the table says 2.12+ cu130 ships PTX


# --- the command ------------------------------------------------------------------------------


@pytest.fixture
def catalog_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(hosts, "detect", lambda: FitHost("amd64", "none", (), None, ("arch", "vendor", "gpus")))
    older = record("torch2.13-cu130", frameworks={"torch": "2.13.0+cu130"}, accelerator=CU130)
    Catalog(tmp_path / "catalog").add([TORCH_CU130, older, record("torch2.14-cpu", frameworks={"torch": "2.14.1"})], {})
    return str(tmp_path / "catalog")


def test_fit_refuses_pascal_and_fits_blackwell(cli: RunCli, catalog_dir: str) -> None:
    refused = cli("fit", "--catalog", catalog_dir, "cuda=13", "--gpu-cc", "6.1")
    assert refused.exit_code == 1, refused.output
    assert "Pascal 6.1 cannot run it" in refused.stdout and "nothing matching fits" in refused.stdout
    fits = cli("fit", "--catalog", catalog_dir, "torch=2.14", "cuda=13", "--gpu-cc", "12.0", "--driver", "580.65.06")
    assert fits.exit_code == 0, fits.output
    assert "newest that fits: torch2.14-cu130" in fits.stdout


def test_fit_json_shape(cli: RunCli, catalog_dir: str) -> None:
    result = cli("fit", "--catalog", catalog_dir, "--gpu-cc", "8.9", "--gpu-cc", "7.0", "--driver", "550.54.15", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"host", "records", "newest_fit"}
    assert data["host"] == {
        "arch": "amd64",
        "vendor": "nvidia",
        "gpus": ["8.9", "7.0"],
        "driver": "550.54.15",
        "brand": None,
        "detected": ["arch"],
    }
    assert [set(r) for r in data["records"]] == [{"id", "status", "reason", "measured"}] * 3
    statuses = {r["id"]: r["status"] for r in data["records"]}
    assert statuses == {"torch2.14-cu130": "does not fit", "torch2.13-cu130": "does not fit", "torch2.14-cpu": "fits"}
    assert data["newest_fit"] == "torch2.14-cpu"


def one_line_exit_2(result: Result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--gpu-cc", "8"], ["compute capability '8'", "e.g. 8.6"]),
        (["--gpu-cc", "sm_86"], ["compute capability 'sm_86'"]),
        (["--driver", "latest"], ["--driver 'latest'", "e.g. 550.54.15"]),
        (["--driver", "55"], ["--driver '55'"]),
        # issue 37: digits other than ASCII were read as numbers (int("８") == 8)
        (["--gpu-cc", "８.６"], ["compute capability '８.６'"]),  # fullwidth
        (["--gpu-cc", "٨.٦"], ["compute capability '٨.٦'"]),  # Arabic-Indic
        (["--gpu-cc", "8.6", "--driver", "５８０.６５.０６"], ["--driver '５８０.６５.０６'"]),
        (["--gpu-cc", "8.6", "--driver", "٥٨٠.٦٥.٠٦"], ["--driver '٥٨٠.٦٥.٠٦'"]),
        (["--gpu-cc", "8.6", "--driver", "5" * 5000], ["--driver '555", "…"]),  # cut, not a 5,000-character line
        (["--arch", "sparc"], ["--arch 'sparc'", "amd64 or arm64"]),
        (["--vendor", "intel"], ["--vendor"]),
        (["--vendor", "amd", "--gpu-cc", "8.6"], ["--gpu-cc", "--vendor is amd"]),
        (["--vendor", "none", "--driver", "550.54.15"], ["--driver", "--vendor is none"]),
        (["--format", "xml"], ["--format"]),
        (["torch"], ["key=value"]),
        (["nosuchkey=1"], ["nosuchkey"]),
    ],
)
def test_every_bad_option_value_is_one_line_exit_2(cli: RunCli, catalog_dir: str, args: list[str], words: list[str]) -> None:
    one_line_exit_2(cli("fit", "--catalog", catalog_dir, *args), *words)


PROBE = str(FIXTURES / "probe.o")


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--gpu-cc", "7.0"], 1, "no sm_70 SASS and no PTX at or below compute_70: Volta cannot run probe.o"),
        (["--gpu-cc", "8.0"], 1, "no sm_80 SASS"),  # sm_75 stays in major 7
        (["--gpu-cc", "8.9", "--gpu-cc", "9.0"], 0, "9.0 (Hopper) runs probe.o through its sm_90a SASS"),
        (["--gpu-cc", "10.3"], 0, "through its sm_100 SASS"),  # the sm_100f cubin, listed as sm_100
        (["--gpu-cc", "11.0", "--driver", "580.65.06"], 0, "JIT-compiles its compute_90 PTX"),
        (["--gpu-cc", "11.0", "--driver", "575.51.03"], 1, "driver 575.51.03 < 580.65.06 needed to JIT PTX ISA 9.0 (CUDA 13.0)"),
        (["--vendor", "none"], 1, "needs an NVIDIA GPU; this host has no GPU"),
    ],
)
def test_fit_of_a_library_from_its_own_device_code(cli: RunCli, catalog_dir: str, args: list[str], code: int, says: str) -> None:
    result = cli("fit", "--library", PROBE, *args, "--format", "json")
    assert result.exit_code == code, result.output
    [row] = json.loads(result.stdout)["records"]
    assert says in row["reason"] and row["measured"] is True


def test_library_table_names_what_fits(cli: RunCli, catalog_dir: str) -> None:
    result = cli("fit", "--library", PROBE, "--gpu-cc", "12.0")
    assert result.exit_code == 0, result.output
    assert "all fit this host" in result.stdout and "pull" not in result.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--library", "no/such/file.so"], ["--library"]),
        (["--library", str(FIXTURES.parent.parent / "golden")], ["no library with device code under"]),
        (["--library", PROBE, "torch=2.14"], ["QUERY", "--library", "not both"]),
        (["--library", str(FIXTURES / "probe.list-elf.txt")], ["--library", "not a 64-bit little-endian ELF file"]),
        (["--library", PROBE, "--reader", "objdump"], ["--reader"]),
    ],
)
def test_bad_library_options_are_one_line_exit_2(cli: RunCli, catalog_dir: str, args: list[str], words: list[str]) -> None:
    one_line_exit_2(cli("fit", *args), *words)


def test_a_missing_cuobjdump_is_one_line_exit_2(cli: RunCli, catalog_dir: str, tmp_path: Path) -> None:
    result = cli("fit", "--library", PROBE, "--reader", "cuobjdump", env={cuobjdump.ENV: str(tmp_path / "nope")})
    one_line_exit_2(result, "BUILDER_CUOBJDUMP")


def test_detected_values_are_used_when_none_is_given(cli: RunCli, catalog_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    h200 = FitHost("amd64", "nvidia", ("9.0",), "580.95.05", ("arch", "vendor", "gpus", "driver"))
    monkeypatch.setattr(hosts, "detect", lambda: h200)
    result = cli("fit", "--catalog", catalog_dir, "cuda=13", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["host"]["detected"] == ["arch", "vendor", "gpus", "driver"] and data["newest_fit"] == "torch2.14-cu130"


def test_no_match_and_an_empty_catalog_exit_1_in_one_line(cli: RunCli, catalog_dir: str, tmp_path: Path) -> None:
    missing = cli("fit", "--catalog", catalog_dir, "torch=9.9", "--gpu-cc", "9.0")
    assert missing.exit_code == 1 and missing.stderr.startswith("error: no known-good image matches")
    (tmp_path / "empty").mkdir()
    empty = cli("fit", "--catalog", str(tmp_path / "empty"), "--gpu-cc", "9.0")
    assert empty.exit_code == 1 and "is empty" in empty.stderr and len(empty.stderr.strip().splitlines()) == 1


def test_a_folder_stands_for_its_libraries_with_device_code(cli: RunCli, catalog_dir: str, tmp_path: Path) -> None:
    lib = tmp_path / "site-packages" / "torch" / "lib"
    lib.mkdir(parents=True)
    (lib / "libkernels.so.1").write_bytes((FIXTURES / "probe.o").read_bytes())
    (lib / "libplain.so").write_bytes(Path(sys.executable).resolve().read_bytes())  # an ELF without device code
    (lib / "libbroken.so").write_text("not an ELF file, only named like a library, and long enough for a header")
    (lib / "README.txt").write_text("skipped: not a library")
    result = cli("fit", "--library", str(tmp_path / "site-packages"), "--gpu-cc", "7.5", "--format", "json")
    assert result.exit_code == 0, result.output
    assert [r["id"] for r in json.loads(result.stdout)["records"]] == ["torch/lib/libkernels.so.1"]
    (lib / "libold.so").write_bytes(
        (FIXTURES / "probe.o").read_bytes().replace(b"\x4b\x00\x00\x00\x00\x00", b"\x50\x00\x00\x00\x00\x00")
    )  # its sm_75 cubin relabelled sm_80
    both = cli("fit", "--library", str(tmp_path / "site-packages"), "--gpu-cc", "7.5")
    assert both.exit_code == 1, both.output  # a program loads every library: one that does not fit is enough
    assert "not all fit this host: torch/lib/libold.so" in both.stdout


def test_brand_decides_an_nvidia_cuda_image_on_an_older_data_center_branch(
    cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nvidia/cuda:13.0.0's NVIDIA_REQUIRE_CUDA admits R535 for data-center brands (its forward-compat
    package): without the brand the answer depends on it (`unknown`, never a guessed yes); with it, the
    container runtime's answer."""
    monkeypatch.setattr(hosts, "detect", lambda: FitHost("amd64", "none", (), None, ("arch", "vendor", "gpus")))
    base_image = record("torch2.14-cu130-ubuntu", frameworks={"torch": "2.14.1+cu130"}, accelerator=replace(CU130, version="13.0.0"))
    Catalog(tmp_path / "catalog").add([base_image], {})
    ask = ("fit", "--catalog", str(tmp_path / "catalog"), "--gpu-cc", "9.0", "--driver", "535.104.05", "--format", "json")
    unknown = cli(*ask)
    assert unknown.exit_code == 1, unknown.output
    (row,) = json.loads(unknown.stdout)["records"]
    assert row["status"] == "unknown" and "give --brand" in row["reason"]
    data_center = cli(*ask, "--brand", "nvidia")
    assert data_center.exit_code == 0, data_center.output
    assert "through its clause brand=nvidia,driver>=535,driver<536" in json.loads(data_center.stdout)["records"][0]["reason"]
    geforce = cli(*ask, "--brand", "geforce")
    assert geforce.exit_code == 1 and json.loads(geforce.stdout)["records"][0]["status"] == "does not fit"
