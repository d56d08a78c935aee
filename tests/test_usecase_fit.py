"""Fit where it is acted on, offline: `builder pull` checks fit first (refused, fits, unknown,
--no-fit-check, bad options), `builder doctor --image` judges a local image from the labels the
renderer writes, and what each known-good record runs on (the report's and the catalog's column).
The engine is tests/fake_engine.py; hosts are described, never this machine's."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from builder.catalog.records import MeasuredAccelerator
from builder.catalog.store import Catalog
from builder.compat.rules import table
from builder.fit import host as hosts
from builder.fit import labelled
from builder.fit.host import FitHost
from builder.fit.runs_on import runs_on
from builder.host import facts as hostinfo
from builder.render.templates import labels
from builder.usecases import doctor as doctoring
from builder.usecases import pull as pulling
from builder.util.errors import RunFailure, UserError
from builder.workspace import Workspace
from tests.catalog_fixtures import SHA, record
from tests.conftest import RunCli
from tests.fake_engine import FakeEngine, connect_to
from tests.test_fit import one_line_exit_2
from tests.usecase_fixtures import HOST

ROOT = Path(__file__).resolve().parents[1]
REPO = "127.0.0.1:5000/gpu-images"
CU130 = "torch2.14.1-cu130-py3.12-debian12"
CU126 = "torch2.14.1-cu126-py3.12-ubuntu24.04"
CPU = "torch2.14.1-cpu-py3.12-debian12"
NO_GPU = FitHost("amd64", "none", (), None)


def nvidia(*ccs: str, driver: str | None = "580.65.06") -> FitHost:
    return FitHost("amd64", "nvidia", ccs, driver)


@pytest.fixture(autouse=True)
def no_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the options leave something to detect, this machine is never asked: a GPU-less amd64 host."""
    monkeypatch.setattr(hosts, "detect", lambda: NO_GPU)


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Catalog:
    """Three torch 2.14.1 records, newest first: cu130 (Turing on), cu126 (Maxwell to Hopper), cpu."""
    monkeypatch.setattr(hostinfo, "gather", lambda **kwargs: HOST)  # the run line's host: no GPU
    store = Catalog(tmp_path / "catalog")
    store.add(
        [
            record(CU130, tag=f"{REPO}:{CU130}", digest=f"{REPO}@sha256:{'1' * 64}", frameworks={"torch": "2.14.1+cu130"},
                   accelerator=MeasuredAccelerator("cuda", "13.0", cuda="13.0", cudnn="9.15.1")),
            record(CU126, tag=f"{REPO}:{CU126}", digest=f"{REPO}@sha256:{'2' * 64}", frameworks={"torch": "2.14.1+cu126"},
                   accelerator=MeasuredAccelerator("cuda", "12.6", cuda="12.6", cudnn="9.10.2")),
            record(CPU, tag=f"{REPO}:{CPU}", digest=f"{REPO}@sha256:{SHA}", frameworks={"torch": "2.14.1"}),
        ],
        {},
    )  # fmt: skip
    return store


def _pull(catalog: Catalog, fake: FakeEngine, query: str, check: pulling.FitCheck) -> pulling.Pulled:
    return pulling.pull(catalog, query, log=lambda line: None, wait_s=0.001, connect=connect_to(fake), check=check)


