"""benchmarks/bench_machine.py: the figures .ci/run prints about the machine a run had, from the
kernel's counters (a canned /proc and /sys/block here)."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_machine", ROOT / "benchmarks" / "bench_machine.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = _module()

STAT = """cpu  1000 0 500 8000 100 0 0 400 0 0
cpu0 500 0 250 4000 50 0 0 200 0 0
intr 1 2 3
"""


def machine(root: Path, stat: str, disks: dict[str, str]) -> tuple[Path, Path]:
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "stat").write_text(stat)
    for name, line in disks.items():
        (root / "block" / name).mkdir(parents=True, exist_ok=True)
        (root / "block" / name / "stat").write_text(line)
    return root / "proc", root / "block"


def disk(read: int, written: int, busy_ms: int) -> str:
    return f"10 0 {read} 5 20 0 {written} 7 0 {busy_ms} 12 0 0 0 0 0 0\n"


def test_the_all_cpus_line_is_read_by_name() -> None:
    assert bench.parse_cpu(STAT) == {
        "user": 1000, "nice": 0, "system": 500, "idle": 8000, "iowait": 100, "irq": 0, "softirq": 0, "steal": 400,
    }  # fmt: skip
    with pytest.raises(ValueError, match="no 'cpu' line"):
        bench.parse_cpu("intr 1 2\n")


def test_a_run_is_split_into_work_disk_waits_and_steal(tmp_path: Path) -> None:
    proc, block = machine(tmp_path, STAT, {"vda": disk(0, 0, 0), "loop0": disk(9, 9, 9)})
    before = bench.take(proc, block)
    assert set(before.disks) == {"vda"}, "loop devices are views of a file, not disks"
    after_stat = "cpu  1000 0 500 8000 100 0 0 400 0 0\n".replace("1000 0 500 8000 100 0 0 400", "61000 0 30500 52000 6100 0 0 60400")
    proc, block = machine(tmp_path, after_stat, {"vda": disk(2_000_000, 20_000_000, 50_000), "loop0": disk(9, 9, 9)})
    after = replace(bench.take(proc, block), clock=before.clock + 1000, ticks_per_s=100, cpus=2)
    lines = bench.report(replace(before, ticks_per_s=100), after)
    assert lines[0].startswith("wall 1,000 s on 2 CPUs (2,000 CPU-s): work 900 (user 600, system 300)")
    assert "waiting on disk 60, stolen by the host 600, idle 440" in lines[0]
    assert lines[0].endswith("work 45%, steal 30%, iowait 3%")
    assert lines[1:] == ["disk vda: written 10.2 GB, read 1.0 GB, busy 50 s (5% of the wall)"]


def test_a_mark_reads_back_as_it_was_taken(tmp_path: Path) -> None:
    proc, block = machine(tmp_path, STAT, {"vda": disk(1, 2, 3)})
    snapshot = bench.take(proc, block)
    path = tmp_path / "mark.json"
    path.write_text(json.dumps(asdict(snapshot)))
    assert bench.load(path) == snapshot


def test_an_unknown_command_prints_the_usage_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["nonsense"]) == 2
    assert "bench_machine.py mark FILE" in capsys.readouterr().err


def test_since_without_a_usable_mark_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.json"  # what mktemp leaves when `mark` could not run
    empty.write_text("")
    for path in (empty, tmp_path / "missing.json"):
        assert bench.main(["since", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"take one with `mark {path}` first" in err
