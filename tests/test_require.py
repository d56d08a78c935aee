"""NVIDIA_REQUIRE_CUDA judged as libnvidia-container judges it (builder/compat/require.py), and the
property issue 38 asks for: nothing `fit` calls a fit is refused by the container runtime, for every
planned CUDA image's own requirement string, as its Dockerfile sets it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from builder.catalog.records import MeasuredAccelerator
from builder.compat import require, runtime_fit
from builder.compat.rules import table
from builder.compat.rules.cuda import require_cuda
from builder.fit.host import FitHost
from builder.fit.runs_on import requirement_of
from builder.usecases.fit import judge
from builder.workspace import Workspace
from tests.catalog_fixtures import record

ROOT = Path(__file__).resolve().parents[1]
NVIDIA_CUDA_13 = require_cuda("13.0.0", table())  # nvidia/cuda:13.0.0's: cuda>=13.0 or R535/R550/R565/R570/R575 by brand


def judged(text: str, driver: str | None, *devices: tuple[str | None, str | None]) -> require.Judgement:
    host = require.Host(driver, tuple(require.Device(cc, brand) for cc, brand in devices) if devices else None)
    return require.judge(require.parse(text), host, table())


# --- the grammar (libnvidia-container src/cli/dsl.c) --------------------------------------------


def test_spaces_separate_alternatives_commas_join_conditions() -> None:
    parsed = require.parse("cuda>=12.4 brand=tesla,driver>=470,driver<471")
    assert [[str(c) for c in clause] for clause in parsed.clauses] == [["cuda>=12.4"], ["brand=tesla", "driver>=470", "driver<471"]]
    assert parsed.cuda == "12.4" and parsed.forward_compat == ("brand=tesla,driver>=470,driver<471",)
    assert require.parse("  cuda>=12.4   ").clauses == require.parse("cuda>=12.4").clauses  # empty parts are skipped, as strsep's are


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cuda==12.4", "'==' is not one of"),
        ("cuda>=", "has no value"),
        ("cuda>=12.x", "is not a version of digits and dots"),
        ("flavour=tesla", "'flavour' is not one of cuda, driver, arch, brand"),
        ("brand>=tesla", "a brand compares with = or != only"),
        (">=12.4", "is not name<op>value"),
        ("cuda>=" + "1" * 9000, "characters (at most 8192)"),
    ],
)
def test_what_the_runtime_calls_an_invalid_expression_is_refused(text: str, message: str) -> None:
    with pytest.raises(require.RequirementError, match=re.escape(message)):
        require.parse(text)


def test_names_and_brands_compare_without_case_versions_number_by_number() -> None:
    assert judged("CUDA>=12.4", "550.54.15").holds is True
    assert judged("brand=Tesla", "550.54.15", ("9.0", "tesla")).holds is True
    assert judged("driver>=580.65.6", "580.65.06").holds is True  # 06 is 6
    assert judged("driver>=580.100", "580.95.05").holds is False  # 95 < 100, not "9" > "1"
    assert judged("cuda>=13", "580.65.06").holds is True and judged("cuda=13", "580.65.06").holds is True  # 13.0 is 13


# --- the host's facts ------------------------------------------------------------------------


def test_a_driver_reports_the_cuda_its_branch_shipped_with() -> None:
    """R580 reports 13.0 (not its own minor patch), R535 12.2; a branch no toolkit shipped with lies
    between its neighbours and below the newer one's (R565: 12.7)."""
    assert str(require.driver_cuda("580.159.04", table())) == "13.0"
    assert str(require.driver_cuda("535.288.01", table())) == "12.2"
    assert str(require.driver_cuda("565.57.01", table())) == "12.6 or newer, below 12.8"
    assert str(require.driver_cuda("470.82.01", table())) == "below 11.8"
    assert str(require.driver_cuda("610.43.02", table())) == "13.2 or newer"
    assert judged("cuda>=12.8", "565.57.01").holds is False and judged("cuda>=12.6", "565.57.01").holds is True
    assert judged("cuda>=12.7", "565.57.01").holds is None  # 12.6 or 12.7: not known


def test_every_gpu_must_satisfy_it_and_unknown_facts_are_never_a_yes() -> None:
    assert judged(NVIDIA_CUDA_13, "535.104.05", ("9.0", "nvidia")).holds is True
    assert judged(NVIDIA_CUDA_13, "535.104.05", ("9.0", "nvidia"), ("8.6", "geforce")).holds is False  # one GeForce: refused
    undecided = judged(NVIDIA_CUDA_13, "535.104.05", ("9.0", None))
    assert undecided.holds is None and undecided.unknown == ("the GPU's product brand",)
    assert judged(NVIDIA_CUDA_13, "580.65.06", ("9.0", None)).holds is True  # cuda>=13.0 needs no brand
    assert judged("cuda>=13.0", None).holds is None
    assert judged("arch>=8.0", "580.65.06", ("7.5", "nvidia")).holds is False and judged("arch>=8.0", "580.65.06").holds is None
    no_gpu = require.judge(require.parse("brand=tesla"), require.Host("580.65.06", ()), table())
    assert no_gpu.holds is True  # no GPU visible: libnvidia-container assumes arch and brand hold