# -- builder pull: fit first ------------------------------------------------------------------
def test_a_record_that_does_not_fit_is_refused_naming_the_newest_that_does(catalog: Catalog) -> None:
    fake = FakeEngine()
    with pytest.raises(RunFailure) as caught:
        _pull(catalog, fake, "torch=2.14", pulling.FitCheck(nvidia("7.0")))
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith(f"{CU130} does not fit this host: torch 2.14.1+cu130 ships kernels for 7.5-12.0: Volta 7.0 cannot run it")
    assert f"the newest that fits is {CU126} (`builder pull id={CU126}`" in line and "--no-fit-check" in line
    assert fake.pulls == [], "refused before anything is pulled"


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        (nvidia("6.1"), "torch 2.14.1+cu130 ships kernels for 7.5-12.0: Pascal 6.1 cannot run it"),
        (nvidia("9.0", driver="535.104.05"), "driver 535.104.05 reports CUDA 12.2, NVIDIA_REQUIRE_CUDA asks cuda>=13.0"),
        # issue 37: a compute capability no generation name is listed for, said once ("3.0 3.0" before)
        (nvidia("3.0"), "torch 2.14.1+cu130 ships kernels for 7.5-12.0: compute capability 3.0 cannot run it"),
        (NO_GPU, "a CUDA image needs an NVIDIA GPU; this host has no GPU"),  # the README's GPU-less amd64 host
        (FitHost("arm64", "nvidia", ("9.0",), None), "an amd64 image; this host is arm64"),
    ],
)
def test_when_no_record_of_the_query_fits_the_refusal_says_so(catalog: Catalog, host: FitHost, reason: str) -> None:
    fake = FakeEngine()
    with pytest.raises(RunFailure, match="no record of the query fits") as caught:
        _pull(catalog, fake, "cuda=13", pulling.FitCheck(host))
    assert reason in str(caught.value) and fake.pulls == []


def test_a_record_that_fits_is_pulled_and_says_why(catalog: Catalog) -> None:
    fake = FakeEngine()
    pulled = _pull(catalog, fake, "torch=2.14", pulling.FitCheck(nvidia("12.0")))
    assert pulled.record.id == CU130 and len(fake.pulls) == 1
    assert pulled.fit.startswith("fits this host: driver 580.65.06 reports CUDA 13.0, which meets NVIDIA_REQUIRE_CUDA cuda>=13.0")
    assert "torch 2.14.1+cu130 ships kernels for 7.5-12.0" in pulled.fit
    cpu = _pull(catalog, FakeEngine(), "vendor=cpu", pulling.FitCheck(NO_GPU))
    assert cpu.record.id == CPU and cpu.fit == "fits this host: a CPU image: runs on any amd64 host"


def test_unknown_pulls_and_says_what_was_not_checked(catalog: Catalog) -> None:
    fake = FakeEngine()
    pulled = _pull(catalog, fake, "torch=2.14", pulling.FitCheck(nvidia()))  # an NVIDIA host whose GPUs nobody named
    assert len(fake.pulls) == 1
    assert pulled.fit.startswith("fit unknown, pulled anyway: not checked: the GPUs (none detected or given; give --gpu-cc)")


def test_no_fit_check_pulls_what_does_not_fit_and_says_so(catalog: Catalog) -> None:
    fake = FakeEngine()
    pulled = _pull(catalog, fake, "cuda=13", pulling.FitCheck(skip=True))
    assert pulled.record.id == CU130 and len(fake.pulls) == 1
    assert pulled.fit == f"fit not checked (--no-fit-check): {CU130} may not run on this host"
    assert "no NVIDIA GPU" in pulled.note  # the run line's note still says the GPU is missing


def test_without_a_described_host_this_one_is_detected(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def detect() -> FitHost:
        asked.append("detect")
        return NO_GPU

    monkeypatch.setattr(hosts, "detect", detect)
    with pytest.raises(RunFailure, match="this host has no GPU"):
        _pull(catalog, FakeEngine(), "cuda=13", pulling.FitCheck())
    assert asked == ["detect"]


# -- builder pull on the command line ---------------------------------------------------------
def test_the_cli_refuses_in_one_line_exit_1(cli: RunCli, catalog: Catalog) -> None:
    result = cli("pull", "--catalog", str(catalog.root), "torch=2.14", "--gpu-cc", "7.0", "--driver", "580.65.06")
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {CU130} does not fit this host: ") and f"builder pull id={CU126}" in lines[0]
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--gpu-cc", "8"], ["compute capability '8'", "e.g. 8.6"]),
        (["--driver", "latest"], ["--driver 'latest'", "e.g. 550.54.15"]),
        (["--arch", "sparc"], ["--arch 'sparc'", "amd64 or arm64"]),
        (["--vendor", "intel"], ["--vendor"]),
        (["--vendor", "none", "--driver", "550.54.15"], ["--driver", "--vendor is none"]),
        (["--vendor", "amd", "--gpu-cc", "8.6"], ["--gpu-cc", "--vendor is amd"]),
        (["--no-fit-check", "--gpu-cc", "8.6"], ["--no-fit-check", "--gpu-cc", "drop one"]),
        (["--no-fit-check", "--arch", "arm64", "--vendor", "none"], ["--no-fit-check", "--arch, --vendor"]),
    ],
)
def test_bad_fit_options_of_pull_are_one_line_exit_2(cli: RunCli, catalog: Catalog, args: list[str], words: list[str]) -> None:
    one_line_exit_2(cli("pull", "--catalog", str(catalog.root), "torch=2.14", *args), *words)


