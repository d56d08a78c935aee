"""builder/model/versions.py: versions as values, parsed from ASCII digits only."""

from __future__ import annotations

import pytest

from builder.model.versions import (
    ComputeCapability,
    Release,
    WheelVariant,
    cc_tuple,
    release_line,
    release_major,
    release_parts,
    variant_version,
)


def test_a_release_is_its_numbers() -> None:
    assert Release.parse("2.14.1+cu130") == Release((2, 14, 1))
    assert Release.parse("2.14.1").line == "2.14" and Release.parse("12").major_minor == (12, 0)
    assert Release.parse("3.10") > Release.parse("3.9"), "compared as numbers, not text"
    assert str(Release.parse(">= 580.65.06")) == "580.65.6"


@pytest.mark.parametrize("text", ["", "cu130", "\u0663.11", "\uff11\uff12.0"])
def test_a_release_without_ascii_numbers_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a release version"):
        Release.parse(text)


def test_wheel_variants() -> None:
    assert WheelVariant.parse("cu130") == WheelVariant("cu", (13, 0)) and str(WheelVariant.parse("cu124")) == "cu124"
    assert WheelVariant.parse("rocm6.2.4").version == (6, 2) and str(WheelVariant.parse("rocm7.0")) == "rocm7.0"
    assert WheelVariant.parse("cpu") == WheelVariant("cpu")
    assert str(WheelVariant.cuda("13.0.1")) == "cu130" and variant_version("cu118") == (11, 8)
    for bad in ("cu1", "cu12.4", "rocm", "cuda12", "cu\u0661\u0663\u0660"):
        with pytest.raises(ValueError):
            WheelVariant.parse(bad)


def test_compute_capabilities() -> None:
    assert ComputeCapability.parse("9.0") == ComputeCapability(9, 0) == ComputeCapability.parse("sm_90")
    assert ComputeCapability.parse("sm_90a") == ComputeCapability(9, 0, "a") and ComputeCapability.parse("100f").pair == (10, 0)
    assert ComputeCapability.parse("compute_120").pair == (12, 0) == ComputeCapability.parse("12").pair
    assert str(ComputeCapability.parse("sm_86")) == "8.6"
    assert cc_tuple("12") == (12, 0) and cc_tuple(" 9.0") == (9, 0)
    for bad in ("9.x", "\u0669.0", "sm_"):
        with pytest.raises(ValueError):
            ComputeCapability.parse(bad)
        with pytest.raises(ValueError):
            cc_tuple(bad)


def test_text_helpers_keep_what_was_written() -> None:
    assert release_parts("2.14.1+cu130") == ("2", "14", "1")
    assert release_line("3.11") == "3.11" and release_line("12") == "12" and release_major("12.8") == "12"