def test_brands_for_names_the_gpus_a_forward_compat_branch_starts_it_on() -> None:
    assert require.brands_for(require.parse(NVIDIA_CUDA_13), "535.104.05")[:4] == ("unknown", "grid", "tesla", "nvidia")
    assert "geforce" not in require.brands_for(require.parse(NVIDIA_CUDA_13), "535.104.05")
    assert "geforce" in require.brands_for(require.parse(require_cuda("12.4.1", table())), "535.104.05")  # 12.4's list had it
    assert require.brands_for(require.parse(NVIDIA_CUDA_13), "580.65.06") == ()


@pytest.mark.parametrize(("value", "off"), [("true", True), ("1", True), ("True", True), ("yes", False), ("", False), (None, False)])
def test_nvidia_disable_require_is_read_as_go_parses_a_bool(value: str | None, off: bool) -> None:
    assert require.disabled(value) is off


# --- the verdict and its reasons ---------------------------------------------------------------


def test_the_runtimes_refusal_names_the_clause_and_the_driver_to_get() -> None:
    got = runtime_fit.started("cuda>=13.2", "580.65.06", (require.Device("9.0", "nvidia"),), table())
    assert got.status == "does not fit"
    assert got.reason == (
        "`docker run --gpus all` refuses it: driver 580.65.06 reports CUDA 13.0, NVIDIA_REQUIRE_CUDA asks cuda>=13.2: "
        "update the driver to R595 or newer (>= 595.45.04, the driver CUDA 13.2 shipped with)"
    )
    forward = runtime_fit.started(NVIDIA_CUDA_13, "535.104.05", (require.Device("9.0", "tesla"),), table())
    assert forward.status == "fits" and forward.forward_compat and "brand=tesla,driver>=535,driver<536" in forward.reason
    unknown = runtime_fit.started(NVIDIA_CUDA_13, "535.104.05", None, table())
    assert unknown.status == "unknown" and "give --brand" in unknown.reason
    broken = runtime_fit.started("cuda>>13.0", "580.65.06", None, table())
    assert broken.status == "does not fit" and "is not valid" in broken.reason


# --- the property: no fit the runtime refuses ---------------------------------------------------

DRIVERS = sorted({d for _, d in table().cuda_toolkits} | {"470.256.02", "535.288.01", "565.57.01", "580.159.04", "610.43.02"})
BRANDS = (None, "nvidia", "tesla", "geforce")


def _planned_cuda() -> list[tuple[str, str, str]]:
    ws = Workspace(ROOT / "matrix.yaml")
    out = []
    for spec in ws.decided.images:
        if spec.accelerator.kind != "cuda":
            continue
        dockerfile = (ROOT / "images" / spec.id / "Dockerfile").read_text(encoding="utf-8")
        found = re.search(r'NVIDIA_REQUIRE_CUDA="([^"]*)"', dockerfile)
        assert found is not None, spec.id
        out.append((spec.id, spec.accelerator.version or "", found.group(1)))
    return out


PLANNED = _planned_cuda()


def test_every_planned_cuda_image_is_judged_by_its_own_rendered_requirement() -> None:
    """A record's requirement is rebuilt from the CUDA it declares by the function that rendered it."""
    assert len(PLANNED) > 30
    for image, version, rendered in PLANNED:
        rec = record(image, accelerator=MeasuredAccelerator("cuda", version, cuda=version))
        assert requirement_of(rec, table()) == rendered, image


@pytest.mark.parametrize(("image", "version", "rendered"), PLANNED, ids=[p[0] for p in PLANNED])
def test_nothing_fits_below_its_images_own_nvidia_require_cuda(image: str, version: str, rendered: str) -> None:
    rec = record(image, accelerator=MeasuredAccelerator("cuda", version, cuda=version), frameworks={})
    parsed = require.parse(rendered)
    for driver in DRIVERS:
        for brand in BRANDS:
            host = FitHost("arm64" if image.endswith("-arm64") else "amd64", "nvidia", ("9.0",), driver, brand=brand)
            runtime = require.judge(parsed, require.Host(driver, (require.Device("9.0", brand),)), table()).holds
            verdict = judge(rec, host, table())
            if runtime is not True:
                assert verdict.status != "fits", (image, driver, brand, verdict.reason)
            if runtime is False:
                assert verdict.status == "does not fit", (image, driver, brand, verdict.reason)


def test_the_driver_a_runs_on_cell_names_is_one_the_runtime_starts_it_on() -> None:
    """`driver >= N` in `catalog` and the report: torch 2.15 cu132 said 580.65.06 (CUDA 13's
    minor-version floor), a driver whose R580 branch the container runtime refuses for cuda>=13.2."""
    from builder.fit.runs_on import runs_on

    cu132 = record(
        "torch2.15.0-cu132-py3.11-debian12", accelerator=MeasuredAccelerator("cuda", "13.2", cuda="13.2"), frameworks={"torch": "2.15.0"}
    )
    cell = runs_on(cu132, table())
    assert cell.driver == "595.45.04", cell.label
    parsed = require.parse(requirement_of(cu132, table()) or "")
    assert require.judge(parsed, require.Host(cell.driver, None), table()).holds is True
    assert require.judge(parsed, require.Host("580.159.04", None), table()).holds is False