# -- builder doctor --image -------------------------------------------------------------------
def rendered_labels(image: str) -> dict[str, str]:
    """The labels the renderer writes into this planned image's Dockerfile (what a build carries)."""
    return dict(_rendered(image))


@functools.cache
def _rendered(image: str) -> tuple[tuple[str, str], ...]:
    [spec] = Workspace.locate(str(ROOT / "matrix.yaml")).selected(f"id={image}", use_default=False)
    return tuple(labels(spec, "https://example.invalid/src"))


TORCH_IMAGE = "torch2.14.1-cu130-py3.11-debian12"


@pytest.fixture
def engine() -> FakeEngine:
    fake = FakeEngine()
    fake.add_image("sha256:torch", f"{REPO}:{TORCH_IMAGE}", labels=rendered_labels(TORCH_IMAGE))
    fake.add_image("sha256:cpu", "builder/numba:cpu", labels=rendered_labels("numba0.68.0-cpu-py3.11-debian12"))
    fake.add_image("sha256:other", "debian:12", labels={"maintainer": "someone"})
    return fake


MEASURED_RUNS_ON = "8.0 8.6 8.7 8.9 9.0 10.0 10.3 12.0 12.1"  # images/torch2.14.1-cu130-py3.11-debian12/fit.json


@pytest.mark.parametrize(
    ("host", "status", "says"),
    [
        (nvidia("12.0"), "fits", "torch 2.14.1 runs on 12.0"),
        (nvidia("7.5"), "does not fit", f"torch 2.14.1 runs on {MEASURED_RUNS_ON}: Turing 7.5 cannot run it"),
        (nvidia("11.0"), "does not fit", "Blackwell 11.0 cannot run it"),  # a set, not a range: no sm_110 in its wheels
        (nvidia("13.0"), "unknown", "compute capability 13.0 (newer than every GPU"),  # no PTX in its wheels: not guessed
        (nvidia("7.0"), "does not fit", "Volta 7.0 cannot run it"),
        (nvidia("8.6", driver="550.54.15"), "does not fit", "driver 550.54.15 reports CUDA 12.4, NVIDIA_REQUIRE_CUDA asks cuda>=13.0"),
        (NO_GPU, "does not fit", "a CUDA image needs an NVIDIA GPU; this host has no GPU"),
        (nvidia(), "unknown", "not checked: the GPUs"),
    ],
)
def test_doctor_image_judges_a_labelled_image(engine: FakeEngine, host: FitHost, status: str, says: str) -> None:
    """Its io.builder.runs-on label: the compute capabilities measured from its locked wheels (fit.json)."""
    result = doctoring.image_fit(f"{REPO}:{TORCH_IMAGE}", host, connect_to(engine))
    assert (result.fit.status, result.image.id) == (status, TORCH_IMAGE)
    assert says in result.fit.reason and result.ok == (status != "does not fit"), result.fit.reason
    assert result.image.accelerator == MeasuredAccelerator("cuda", "13.0", cuda="13.0", cudnn=result.image.accelerator.cudnn)
    assert result.image.cc_min == "8.0" and result.image.runs_on == tuple(MEASURED_RUNS_ON.split())
    assert result.runs_on.label == f"sm {MEASURED_RUNS_ON}, driver >= 580.65.06, amd64 (measured)"


def test_doctor_image_without_a_runs_on_label_is_judged_from_the_table(engine: FakeEngine) -> None:
    """An image rendered before its fit was measured from its wheels (no io.builder.runs-on) says it is the table's."""
    engine.add_image(
        "sha256:old", f"{REPO}:old", labels={k: v for k, v in rendered_labels(TORCH_IMAGE).items() if k != "io.builder.runs-on"}
    )
    result = doctoring.image_fit(f"{REPO}:old", nvidia("12.0"), connect_to(engine))
    assert result.fit.status == "fits" and result.runs_on.source == "table" and "from the compat table" in result.fit.reason


