"""One rule for a library's device code (builder/fit/rule.py), and `fit --library` bounded.

The rule: `fit --library` and the image measure (fit/measure.py, a record's measured fit) give one
answer on one file. The case that split them (issue 39): cuFFT 12.0.0.61's `.nv_fatbin` holds one
sm_75 cubin (its real section, tests/fixtures/cuobjdump/cufft-12.0.0.61.o), and cuFFT runs on Hopper.

Bounded (issue 37): a FIFO named like a library, an ELF whose `.nv_fatbin` runs past its end or is
sparse and huge, a fatbin of endless entries, a record whose frameworks list thousands of libraries:
each is one line or a quick answer, never a wait of hours.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from builder.catalog.records import MeasuredAccelerator
from builder.compat.rules import table
from builder.fit import cuobjdump, fatbin, measure, rule, scan
from builder.fit.arch import GENERATIONS, Arch, Embedded
from builder.fit.host import FitHost
from builder.model.measured_fit import FrameworkFit, LibraryCode, MeasuredFit
from builder.usecases import fit as fitting
from builder.usecases.fit import judge
from tests.catalog_fixtures import record
from tests.conftest import RunCli

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "cuobjdump"
CUFFT = FIXTURES / "cufft-12.0.0.61.o"
CUFFT_PATH = "nvidia/cu13/lib/libcufft.so.12"  # where the wheel installs it, relative to site-packages
DRIVER_580 = "580.65.06"
KNOWN = [f"{major}.{minor}" for major, minor in sorted(GENERATIONS)]
FLOOR_AND_UP = [cc for cc in KNOWN if (int(cc.split(".")[0]), int(cc.split(".")[1])) >= (7, 5)]
BELOW = [cc for cc in KNOWN if cc not in FLOOR_AND_UP]


def nvidia(*ccs: str, driver: str | None = DRIVER_580) -> FitHost:
    return FitHost("amd64", "nvidia", ccs, driver)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site-packages with cuFFT 12.0.0.61's device code where the wheel puts the library."""
    lib = tmp_path / "site-packages" / CUFFT_PATH
    lib.parent.mkdir(parents=True)
    shutil.copyfile(CUFFT, lib)
    return tmp_path / "site-packages"


def cufft_record() -> Any:
    """A CUDA 13.0 torch image whose measured fit holds that library, made by fit/measure.py's parse."""
    scan_output = {
        "libraries": [{"path": CUFFT_PATH, "entries": [[*entry, 1] for entry in scan.read(str(CUFFT))]}],
        "frameworks": {"torch": ["torch"]},
        "cudart": {"nvidia/cu13/lib/libcudart.so.13": "13.0"},
        "nvrtc": {},
    }
    fit = measure.parse(json.dumps(scan_output), {"torch": False}, table(), 0.1)
    return record(
        "torch2.14-cu130-cufft", frameworks={"torch": "2.14.1+cu130"}, accelerator=MeasuredAccelerator("cuda", "13.0.96"), fit=fit
    )


# --- the real file ---------------------------------------------------------------------------


def test_the_cufft_fixture_is_the_real_section_one_sm75_cubin() -> None:
    listed = cuobjdump.parse_headers((FIXTURES / "cufft-12.0.0.61.headers.txt").read_text())
    assert fatbin.read(CUFFT) == listed == Embedded.of([Arch(7, 5)], [])
    assert cuobjdump.measure(CUFFT, cuobjdump.find_binary()) == listed, "NVIDIA's own reader (a dev dependency) agrees"


@pytest.mark.parametrize("reader", ["fatbin", "cuobjdump"])
def test_cufft_12_0_0_61_fits_turing_to_blackwell_with_driver_580(cli: RunCli, site: Path, reader: str) -> None:
    gpus = [arg for cc in FLOOR_AND_UP for arg in ("--gpu-cc", cc)]
    result = cli("fit", "--library", str(site / CUFFT_PATH), "--reader", reader, *gpus, "--driver", DRIVER_580, "--format", "json")
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)["records"]
    assert row["status"] == "fits" and "9.0 (Hopper) runs libcufft.so.12: NVIDIA's libcufft.so.12 supports every GPU" in row["reason"]


@pytest.mark.parametrize("cc", BELOW)
def test_cufft_12_0_0_61_is_refused_below_its_floor(cli: RunCli, site: Path, cc: str) -> None:
    result = cli("fit", "--library", str(site), "--gpu-cc", cc, "--driver", DRIVER_580, "--format", "json")
    assert result.exit_code == 1, result.output
    [row] = json.loads(result.stdout)["records"]
    assert (row["id"], row["status"]) == (CUFFT_PATH, "does not fit")
    assert row["reason"].startswith(f"libcufft.so.12 (NVIDIA's) has no SASS below sm_75: {Arch.cc(cc).generation} {cc} cannot run")


