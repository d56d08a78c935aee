"""smoke/pip_check.py: only a vendor's platform alias the image supports is accepted; every other
line of `pip check` stands as a failure."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from builder.smoke import pip_check

# nvidia_cusparselt_cu13-0.8.1-py3-none-manylinux2014_aarch64.whl's WHEEL file, as published
SBSA_WHEEL = "Wheel-Version: 1.0\nGenerator: setuptools (80.9.0)\nRoot-Is-Purelib: true\nTag: py3-none-manylinux2014_sbsa\n\n"
ARM_DEBUG = """pip version: pip 25.0.1 from /opt/venv/lib/python3.11/site-packages/pip (python 3.11)
sys.platform: linux
Compatible tags: 4
  cp311-cp311-manylinux_2_36_aarch64
  py3-none-manylinux2014_aarch64
  py3-none-linux_aarch64
  py3-none-any
"""
AMD_DEBUG = ARM_DEBUG.replace("aarch64", "x86_64")


def test_pip_checks_lines_are_split_into_unsupported_dists_and_failures() -> None:
    report = pip_check.read_report(
        "nvidia-cusparselt-cu13 0.8.1 is not supported on this platform\n"
        "torch 2.14.1 requires sympy, which is not installed.\n"
        "\n"
        "jax 0.10.2 has requirement jaxlib<=0.10.2, but you have jaxlib 0.10.3.\n"
    )
    assert report.unsupported == ("nvidia-cusparselt-cu13",)
    assert report.other == (
        "torch 2.14.1 requires sympy, which is not installed.",
        "jax 0.10.2 has requirement jaxlib<=0.10.2, but you have jaxlib 0.10.3.",
    )


def test_the_compatible_tags_are_read_from_pip_debug() -> None:
    assert pip_check.supported_tags(ARM_DEBUG) == {
        "cp311-cp311-manylinux_2_36_aarch64",
        "py3-none-manylinux2014_aarch64",
        "py3-none-linux_aarch64",
        "py3-none-any",
    }
    assert pip_check.supported_tags("pip version: pip 25.0.1\n") == frozenset()


def test_the_sbsa_wheel_is_accepted_on_arm64_and_says_why() -> None:
    why = pip_check.accept("nvidia-cusparselt-cu13", SBSA_WHEEL, pip_check.supported_tags(ARM_DEBUG))
    assert why == (
        "nvidia-cusparselt-cu13: its WHEEL file says py3-none-manylinux2014_sbsa, sbsa is aarch64, "
        "and the image supports py3-none-manylinux2014_aarch64"
    )


def test_the_sbsa_wheel_is_refused_where_the_image_is_not_aarch64() -> None:
    assert pip_check.accept("nvidia-cusparselt-cu13", SBSA_WHEEL, pip_check.supported_tags(AMD_DEBUG)) is None


def test_a_wheel_of_another_platform_or_an_unknown_word_is_refused() -> None:
    supported = pip_check.supported_tags(ARM_DEBUG)
    for tag in ("py3-none-manylinux2014_x86_64", "py3-none-manylinux2014_arm64ec", "py3-none-any_sbsa", "cp312-cp312-manylinux2014_sbsa"):
        assert pip_check.accept("x", f"Wheel-Version: 1.0\nTag: {tag}\n", supported) is None, tag
    assert pip_check.accept("x", "", supported) is None  # no WHEEL file read: no tag, no acceptance


def test_compressed_tag_sets_are_expanded() -> None:
    wheel = "Tag: py2.py3-none-manylinux2014_sbsa.manylinux_2_17_sbsa\n"
    assert pip_check.wheel_tags(wheel) == (
        "py2-none-manylinux2014_sbsa",
        "py2-none-manylinux_2_17_sbsa",
        "py3-none-manylinux2014_sbsa",
        "py3-none-manylinux_2_17_sbsa",
    )
    assert pip_check.accept("x", wheel, pip_check.supported_tags(ARM_DEBUG)) is not None


class FakeHost:
    """testinfra's host as the smoke check uses it: `run(command)` with the image's answers."""

    def __init__(self, debug: str, wheel: str) -> None:
        self.answers = {"python -m pip debug --verbose": debug, "WHEEL": wheel}
        self.commands: list[str] = []

    def run(self, command: str) -> SimpleNamespace:
        self.commands.append(command)
        key = command if command in self.answers else "WHEEL"
        return SimpleNamespace(rc=0, stdout=self.answers[key], stderr="")


def _check(stdout: str, host: FakeHost) -> dict[str, str]:
    from builder.smoke.checks.test_image import test_pip_check_is_clean as check

    done: Future[object] = Future()
    done.set_result(SimpleNamespace(rc=1, stdout=stdout, stderr=""))
    recorded: dict[str, str] = {}
    check({"pip_check": done}, host, lambda key, value: recorded.__setitem__(key, value))
    return recorded


def test_the_smoke_check_accepts_the_sbsa_wheel_in_an_arm64_image_and_records_it() -> None:
    host = FakeHost(ARM_DEBUG, SBSA_WHEEL)
    recorded = _check("nvidia-cusparselt-cu13 0.8.1 is not supported on this platform\n", host)
    assert recorded == {"pip_check_accepted": pip_check.accept("nvidia-cusparselt-cu13", SBSA_WHEEL, pip_check.supported_tags(ARM_DEBUG))}
    assert host.commands[1].endswith(" nvidia-cusparselt-cu13")  # the WHEEL file of the dist pip named


def test_the_smoke_check_fails_on_any_other_line_or_platform() -> None:
    with pytest.raises(AssertionError, match="requires sympy"):
        _check(
            "nvidia-cusparselt-cu13 0.8.1 is not supported on this platform\ntorch 2.14.1 requires sympy, which is not installed.\n",
            FakeHost(ARM_DEBUG, SBSA_WHEEL),
        )
    with pytest.raises(AssertionError, match="nvidia-cusparselt-cu13 is not supported on this platform"):
        _check("nvidia-cusparselt-cu13 0.8.1 is not supported on this platform\n", FakeHost(AMD_DEBUG, SBSA_WHEEL))
    with pytest.raises(AssertionError, match="listed no compatible tags"):
        _check("nvidia-cusparselt-cu13 0.8.1 is not supported on this platform\n", FakeHost("", SBSA_WHEEL))