def test_doctor_image_of_a_cpu_image_fits_a_gpu_less_host(engine: FakeEngine) -> None:
    result = doctoring.image_fit("builder/numba:cpu", NO_GPU, connect_to(engine))
    assert result.fit.status == "fits" and result.runs_on.label == "any (CPU image), amd64 (table)"


def test_doctor_image_refuses_a_missing_or_unlabelled_image(engine: FakeEngine) -> None:
    with pytest.raises(UserError, match=r"^--image debian:12 has no io.builder.id / io.builder.accelerator labels: not an image"):
        doctoring.image_fit("debian:12", NO_GPU, connect_to(engine))
    with pytest.raises(UserError, match=r"^--image nope:1: no such local image"):
        doctoring.image_fit("nope:1", NO_GPU, connect_to(engine))


@pytest.mark.parametrize(
    ("label", "value", "words"),
    [
        ("io.builder.accelerator", "tpu", "is not one of cuda, rocm, cpu"),
        ("io.builder.frameworks", "torch", "is not name=version"),
        ("io.builder.frameworks", "torch=2.14.1; rm -rf /", "is not name=version"),
        ("io.builder.cudnn", "latest", "is not a release"),
        ("io.builder.cc-min", "sm_75", "is malformed"),
        ("io.builder.python", "3", "is malformed"),
    ],
)
def test_a_malformed_label_is_one_line(label: str, value: str, words: str) -> None:
    with pytest.raises(UserError, match=words) as caught:
        labelled.from_labels("img", {**rendered_labels(TORCH_IMAGE), label: value})
    assert "\n" not in str(caught.value) and label in str(caught.value)


def test_doctor_image_on_the_command_line(cli: RunCli, engine: FakeEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctoring, "image_fit", functools.partial(doctoring.image_fit, connect=connect_to(engine)))
    refused = cli("doctor", "--image", f"{REPO}:{TORCH_IMAGE}", "--gpu-cc", "7.0", "--driver", "580.65.06")
    assert refused.exit_code == 1, refused.output
    assert "does not fit" in refused.stdout and "Volta 7.0 cannot run it" in refused.stdout and "runs on: sm 8.0 8.6" in refused.stdout
    fits = cli("doctor", "--image", f"{REPO}:{TORCH_IMAGE}", "--gpu-cc", "12.0", "--driver", "580.65.06", "--format", "json")
    assert fits.exit_code == 0, fits.output
    data = json.loads(fits.stdout)
    assert set(data) == {"image", "id", "host", "fit", "runs_on"} and data["fit"]["status"] == "fits"
    assert data["runs_on"]["source"] == "measured" and data["runs_on"]["driver"] == "580.65.06"
    one_line_exit_2(cli("doctor", "--image", "debian:12", "--vendor", "none"), "--image debian:12 has no io.builder.id")
    one_line_exit_2(cli("doctor", "--image", "nope:1", "--vendor", "none"), "no such local image")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--gpu-cc", "8.6"], ["--gpu-cc", "give --image REF too"]),
        (["--image", "x", "--select", "stack=torch", "--vendor", "none"], ["--select", "--image"]),
        (["--image", "x", "--gpu-cc", "sm_86"], ["compute capability 'sm_86'"]),
        (["--image", "x", "--arch", "sparc"], ["--arch 'sparc'"]),
    ],
)
def test_bad_doctor_image_options_are_one_line_exit_2(cli: RunCli, args: list[str], words: list[str]) -> None:
    one_line_exit_2(cli("doctor", *args), *words)


