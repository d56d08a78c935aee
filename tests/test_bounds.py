"""Bounded input: a YAML alias bomb, an oversized file, a matrix that expands too far, and
tens of thousands of exclude entries are answered with one line or planned quickly, never
by running out of time or memory. (The figures are in benchmarks/bench_bounds.py.)"""

from __future__ import annotations

import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from builder.spec.expand import Excluder, excluded_by, expand
from builder.spec.matrix import MAX_COMBINATIONS, load_matrix
from builder.util import yamlsrc
from builder.util.errors import UserError
from builder.util.query import SelectorIndex, matches
from builder.util.yamlsrc import MAX_BYTES, MAX_DEPTH, MAX_EVENTS

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
        "from builder.util.errors import UserError\n"
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
    done = plan_without(path, hide_libyaml=False)
    assert f"{MAX_EVENTS:,} values or more" in done.stderr
    assert done.cpu_seconds < 1.5, done.cpu_seconds


@dataclass(frozen=True)
class Planned:
    returncode: int
    stderr: str
    cpu_seconds: float  # the child's CPU time (user + system): what it cost, whatever else runs on the machine


HIDE_LIBYAML = "import sys; sys.modules['yaml._yaml'] = None  # PyYAML then has no CSafeLoader, as where libyaml is absent\n"


def plan_without(path: Path, hide_libyaml: bool) -> Planned:
    """`builder --matrix PATH plan` in a child process, with PyYAML's C loader hidden or not."""
    code = (HIDE_LIBYAML if hide_libyaml else "") + (
        "import yaml, sys\n"
        "assert hasattr(yaml, 'CSafeLoader') is (sys.argv[1] == 'c'), 'the loader asked for'\n"
        "from builder.cli import main\n"
        "sys.argv = ['builder', '--matrix', sys.argv[2], 'plan']\n"
        "main()\n"
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-c", code, "pure" if hide_libyaml else "c", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return Planned(done.returncode, done.stderr, cpu)


HOSTILE = {
    "100,000 nested brackets": "a: " + "[" * 100_000 + "]" * 100_000 + "\n",
    "100,000 nested flow mappings": "a: " + "{a: " * 100_000 + "}" * 100_000 + "\n",
    "100,000 nested block lists": "- " * 100_000 + "x\n",
    "200,000 values in a flow list": "python: [" + ", ".join(["1"] * 200_000) + "]\n",
    "200,000 values in a block list": "python:\n" + "".join("  - 1\n" for _ in range(200_000)),
    "40,000 small mappings": "".join("- {a: 1, b: 2}\n" for _ in range(40_000)),
}


@pytest.mark.parametrize("hide_libyaml", [True, False], ids=["pure-python loader", "libyaml"])
@pytest.mark.parametrize("shape", list(HOSTILE))
def test_hostile_yaml_is_exit_2_quickly_with_either_loader(tmp_path: Path, shape: str, hide_libyaml: bool) -> None:
    """The bounds are the project's, before composing: without libyaml, 100,000 nested brackets took
    189 s before they were refused (issue 39); now every shape is one line, exit 2, in well under 2 s
    of the child's CPU time."""
    path = tmp_path / "matrix.yaml"
    path.write_text(HOSTILE[shape], encoding="utf-8")
    done = plan_without(path, hide_libyaml)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and ("nesting depth over 64" in lines[0] or "values or more" in lines[0])
    assert done.cpu_seconds < 2, (shape, done.cpu_seconds)


@pytest.mark.parametrize("loader", ["pure", "c"])
def test_nesting_is_refused_at_the_projects_depth_not_libyamls(loader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    deep = "a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n"
    shallow = "a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n"  # the mapping is the 64th level
    block = "".join("  " * level + f"k{level}:\n" for level in range(MAX_DEPTH + 1)) + "  " * (MAX_DEPTH + 1) + "x\n"
    if loader == "pure":
        monkeypatch.setattr(yamlsrc, "_LOADER", yamlsrc._PureLoader)
    for text in (deep, block):
        with pytest.raises(UserError, match=f"nesting depth over {MAX_DEPTH} levels"):
            yamlsrc.loads(text, "m.yaml")
    assert yamlsrc.loads(shallow, "m.yaml")["a"] is not None


def test_the_real_tables_are_far_below_the_value_cap() -> None:
    for path in (ROOT / "matrix.yaml", *(ROOT / "builder" / "compat" / "data").glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        events = list(yaml.parse(text, Loader=yaml.SafeLoader))
        assert len(events) * 50 < MAX_EVENTS and yamlsrc.text_values(text) * 20 < MAX_EVENTS, (path, len(events))
        depth = deepest = 0
        for event in events:
            depth += isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent))
            depth -= isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent))
            deepest = max(deepest, depth)
        assert deepest * 8 < MAX_DEPTH, (path, deepest)


def test_the_text_gate_passes_the_benchmarks_20000_exclude_entries() -> None:
    """benchmarks/bench_bounds.py plans 20,000 exclude entries: they stay under the gate."""
    entries = "".join(f'  - {{base: b{i % 400:05d}, python: "3.1{1 + i % 2}", torch: "9.{i}.0"}}\n' for i in range(20_000))
    assert yamlsrc.text_values("exclude:\n" + entries) < MAX_EVENTS
