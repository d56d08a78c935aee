"""Bounded input and concurrency, measured: figures side by side, one run (never a timed test).

    python benchmarks/bench_bounds.py [--renders 240]

1. the YAML alias bomb and a 15 MiB one-line flow list: exit code, wall time and peak memory of `builder plan`
2. a 40,000-combination matrix: `builder plan` and `builder plan --explain`, wall time
3. 20,000 exclude entries: plan with the indexed matcher vs the plain scan it replaced (80,000 is now over the YAML value cap)
4. N concurrent `builder render` of one folder: tracebacks, failures, `render --check` after
Targets (issue 6): bomb < 1 s and < 100 MB; 40k plan + explain < 5 s; 0 tracebacks, check clean.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXCLUDES = 20_000  # yamlsrc.MAX_EVENTS (200,000 values) refuses 80,000 four-key entries
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from builder.compat.rules import table  # noqa: E402
from builder.spec import expand as expand_mod  # noqa: E402
from builder.spec.matrix import load_matrix  # noqa: E402
from builder.spec.plan import make_plan  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


PEAK = (  # run builder, then report this process's own peak memory (VmHWM; ru_maxrss would include the parent's)
    "import re, runpy, sys\n"
    "sys.argv = ['builder', *sys.argv[1:]]\n"
    "try:\n    runpy.run_module('builder', run_name='__main__')\nexcept SystemExit as exc:\n    code = exc.code\nelse:\n    code = 0\n"
    "sys.stderr.write('\\nVmHWM ' + re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1) + '\\n')\n"
    "sys.exit(code)\n"
)


def cli(*args: str, cwd: Path) -> tuple[int, float, float, str]:
    """(exit code, wall seconds, peak MB of the child, stderr) of one `builder` run."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PEAK, *args], cwd=cwd, env=ENV, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    err, _, peak = done.stderr.rpartition("\nVmHWM ")
    return done.returncode, wall, int(peak.strip() or 0) / 1024, err


def alias_bomb() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    names = "abcdefghi"
    for prev, name in zip(names, names[1:], strict=False):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def big_matrix(bases: int, excludes: int = 0) -> str:
    """bases x 2 pythons x (5 torch + 4 numba) = 18 combinations per base; ~40k at 2,300 bases. The
    first base is a real Ubuntu (images are planned), the others name OSes the rules do not know
    (every combination skipped with a reason, which is what `--explain` lists)."""
    rows = "  b00000: {vendor: cpu, os: ubuntu24.04, image: ubuntu:24.04}\n"
    rows += "".join(f"  b{i:05d}: {{vendor: cpu, os: x{i}, image: ubuntu:24.04}}\n" for i in range(1, bases))
    out = (
        "registry: ghcr.io/example/gpu-images\nbases:\n" + rows + 'python: ["3.11", "3.12"]\n'
        'frameworks:\n  torch: ["2.5.1", "2.13.0", "2.14.1", "2.4.1", "2.11.0"]\n  numba: ["0.60.0", "0.68.0", "0.64.0", "0.61.0"]\n'
        "stacks:\n  torch: [torch]\n  numba: [numba]\n"
    )
    if excludes:
        out += "exclude:\n" + "".join(
            f'  - {{base: b{i % bases:05d}, python: "3.1{1 + i % 2}", torch: "9.{i}.0"}}\n' for i in range(excludes)
        )
    return out


def concurrent_renders(count: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="bench-renders-") as tmp:
        repo = Path(tmp)
        (repo / "matrix.yaml").write_bytes((ROOT / "matrix.yaml").read_bytes())
        started = time.perf_counter()
        with ThreadPoolExecutor(count) as pool:
            runs = list(pool.map(lambda _: subprocess.run(
                [sys.executable, "-m", "builder", "render"], cwd=repo, env=ENV, capture_output=True, text=True, check=False
            ), range(count)))  # fmt: skip
        wall = time.perf_counter() - started
        check = subprocess.run([sys.executable, "-m", "builder", "render", "--check"], cwd=repo, env=ENV, capture_output=True, check=False)
        leftovers = sorted(p.name for p in repo.iterdir() if p.name not in ("images", "matrix.yaml"))
        return {
            "runs": count,
            "failed": sum(r.returncode != 0 for r in runs),
            "tracebacks": sum("Traceback" in r.stderr for r in runs),
            "check": "clean" if check.returncode == 0 else "STALE",
            "leftovers": leftovers,
            "wall_s": wall,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--renders", type=int, default=240)
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench-bounds-") as tmp:
        folder = Path(tmp)
        (folder / "bomb.yaml").write_text(alias_bomb(), encoding="utf-8")
        rc, wall, peak, err = cli("--matrix", "bomb.yaml", "plan", cwd=folder)
        good = rc == 2 and wall < 1 and peak < 100
        ok &= good
        print(
            f"alias bomb ({len(alias_bomb())} bytes): exit {rc}, {wall:.2f} s, peak {peak:.0f} MB  [{'PASS' if good else 'FAIL'}: < 1 s, < 100 MB]"
        )
        print(f"  {err.strip()}")

        (folder / "flow.yaml").write_text("python: [" + ",".join(["1"] * 7_500_000) + "]\n", encoding="utf-8")
        rc, wall, peak, err = cli("--matrix", "flow.yaml", "plan", cwd=folder)
        good = rc == 2 and wall < 1.5 and peak < 200
        ok &= good
        print(
            f"15 MiB one-line flow list: exit {rc}, {wall:.2f} s, peak {peak:.0f} MB  [{'PASS' if good else 'FAIL'}: ~1 s; was 106 s, 2.9 GB]"
        )

        (folder / "big.yaml").write_text(big_matrix(2300), encoding="utf-8")
        combos = sum(1 for _ in expand_mod.expand(load_matrix(folder / "big.yaml")))
        rc1, plan_s, _, _ = cli("--matrix", "big.yaml", "plan", cwd=folder)
        rc2, explain_s, _, _ = cli("--matrix", "big.yaml", "plan", "--explain", cwd=folder)
        good = rc1 == 0 and rc2 == 0 and plan_s + explain_s < 5
        ok &= good
        print(f"{combos:,} combinations: plan {plan_s:.2f} s, plan --explain {explain_s:.2f} s  [{'PASS' if good else 'FAIL'}: sum < 5 s]")

        (folder / "excl.yaml").write_text(big_matrix(400, excludes=EXCLUDES), encoding="utf-8")
        matrix = load_matrix(folder / "excl.yaml")
        table()
        started = time.perf_counter()
        make_plan(matrix)
        indexed = time.perf_counter() - started
        sample = list(expand_mod.expand(matrix))[:200]
        started = time.perf_counter()
        for combo in sample:
            expand_mod.excluded_by(matrix, combo)
        scan_per = (time.perf_counter() - started) / len(sample)
        total = sum(1 for _ in expand_mod.expand(matrix))
        print(
            f"{EXCLUDES:,} excludes x {total:,} combinations: indexed plan {indexed:.2f} s; plain scan "
            f"{scan_per * 1000:.1f} ms per combination = ~{scan_per * total:.0f} s for the plan"
        )

    renders = concurrent_renders(args.renders)
    good = renders["failed"] == 0 and renders["tracebacks"] == 0 and renders["check"] == "clean" and not renders["leftovers"]
    ok &= good
    print(
        f"{renders['runs']} concurrent renders: {renders['failed']} failed, {renders['tracebacks']} tracebacks, "
        f"render --check {renders['check']}, leftovers {renders['leftovers'] or 'none'}, {renders['wall_s']:.1f} s  "
        f"[{'PASS' if good else 'FAIL'}]"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