@pytest.mark.parametrize("cc", KNOWN)
def test_fit_library_and_the_image_measure_give_one_answer(site: Path, cc: str) -> None:
    host = nvidia(cc)
    library = fitting.fit_libraries([site / CUFFT_PATH], host).records[0]
    image = judge(cufft_record(), host, table())
    assert library.status == image.status == ("fits" if cc in FLOOR_AND_UP else "does not fit"), (library, image)
    fit = cufft_record().fit
    assert fit is not None and fit.frameworks[0].runs_on == tuple(FLOOR_AND_UP), "the record's runs-on column says the same"


# --- the rule --------------------------------------------------------------------------------


def test_any_other_library_runs_on_exactly_its_sass_and_ptx() -> None:
    """The same cubin outside NVIDIA's layout is judged by what it holds: sm_75 runs within major 7 only."""
    code = fatbin.read(CUFFT)
    assert rule.judge_library("mylib/libfft.so", code, Arch.cc("7.5")).status == "fits"
    hopper = rule.judge_library("mylib/libfft.so", code, Arch.cc("9.0"))
    assert (hopper.status, hopper.reason) == ("does not fit", "no sm_90 SASS and no PTX: Hopper cannot run libfft.so")
    assert rule.runs_on("mylib/libfft.so", code) == ("7.5",)
    assert rule.runs_on(CUFFT_PATH, code) == tuple(FLOOR_AND_UP)


@pytest.mark.parametrize(
    ("path", "component"),
    [
        ("nvidia/cudnn/lib/libcudnn_adv.so.9", "cudnn"),
        ("/opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcufft.so.12", "cufft"),
        ("/usr/lib/python3/dist-packages/nvidia/nccl/lib/libnccl.so.2", "nccl"),
        ("/usr/local/cuda/lib64/libcublasLt.so.13", "cublasLt"),  # the toolkit's copy: the same file
        ("/tmp/libcufft.so.12", "cufft"),
        ("torch/lib/libtorch_cuda.so", None),
        ("/home/nvidia/project/lib/libkernels.so", None),  # a folder named nvidia is not NVIDIA's wheel
        ("jaxlib/cuda/libcufft_plugin.so", None),
    ],
)
def test_which_libraries_are_nvidias(path: str, component: str | None) -> None:
    assert rule.nvidia_component(path) == component


def test_what_the_file_cannot_say_is_unknown_never_does_not_fit() -> None:
    empty = rule.judge_library(CUFFT_PATH, Embedded((), ()), Arch.cc("9.0"))  # cuFFT 12.5: nothing in its fatbin
    assert empty.status == "unknown" and "holds no device code for a known GPU" in empty.reason
    newer = rule.judge_library(CUFFT_PATH, fatbin.read(CUFFT), Arch.cc("13.0"))  # a GPU newer than the tables
    assert newer.status == "unknown" and "newer than the GPUs this tool knows" in newer.reason
    lone = fitting.judge_embedded("libcufft.so.12", Embedded((), ()), nvidia("9.0"), table(), "/x/site-packages/" + CUFFT_PATH)
    assert lone.status == "unknown", "not `fits: no device code`: NVIDIA's library loads its kernels another way"
    assert fitting.judge_embedded("libplain.so", Embedded((), ()), nvidia("9.0"), table()).status == "fits"


def test_a_ptx_library_needs_a_driver_that_knows_its_isa() -> None:
    code = fatbin.read(FIXTURES / "probe.o")  # compute_90 PTX of ISA 9.0 (CUDA 13.0)
    assert rule.judge_library("probe.o", code, Arch.cc("11.0"), "575.51.03", table()).status == "does not fit"
    assert rule.judge_library("probe.o", code, Arch.cc("11.0"), DRIVER_580, table()).how == "ptx"
    assert rule.judge_library("probe.o", code, Arch.cc("11.0")).fits, "without a driver it is not checked"


# --- fit --library, bounded -------------------------------------------------------------------


