"""Bounded input: a YAML alias bomb, an oversized file, a matrix that expands too far, and
tens of thousands of exclude entries are answered with one line or planned quickly, never
by running out of time or memory. (The figures are in benchmarks/bench_bounds.py.)"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from builder.errors import UserError
from builder.query import SelectorIndex, matches
from builder.spec.expand import Excluder, excluded_by, expand
from builder.spec.matrix import MAX_COMBINATIONS, load_matrix
from builder.yamlsrc import MAX_BYTES, MAX_EVENTS

ROOT = Path(__file__).resolve().parents[1]


def alias_bomb(levels: int = 9) -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    names = "abcdefghijklmnop"
    for prev, name in zip(names, names[1:levels], strict=False):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_one_line_and_small(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(alias_bomb(), encoding="utf-8")
    assert len(path.read_bytes()) < 500
    code = (  # VmHWM: this process's own peak (ru_maxrss would include the forking pytest's)
        "import re, sys\n"
        "from builder.errors import UserError\n"
        "from builder.spec.matrix import load_matrix\n"
        "from pathlib import Path\n"
        "try:\n    load_matrix(Path(sys.argv[1]))\nexcept UserError as exc:\n    print(exc)\n"
        "print(int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) // 1024)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    message, peak_mb = done.stdout.strip().splitlines()
    assert "YAML aliases expand this file far beyond what is written in it" in message
    assert int(peak_mb) < 100, f"peak RSS {peak_mb} MB"


def test_legitimate_aliases_still_work(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(
        'registry: r/x\nbases:\n  local: {vendor: cpu, os: debian12, bootstrap: debootstrap}\npython: &py ["3.11"]\n'
        'frameworks:\n  numba: &v ["0.68.0"]\nstacks:\n  numba: [numba]\n',
        encoding="utf-8",
    )
    assert load_matrix(path).python == ("3.11",)


def test_a_huge_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    with path.open("wb") as handle:
        handle.truncate(MAX_BYTES + 1)
    with pytest.raises(UserError, match="larger than"):
        load_matrix(path)


def test_the_combination_cap_says_how_many_and_how_to_narrow(tmp_path: Path) -> None:
    versions = ", ".join(f'"2.{i}.0"' for i in range(60))
    bases = "".join(f"  b{i}: {{vendor: cpu, os: debian12, image: debian:12}}\n" for i in range(60))
    path = tmp_path / "matrix.yaml"
    path.write_text(
        f'registry: r/x\nbases:\n{bases}python: ["3.10", "3.11", "3.12"]\nframeworks:\n  torch: [{versions}]\n  numba: [{versions}]\n'
        "stacks:\n  both: [torch, numba]\n",
        encoding="utf-8",
    )
    with pytest.raises(UserError) as caught:
        load_matrix(path)
    assert f"expands to {60 * 3 * 60 * 60:,} combinations" in caught.value.message
    assert f"more than {MAX_COMBINATIONS:,}" in caught.value.message and "narrow it" in caught.value.message
    assert caught.value.line == 2


terms = st.lists(
    st.tuples(
        st.sampled_from(["base", "stack", "python", "vendor", "torch", "numba"]), st.sampled_from(["a", "b", "c", "*", "a*", "[ab]"])
    ),
    min_size=1,
    max_size=3,
)
fields = st.dictionaries(st.sampled_from(["base", "stack", "python", "vendor", "torch", "numba"]), st.sampled_from(["a", "b", "c", "ab"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(terms, max_size=12), fields)
def test_the_selector_index_finds_the_same_first_match_as_a_scan(selectors: list[list[tuple[str, str]]], found: dict[str, str]) -> None:
    selectors_t = [tuple(s) for s in selectors]
    scan = next((i for i, s in enumerate(selectors_t) if matches(s, found)), None)
    assert SelectorIndex(selectors_t).first(found) == scan


def test_the_indexed_excluder_agrees_with_a_scan_on_the_embedded_matrix() -> None:
    matrix = load_matrix(ROOT / "matrix.yaml")
    index = Excluder(matrix)
    for combo in expand(matrix):
        assert index(combo) == excluded_by(matrix, combo)


def test_a_huge_flow_list_is_refused_in_about_a_second(tmp_path: Path) -> None:
    """15 MiB of `[1,1,1,...]` took 106 s and 2.9 GB before it was refused; now well under 1 s."""
    path = tmp_path / "matrix.yaml"
    path.write_text("python: [" + ",".join(["1"] * 7_500_000) + "]\n", encoding="utf-8")
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from builder.errors import UserError\n"
        "from builder.spec.matrix import load_matrix\n"
        "started = time.perf_counter()\n"
        "try:\n    load_matrix(Path(sys.argv[1]))\nexcept UserError as exc:\n    print(exc)\n"
        "print(time.perf_counter() - started)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True)
    message, seconds = done.stdout.strip().splitlines()
    assert f"more than {MAX_EVENTS:,} values" in message
    assert float(seconds) < 1.5, seconds


@pytest.mark.parametrize(
    "text", ["a: " + "[" * 100_000 + "]" * 100_000 + "\n", "- " * 100_000 + "x\n", "".join("- {a: 1, b: 2}\n" for _ in range(40_000))]
)
def test_nested_or_many_values_are_refused_before_composing(tmp_path: Path, text: str) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(text, encoding="utf-8")
    started = time.perf_counter()
    with pytest.raises(UserError, match="nesting depth|more than"):
        load_matrix(path)
    assert time.perf_counter() - started < 2


def test_the_real_tables_are_far_below_the_value_cap() -> None:
    for path in (ROOT / "matrix.yaml", *(ROOT / "builder" / "compat" / "data").glob("*.yaml")):
        events = sum(1 for _ in yaml.parse(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader))
        assert events * 50 < MAX_EVENTS, (path, events)
