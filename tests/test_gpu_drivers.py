"""Hosts that cannot exist (builder/compat/drivers.py, data/gpu_drivers.yaml): a GPU generation on a
driver branch before its first or after its last is refused in one line, exit 2, by every command
that takes a described host (`fit`, `pull`, `doctor --image`), and the table refuses a broken edit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from builder.compat import drivers
from builder.compat.rules import table
from builder.fit import host as hosts
from builder.util.errors import UserError

RunCli = Callable[..., Result]
DATA = Path(drivers.__file__).parent / "data" / "gpu_drivers.yaml"


@pytest.mark.parametrize(
    ("cc", "driver", "why"),
    [
        (
            "12.0",
            "535.104.05",
            "no Blackwell GPU (compute capability 12.0) runs on driver 535.104.05: Blackwell needs branch R570 or newer",
        ),
        ("10.0", "560.35.03", "Blackwell needs branch R570"),
        ("12.1", "570.124.06", "Blackwell needs branch R575"),  # GB10 (sm_121) came with CUDA 12.9
        ("9.0", "470.82.01", "no Hopper GPU (compute capability 9.0) runs on driver 470.82.01: Hopper needs branch R520"),
        ("7.0", "590.44.01", "R580 is the last branch that drives Volta"),
        ("6.1", "595.45.04", "R580 is the last branch that drives Pascal"),
        ("5.2", "610.1", "R580 is the last branch that drives Maxwell"),
        ("3.7", "535.104.05", "R470 is the last branch that drives Kepler"),
    ],
)
def test_a_gpu_on_a_branch_that_does_not_drive_it_cannot_exist(cc: str, driver: str, why: str) -> None:
    found = drivers.impossible((cc,), driver, table())
    assert found is not None and why in found, found
    with pytest.raises(UserError, match="this host cannot exist"):
        hosts.given(None, gpu_cc=[cc], driver=driver)


@pytest.mark.parametrize(
    ("cc", "driver"), [("12.0", "570.26"), ("9.0", "535.104.05"), ("7.0", "580.159.04"), ("8.7", "540.3"), ("7.5", "610.1")]
)
def test_hosts_that_exist_are_judged(cc: str, driver: str) -> None:
    """The first and last branches themselves drive the generation; a Jetson cc (8.7) has no row: not checked."""
    assert drivers.impossible((cc,), driver, table()) is None
    assert hosts.given(None, gpu_cc=[cc], driver=driver).gpus == (cc,)


def test_a_detected_host_is_never_called_impossible() -> None:
    """What nvidia-smi reports exists: only a host the options describe is checked (a wrong row must
    not turn a real machine away)."""
    real = hosts.FitHost("amd64", "nvidia", ("12.0",), "535.104.05", ("arch", "vendor", "gpus", "driver"))
    assert hosts.given(real).gpus == ("12.0",)
    with pytest.raises(UserError, match="Blackwell needs branch R570"):
        hosts.given(real, driver="535.54.03")  # a described driver for the detected Blackwell: checked


@pytest.mark.parametrize("command", [("fit",), ("doctor", "--image", "x"), ("pull", "torch=2.14")])
def test_every_command_with_a_described_host_refuses_it_in_one_line(cli: RunCli, command: tuple[str, ...], tmp_path: Path) -> None:
    result = cli(*command, "--gpu-cc", "12.0", "--driver", "535")
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.output.splitlines() if line]
    assert line.startswith("error: this host cannot exist: no Blackwell GPU (compute capability 12.0) runs on driver 535")
    assert "give the driver the host really has" in line


def test_brand_is_checked_against_the_runtimes_names(cli: RunCli) -> None:
    result = cli("fit", "--gpu-cc", "9.0", "--driver", "535.104.05", "--brand", "h100")
    assert result.exit_code == 2
    assert "--brand 'h100' is not a GPU brand the container runtime names: give one of cloudgaming, geforce" in result.output
    vendor = cli("fit", "--vendor", "none", "--brand", "tesla")
    assert vendor.exit_code == 2 and "--brand is an NVIDIA GPU brand, but --vendor is none" in vendor.output


def test_the_shipped_table_covers_every_generation_fit_names_but_jetson() -> None:
    from builder.fit.arch import GENERATIONS

    jetson = {(5, 3), (6, 2), (7, 2), (8, 7), (11, 0)}
    for (major, minor), name in GENERATIONS.items():
        if (major, minor) in jetson:
            continue
        found = drivers.generation(f"{major}.{minor}", table())
        assert found is not None and found.name == name, (major, minor)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('{cc: ["9.0"], generation: Hopper, cuda: "11.8", first: 520,', '{cc: ["9.0"], generation: Hopper, cuda: "11.8", first: 525,',
         "first branch R525 disagrees with compat.yaml: CUDA 11.8.0 shipped with driver 520.61.05"),
        ('{cc: ["7.0"], generation: Volta, cuda: "9.0", first: 384, last: 580,', '{cc: ["7.0"], generation: Volta, cuda: "9.0", first: 384, last: 380,',
         "last branch R380 is before the first, R384"),
        ('{cc: ["10.3"],', '{cc: ["9.5"],', "cc 9.5 must come after 10.0"),
        ('{cc: ["12.1"], generation: Blackwell, cuda: "12.9", first: 575, source: [CUDA_FEATURES_12_9, S1]}',
         '{cc: ["12.1"], generation: Blackwell, cuda: "12.9", first: 575}', "row has no source"),
        ('first: 570, source: [ARCH_MATRIX, S1]}', 'first: "R570", source: [ARCH_MATRIX, S1]}', "first and last are driver branches"),
    ],
)  # fmt: skip
def test_a_broken_table_is_refused_naming_the_line(tmp_path: Path, old: str, new: str, message: str) -> None:
    text = DATA.read_text(encoding="utf-8")
    assert text.count(old) >= 1, old
    path = tmp_path / "gpu_drivers.yaml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    line = next(i for i, row in enumerate(path.read_text().splitlines(), 1) if new in row)
    with pytest.raises(UserError, match=message) as caught:
        drivers.load(table(), path)
    assert (caught.value.file, caught.value.line) == (str(path), line)
