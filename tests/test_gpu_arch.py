"""The compute-capability table: lookups, and the loader's refusal of broken tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.compat import gpu_arch
from builder.util.errors import UserError


@pytest.mark.parametrize(
    ("framework", "variant", "version", "expected"),
    [
        ("torch", "cu130", "2.9.1", ("7.5", "12.0")),
        ("torch", "cu132", "2.14.0", ("7.5", "12.0")),
        ("torch", "cu126", "2.9.1", ("5.0", "9.0")),
        ("torch", "cu126", "2.6.0", ("5.0", "9.0")),
        ("torch", "cu130", "2.13.0", ("7.5", "12.0")),
        ("torch", "cu128", "2.8.0", ("7.0", "12.0")),
        ("torch", "cu129", "2.10.0", ("7.0", "12.0")),
        ("torch", "cu128", "2.7.1", ("5.0", None)),
        ("torch", "cu124", "2.5.1", ("5.0", "9.0")),
        ("torch", "cu124", "2.5.1+cu124", ("5.0", "9.0")),
        ("torch", "cu121", "2.4.1", ("5.0", "9.0")),
        ("torch", "cu118", "2.5.1", ("3.7", "9.0")),
        ("jax", "cuda12", "0.4.35", ("5.2", None)),
        ("jax", "cuda13", "0.8.0", ("7.5", None)),
        ("numba", "cu12", "0.60.0", ("5.0", "12.1")),
        ("numba", "cuda13", "0.67.0", ("7.5", "12.1")),
    ],
)
def test_supported_cc_known(framework: str, variant: str, version: str, expected: tuple[str, str | None]) -> None:
    assert gpu_arch.supported_cc(framework, variant, version) == expected


@pytest.mark.parametrize(
    ("framework", "variant", "version"),
    [
        ("torch", "cu118", "2.8.0"),  # no cu118 wheels from 2.8 on
        ("torch", "cu117", "2.0.1"),  # no facts
        ("torch", "cu132", "2.11.0"),  # no cu132 wheels before 2.12
        ("torch", "cu130", "2.8.0"),
        ("torch", "rocm6.2", "2.5.1"),
        ("torch", "cpu", "2.5.1"),
        ("torch", None, "2.5.1"),
        ("tensorflow", "cuda12", "2.18.0"),
        ("cupy", "cuda12x", "13.3.0"),
        ("jax", "cpu", "0.4.35"),
    ],
)
def test_supported_cc_unknown_is_none(framework: str, variant: str | None, version: str) -> None:
    assert gpu_arch.supported_cc(framework, variant, version) is None


def test_contains_compares_numerically_and_inclusively() -> None:
    row = gpu_arch.lookup("torch", "cu130", "2.9.1")
    assert row is not None
    assert row.contains("7.5") and row.contains("10.0") and row.contains("12.0")
    assert row.contains("12.1")  # sm_120 SASS runs on 12.1 (same major)
    assert not row.contains("7.0") and not row.contains("13.0") and not row.contains("6.1")
    assert not row.jit_only("13.0")  # 2.9 cu130 ships no PTX
    newer = gpu_arch.lookup("torch", "cu130", "2.12.0")
    assert newer is not None and newer.jit_only("13.0") and not newer.jit_only("12.1")
    cu126 = gpu_arch.lookup("torch", "cu126", "2.9.1")
    assert cu126 is not None and cu126.contains("8.9") and not cu126.contains("10.0")
    open_ended = gpu_arch.lookup("jax", "cuda12", "0.4.35")
    assert open_ended is not None and open_ended.contains("12.1") and not open_ended.contains("5.0")
    assert row.label == "7.5-12.0" and open_ended.label == ">= 5.2"


def test_variants_for_suggests_what_covers_the_gpu_newest_first() -> None:
    assert gpu_arch.variants_for("torch", "2.9.1", "6.1") == ("cu126",)
    assert gpu_arch.variants_for("torch", "2.9.1", "9.0") == ("cu130", "cu129", "cu128", "cu126")
    assert gpu_arch.variants_for("torch", "2.5.1", "3.7") == ("cu118",)
    assert gpu_arch.variants_for("torch", "2.9.1", "3.7") == ()
    assert gpu_arch.variants_for("torch", "2.14.0", "12.0")[:2] == ("cu132", "cu130")


def test_shipped_table_is_sorted_sourced_and_loads() -> None:
    rows = gpu_arch.load_table(gpu_arch.TABLE_PATH)
    assert rows == gpu_arch.default_table()
    assert all(row.source for row in rows)
    assert {row.framework for row in rows} == {"jax", "numba", "torch"}


GOOD_ROW = """\
  - framework: torch
    variants: [cu126]
    cc_min: "5.0"
    cc_max: "9.0"
    source: [S7]
