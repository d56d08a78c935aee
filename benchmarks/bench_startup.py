"""Benchmark: what one `builder` command costs before it does its job (imports, then the decided plan).

    .venv/bin/python benchmarks/bench_startup.py [--before REV] [--runs 21]

Every command a user, the nightly or the test suite runs is a new `python -m builder` process: it
imports the package and, for all but `--help`, reads matrix.yaml, plans it and decides each image
(its lock and measured fit read and checked: workspace.py `decided`). The suite starts some hundreds
of them. Each case runs `--runs` times in this checkout and, with `--before`, in a worktree of REV
(with this checkout's .venv), interleaved, so a machine whose speed drifts (seen: 0.2 s on a 0.6 s
command within minutes) drifts for both alike; the figure is the best run's CPU seconds (user +
system of the child), with its wall time. bench_suite.py's `cli` part runs one side after the other,
which such a machine cannot compare.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = ROOT / ".venv" / "bin" / "python"
IMAGE = "numba0.68.0-cpu-py3.11-debian12"  # the default selection's CPU image
CASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("python -c pass (the floor)", ("-c", "pass")),
    ("builder --help (the imports)", ("-m", "builder", "--help")),
    ("builder plan --select id=... (one image)", ("-m", "builder", "plan", "--select", f"id={IMAGE}", "--format", "json")),
    ("builder render --check (all images)", ("-m", "builder", "render", "--check")),
)


def one(checkout: Path, argv: tuple[str, ...]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one child run in `checkout`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    # bytecode cached, as scripts/test.sh runs the suite (the warm-up run writes it for both checkouts)
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPATH": str(checkout)}
    done = subprocess.run([str(PYTHON), *argv], cwd=checkout, env=env, capture_output=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} in {checkout} exited {done.returncode}: {done.stderr.decode()[-400:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="REV", help="also measure this revision (a git worktree), side by side")
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        checkouts = {"this checkout": ROOT}
        if args.before:
            before = Path(tmp) / "before"
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(before), args.before], check=True, capture_output=True
            )
            checkouts = {args.before: before, **checkouts}
        try:
            for folder in checkouts.values():  # bytecode compiled once, as after any first run
                one(folder, ("-m", "builder", "render", "--check"))
            best: dict[tuple[str, str], tuple[float, float]] = {}
            for _ in range(args.runs):
                for case, child in CASES:
                    for name, folder in checkouts.items():
                        found = one(folder, child)
                        best[(case, name)] = min(best.get((case, name), found), found)
        finally:
            if args.before:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(Path(tmp) / "before")], check=False)
    names = list(checkouts)
    print(f"{'case':44s}" + "".join(f"{name[:22]:>24s}" for name in names))
    for case, _ in CASES:
        cells = "".join(f"{best[(case, name)][0]:>9.2f} CPU-s {best[(case, name)][1]:5.2f} s" for name in names)
        print(f"{case:44s}{cells}")
    print(f"best of {args.runs} runs each, interleaved; CPU = user + system of the child")
    return 0


if __name__ == "__main__":
    sys.exit(main())