@pytest.fixture
def bounded() -> Iterator[None]:
    """The test fails with TimeoutError after 60 s instead of hanging the suite (a read that blocks on
    a FIFO or walks for hours is interrupted by the alarm: CPython runs the handler and raises)."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError("fit --library did not answer within 60 s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def one_line(result: Result, code: int, *words: str) -> None:
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path, cli: RunCli, bounded: None) -> None:
    fifo = tmp_path / "libcuda_kernels.so"
    os.mkfifo(fifo)
    one_line(cli("fit", "--library", str(fifo), "--gpu-cc", "9.0"), 2, "not a regular file")
    one_line(cli("fit", "--library", str(fifo), "--gpu-cc", "9.0", "--reader", "cuobjdump"), 2, "not a regular file")
    shutil.copyfile(FIXTURES / "probe.o", tmp_path / "libkernels.so")
    inside = cli("fit", "--library", str(tmp_path), "--gpu-cc", "9.0", "--format", "json")
    assert inside.exit_code == 0, inside.output
    assert [r["id"] for r in json.loads(inside.stdout)["records"]] == ["libkernels.so"], "the FIFO in the folder is passed over"


def elf_with_fatbin(path: Path, size: int, offset: int | None = None) -> None:
    """probe.o with its .nv_fatbin section header claiming `size` bytes (at `offset`, or where it is)."""
    data = bytearray((FIXTURES / "probe.o").read_bytes())
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    entsize, count, names = struct.unpack_from("<HHH", data, 0x3A)
    strings_at = struct.unpack_from("<Q", data, shoff + names * entsize + 24)[0]
    for i in range(count):
        at = shoff + i * entsize
        name = struct.unpack_from("<I", data, at)[0]
        if data[strings_at + name : strings_at + name + 11] == b".nv_fatbin\0":
            struct.pack_into("<Q", data, at + 32, size)
            if offset is not None:
                struct.pack_into("<Q", data, at + 24, offset)
    path.write_bytes(data)


def test_an_elf_claiming_a_huge_fatbin_is_one_line(tmp_path: Path, cli: RunCli, bounded: None) -> None:
    past = tmp_path / "libpast.so"
    elf_with_fatbin(past, 2**40)
    one_line(cli("fit", "--library", str(past), "--gpu-cc", "9.0"), 2, "runs past the end of the file")
    sparse = tmp_path / "libsparse.so"  # a 5 GiB sparse file whose section really is that large: over the cap
    elf_with_fatbin(sparse, scan.MAX_SECTION + 1, offset=2**20)
    with sparse.open("r+b") as handle:
        handle.truncate(2**20 + scan.MAX_SECTION + 1)
    one_line(cli("fit", "--library", str(sparse), "--gpu-cc", "9.0"), 2, "more than the 4,294,967,296 any real library has")


def test_a_sparse_fatbin_of_zeros_is_searched_not_walked(tmp_path: Path, cli: RunCli, bounded: None) -> None:
    """256 MiB of padding: 33 million seeks and reads of 16 bytes for the old walk; a search now."""
    sparse = tmp_path / "libpadding.so"
    elf_with_fatbin(sparse, 2**28, offset=2**20)
    with sparse.open("r+b") as handle:
        handle.truncate(2**20 + 2**28)
    result = cli("fit", "--library", str(sparse), "--gpu-cc", "9.0", "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["records"][0]["reason"] == "no device code: nothing in it needs a GPU"


@pytest.mark.parametrize("fill", [0x00, 0xBA])  # 0xBA: the magic's last byte everywhere, the search's worst case
def test_the_padding_search_finds_only_an_aligned_magic(tmp_path: Path, fill: int) -> None:
    magic = struct.pack("<I", scan.MAGIC)
    data = bytearray([fill]) * (3 * scan.CHUNK)
    data[scan.CHUNK + 4 : scan.CHUNK + 8] = magic  # not a multiple of 8 from where the search starts: padding
    data[2 * scan.CHUNK + 16 : 2 * scan.CHUNK + 20] = magic
    path = tmp_path / "padding.bin"
    path.write_bytes(data)
    with scan.open_regular(str(path)) as handle:
        assert scan._next_blob(handle, 0, len(data), None) == 2 * scan.CHUNK + 16
        assert scan._next_blob(handle, 2 * scan.CHUNK + 24, len(data), None) == len(data)


def fatbin_of_entries(count: int) -> bytes:
    """A bare fatbin: one blob of `count` 64-byte ELF entries for sm_90 with empty payloads."""
    entry = struct.pack("<HHIQIIII8xI", 2, 1, 64, 0, 0, 0, 0, 90, 0).ljust(64, b"\0")
    return struct.pack("<IHHQ", scan.MAGIC, 1, 16, 64 * count) + entry * count


def test_a_fatbin_of_endless_entries_stops_at_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: RunCli) -> None:
    path = tmp_path / "many.fatbin"
    path.write_bytes(fatbin_of_entries(1001))
    assert fatbin.read(path).count(Arch(9, 0)) == 1001
    monkeypatch.setattr(scan, "MAX_STEPS", 1000)
    with pytest.raises(fatbin.Bounded, match="more than 1,000 entries"):
        fatbin.read(path)
    result = cli("fit", "--library", str(path), "--gpu-cc", "9.0")
    assert result.exit_code == 2 and result.stderr.startswith(f"error: --library {path}: its fatbin has more than 1,000 entries")


def test_reading_stops_at_the_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: RunCli) -> None:
    path = tmp_path / "many.fatbin"
    path.write_bytes(fatbin_of_entries(5000))
    with pytest.raises(fatbin.Bounded, match="deadline"):
        fatbin.read(path, deadline=0.0)  # long past
    monkeypatch.setattr(fitting, "DEADLINE_S", -1)
    result = cli("fit", "--library", str(path), "--gpu-cc", "9.0")
    assert result.exit_code == 2 and "not read by the deadline" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_folder_with_too_much_in_it_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: RunCli) -> None:
    for i in range(5):
        (tmp_path / f"lib{i}.so").write_bytes(b"")
    monkeypatch.setattr(fitting, "MAX_LIBRARIES", 3)
    assert "holds 4 shared libraries (at most 3)" in cli("fit", "--library", str(tmp_path), "--gpu-cc", "9.0").stderr
    monkeypatch.setattr(fitting, "MAX_WALK", 2)
    assert "more than 2 files and folders" in cli("fit", "--library", str(tmp_path), "--gpu-cc", "9.0").stderr


# --- a hostile measured fit in a record ---------------------------------------------------------


def test_a_record_listing_thousands_of_libraries_judges_each_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """64 frameworks each listing the same 2,000 libraries, 4 GPUs: each library is read and judged
    once per GPU (a 13 MB record took 37 s when every lookup walked the list)."""
    libraries = tuple(LibraryCode(f"pkg/lib/libk{i}.so", (("sm_90", 1),), (), (), ("9.0",)) for i in range(2000))
    paths = tuple(lib.path for lib in libraries)
    frameworks = tuple(FrameworkFit(f"fw{i}", paths, ("9.0",)) for i in range(64))
    fit = MeasuredFit("fatbin", 1.0, libraries, frameworks)
    hostile = record("torch2.14-cu130-hostile", accelerator=MeasuredAccelerator("cuda", "13.0.96"), fit=fit)
    calls: dict[str, int] = {"judge": 0, "embedded": 0}

    def counted(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(rule, "judge_library", counted("judge", rule.judge_library))
    monkeypatch.setattr("builder.usecases.fit.embedded_of", counted("embedded", measure.embedded_of))
    verdict = judge(hostile, nvidia("9.0", "9.0", "9.0", "9.0"), table())
    assert verdict.status == "unknown" and "no CUDA runtime was read" in verdict.reason  # the device code fits
    assert calls == {"judge": 2000, "embedded": 2000}


def test_a_cubin_count_in_a_record_is_never_expanded() -> None:
    """A count is any number in a record: 10**12 cubins would be a list of 10**12 entries (memory
    limited to 1 GiB here, so expanding them fails at once)."""
    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))\n"
        "from builder.fit.measure import embedded_of\n"
        "from builder.model.measured_fit import LibraryCode\n"
        "from builder.fit.arch import Arch\n"
        "e = embedded_of(LibraryCode('libk.so', (('sm_90', 10**12),), (), (), ('9.0',)))\n"
        "print(e.count(Arch(9, 0)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.strip() == str(10**12), done.stderr[-500:]


def test_a_record_library_names_refused_by_the_framework_that_loads_it() -> None:
    library = LibraryCode("torch/lib/libtorch_cuda.so", (("sm_80", 3),), (), (), ("8.0", "8.6", "8.7", "8.9"))
    fit = MeasuredFit("fatbin", 1.0, (library,), (FrameworkFit("torch", (library.path,), ()),))
    hopper = judge(
        record("t", frameworks={"torch": "2.13.0"}, accelerator=MeasuredAccelerator("cuda", "13.0.96"), fit=fit), nvidia("9.0"), table()
    )
    assert hopper.reason.startswith("no sm_90 SASS and no PTX: Hopper cannot run torch 2.13.0 (libtorch_cuda.so)"), hopper.reason