"""


def _load(tmp_path: Path, text: str) -> tuple[gpu_arch.ArchRange, ...]:
    path = tmp_path / "gpu_arch.yaml"
    path.write_text("schema: 1\n" + text, encoding="utf-8")
    return gpu_arch.load_table(path)


def test_loader_accepts_a_minimal_table(tmp_path: Path) -> None:
    rows = _load(tmp_path, "rows:\n" + GOOD_ROW)
    assert rows == (gpu_arch.ArchRange("torch", ("cu126",), "5.0", "9.0", source=("S7",)),)
    assert gpu_arch.supported_cc("torch", "cu126", "2.9.0", rows) == ("5.0", "9.0")


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("rows:\n" + GOOD_ROW.replace("source:", "sources:"), "unknown key(s) sources"),
        ("rows:\n" + GOOD_ROW + "    color: red\n", "unknown key(s) color"),
        ("rows:\n" + GOOD_ROW.replace('cc_min: "5.0"', 'cc_min: "9.5"'), "cc_min 9.5 > cc_max 9.0"),
        ("rows:\n" + GOOD_ROW.replace('cc_max: "9.0"', 'cc_max: "nine"'), "malformed `cc_max`"),
        ("rows:\n" + GOOD_ROW + '    since: "2.x"\n', "malformed `since`"),
        ("rows:\n" + GOOD_ROW + "    since: 2.10\n", "must be a quoted string"),
        ("rows:\n" + GOOD_ROW + '    since: "2.8"\n    before: "2.8"\n', "since 2.8 is not before"),
        ("rows:\n" + GOOD_ROW.replace("[S7]", "[Sx]"), "malformed `source`"),
        ("rows:\n" + GOOD_ROW.replace("source: [S7]", "source: []"), "non-empty list"),
        ("rows:\n" + GOOD_ROW.replace("    source: [S7]\n", ""), "missing key(s) source"),
        ("rows:\n" + GOOD_ROW + "    ptx: maybe\n", "`ptx` must be true or false"),
        ("rows:\n" + GOOD_ROW + GOOD_ROW.replace("torch", "jax"), "row 2 is out of order"),
        ("rows:\n" + GOOD_ROW + GOOD_ROW, "rows 1 and 2 both cover torch ['cu126']"),
        ("rows: []\n", "`rows` must be a non-empty list"),
        ("rows:\n" + GOOD_ROW + "extra: 1\n", "exactly one key `rows`"),
        ("rows:\n  - just a string\n", "a row must be a mapping"),
        ("rows: [\n", "cannot read the GPU architecture table"),
    ],
)
def test_loader_refuses_a_broken_table(tmp_path: Path, text: str, complaint: str) -> None:
    with pytest.raises(UserError) as caught:
        _load(tmp_path, text)
    assert complaint in str(caught.value)


def test_loader_allows_adjacent_version_ranges(tmp_path: Path) -> None:
    before = GOOD_ROW + '    before: "2.8"\n'
    since = GOOD_ROW.replace('cc_min: "5.0"', 'cc_min: "7.0"') + '    since: "2.8"\n'
    rows = _load(tmp_path, "rows:\n" + before + since)
    assert gpu_arch.supported_cc("torch", "cu126", "2.7.1", rows) == ("5.0", "9.0")
    assert gpu_arch.supported_cc("torch", "cu126", "2.8.0", rows) == ("7.0", "9.0")


def test_loader_refuses_overlapping_version_ranges(tmp_path: Path) -> None:
    open_ended = GOOD_ROW
    since = GOOD_ROW + '    since: "2.8"\n'
    with pytest.raises(UserError, match="both cover"):
        _load(tmp_path, "rows:\n" + open_ended + since)


def test_loader_reports_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read"):
        gpu_arch.load_table(tmp_path / "absent.yaml")