# -- runs on ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("frameworks", "accelerator", "label"),
    [
        ({"torch": "2.14.1+cu130"}, MeasuredAccelerator("cuda", "13.0", cuda="13.0"), "sm 7.5-12.0 (+PTX), driver >= 580.65.06, amd64 (table)"),
        ({"torch": "2.14.1+cu126"}, MeasuredAccelerator("cuda", "12.6", cuda="12.6"), "sm 5.0-9.0, driver >= 560.28.03, amd64 (table)"),
        # cuDNN 9.11 dropped Maxwell, Pascal and Volta: the floor rises to 7.5
        ({"torch": "2.14.1+cu126"}, MeasuredAccelerator("cuda", "12.6", cuda="12.6", cudnn="9.11.0"), "sm 7.5-9.0, driver >= 560.28.03, amd64 (table)"),
        ({"torch": "2.5.1"}, MeasuredAccelerator("cuda", "12.4.1", cuda="12.4"), "sm 5.0-9.0, driver >= 550.54.14, amd64 (table)"),
        ({"jax": "0.9.0"}, MeasuredAccelerator("cuda", "13.0", cuda="13.0"), "sm >= 7.5, driver >= 580.65.06, amd64 (table)"),
        ({"cupy": "14.0.0"}, MeasuredAccelerator("cuda", "13.0", cuda="13.0"), "sm ? (cupy 14.0.0 not in the tables), driver >= 580.65.06, amd64 (table)"),
        ({"cupy": "14.0.0"}, MeasuredAccelerator("cuda", "13.0", cuda="13.0", cudnn="9.28.0.42"), "sm ? (cupy 14.0.0 not in the tables; its cuDNN needs >= 7.5), driver >= 580.65.06, amd64 (table)"),
        ({"torch": "2.14.1"}, MeasuredAccelerator("cpu", None), "any (CPU image), amd64 (table)"),
        ({"torch": "2.5.1"}, MeasuredAccelerator("rocm", "6.2", rocm="6.2"), "gfx ? (its code objects are not measured), Linux >= 4.18, amd64 (table)"),
        # a hand-edited catalog's odd values give a cell, never a crash
        ({"torch": "2.5.1\x1b[5m"}, MeasuredAccelerator("cuda", "12.4.1", cuda="12.4[/]\x1b]0;t\x07"), "sm 5.0-9.0, driver >= 550.54.14, amd64 (table)"),
        ({"torch": "2.5.1"}, MeasuredAccelerator("cuda", None, cuda="n/a"), "sm ? (torch 2.5.1 not in the tables), amd64 (table)"),
    ],
)  # fmt: skip
def test_what_a_record_runs_on(frameworks: dict[str, str], accelerator: MeasuredAccelerator, label: str) -> None:
    where = runs_on(record("x", frameworks=frameworks, accelerator=accelerator), table())
    assert where.label == label and where.source == "table"


@pytest.mark.parametrize(
    ("torch", "cuda", "fit", "unfit"),
    [("2.14.1+cu130", "13.0", ("7.5", "12.0", "12.1"), ("7.0",)), ("2.14.1+cu126", "12.6", ("5.0", "9.0"), ("3.7",)), ("2.9.0+cu128", "12.8", ("7.0", "12.0"), ("6.1",))],
)  # fmt: skip
def test_the_column_agrees_with_the_verdict(torch: str, cuda: str, fit: tuple[str, ...], unfit: tuple[str, ...]) -> None:
    """The ends of the range the column shows are what `builder fit` lets through, and below it what it refuses."""
    from builder.usecases.fit import judge

    compat = table()
    item = record("x", frameworks={"torch": torch}, accelerator=MeasuredAccelerator("cuda", cuda, cuda=cuda))
    low, high = runs_on(item, compat).gpus.split()[1].split("-")
    assert (low, high) == (fit[0], fit[1])
    assert [judge(item, nvidia(cc), compat).status for cc in fit] == ["fits"] * len(fit)
    assert [judge(item, nvidia(cc), compat).status for cc in unfit] == ["does not fit"] * len(unfit)


def test_the_catalog_shows_the_column(cli: RunCli, catalog: Catalog) -> None:
    table_out = cli("catalog", "--catalog", str(catalog.root))
    assert table_out.exit_code == 0, table_out.output
    assert "runs on" in table_out.stdout and "sm 5.0-9.0, driver >=" in table_out.stdout
    data = json.loads(cli("catalog", "--catalog", str(catalog.root), "--format", "json").stdout)
    assert data["runs_on"][CU130]["label"] == "sm 7.5-12.0 (+PTX), driver >= 580.65.06, amd64 (table)"
    assert data["runs_on"][CPU]["gpus"] == "any (CPU image)" and set(data["runs_on"]) == {CU130, CU126, CPU}
