"""The test suite's tiers timed before and after a change, side by side, in one run:

    python benchmarks/bench_suite.py [--before REF] [--after REF] [--parts setup,lint,cli,offline,integration,wheels]

Each side is a checkout of its commit (a temporary git worktree; `--after` defaults to this working
tree) sharing this checkout's .venv, and runs what `bash scripts/test.sh` runs, tier by tier:
setup (scripts/setup.sh), lint+types (ruff, ruff format, mypy, render --check, lock --check), the
CPU-seconds of one `builder` command on the embedded matrix (what each of the suite's hundreds of
CLI runs pays before it does its own work; median of five), the offline tier (`-m "not docker"`,
wall and CPU-seconds), the integration tier (`-m docker`, one pytest run, split per
file from its JUnit report, fixtures shared across files included), and a cold build of the CUDA
wheels slice (its images removed first, `--no-cache`; the after side fills the shared wheel cache
first when it has one). Needs the engine (bash .ci/docker-up.sh) and takes about twice the suite's
time; run it under `flock /tmp/docker-suite.lock` where others share the engine. Not part of the
test command.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("setup", "lint", "cli", "offline", "integration", "wheels")
WHEELS_SLICE = "base=cuda1*-debian12,platform=linux/amd64"  # arm64 images need emulation: not in this slice yet
# What scripts/test.sh sets: setup starts the second engine, the integration tier runs in two lanes
# (tests/conftest.py); a side whose conftest knows no lanes ignores them.
SECOND_ENGINE = {"BUILDER_SECOND_ENGINE": "1", "BUILDER_TEST_ENGINE2": "unix:///run/builder-engine2/docker.sock"}
LINT = (
    (".venv/bin/ruff", "check", "builder", "tests", "benchmarks"),
    (".venv/bin/ruff", "format", "--check", "builder", "tests", "benchmarks"),
    (".venv/bin/mypy", "builder", "tests"),
    (".venv/bin/python", "-m", "builder", "render", "--check"),
    (".venv/bin/python", "-m", "builder", "lock", "--check"),
)
CLI = (("render", "--check"), ("lock", "--check"), ("plan", "--format", "json"))
CLI_RUNS = 5


def run(side: Path, argv: tuple[str, ...] | list[str], *, check: bool = False) -> tuple[float, int]:
    """Seconds and exit status of one command in the side's checkout, with its own code first on the path."""
    seconds, _, status = timed(side, argv, check=check)
    return seconds, status


def timed(side: Path, argv: tuple[str, ...] | list[str], *, check: bool = False) -> tuple[float, float, int]:
    """Wall seconds, CPU-seconds (the command and its children, user + system) and exit status."""
    env = {**os.environ, "PYTHONPATH": str(side), "BUILDER_REQUIRE_DOCKER": "1", "BUILDER_REQUIRE_BROWSER": "1", **SECOND_ENGINE}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as scripts/test.sh does: each side compiles its code once, not in every run
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(list(argv), cwd=side, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if check and done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed in {side}: {done.stderr[-2000:]}")
    return seconds, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, done.returncode


def cli_cpu(side: Path) -> dict[str, str]:
    """CPU-seconds of one `builder` command on the embedded matrix, median of CLI_RUNS."""
    rows = {}
    for args in CLI:
        cpu = [timed(side, [".venv/bin/python", "-m", "builder", *args], check=True)[1] for _ in range(CLI_RUNS)]
        rows[f"builder {' '.join(args)} (CPU-s, median of {CLI_RUNS})"] = f"{statistics.median(cpu):.2f}"
    return rows


@contextmanager
def checkout(ref: str | None) -> Iterator[Path]:
    """This working tree (ref None), or a temporary worktree of ref sharing this .venv."""
    if ref is None:
        yield ROOT
        return
    folder = Path(tempfile.mkdtemp(prefix="bench-suite-")) / "repo"
    subprocess.run(["git", "worktree", "add", "--detach", str(folder), ref], cwd=ROOT, check=True, capture_output=True)
    try:
        (folder / ".venv").symlink_to(ROOT / ".venv")
        yield folder
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(folder)], cwd=ROOT, check=False, capture_output=True)
        shutil.rmtree(folder.parent, ignore_errors=True)


def per_file(report: Path) -> dict[str, float]:
    """Seconds per test file from a JUnit report (each case's setup, call and teardown)."""
    out: dict[str, float] = {}
    for case in ET.parse(report).iter("testcase"):
        name = (case.get("classname") or "").split(".")
        key = f"{name[-1] if name[-1].startswith('test_') else name[-2]}.py" if name else "?"
        out[key] = out.get(key, 0.0) + float(case.get("time") or 0)
    return out


def integration(side: Path) -> dict[str, str]:
    report = side / "build" / "bench-suite-junit.xml"
    report.parent.mkdir(parents=True, exist_ok=True)
    argv = [".venv/bin/python", "-m", "pytest", "-p", "no:cacheprovider", "-q", "-m", "docker", f"--junitxml={report}", "tests/integration"]
    seconds, status = run(side, argv)
    rows = {"integration tier (wall)": fmt(seconds, status)}
    rows.update({f"  {name}": f"{s:.0f} s" for name, s in sorted(per_file(report).items())})
    return rows


def cold_wheels_build(side: Path) -> dict[str, str]:
    """Remove the slice's images and build it with --no-cache."""
    sys.path.insert(0, str(side))
    try:
        from builder.workspace import Workspace

        tags = [spec.tag for spec in Workspace.locate(str(side / "matrix.yaml")).selected(WHEELS_SLICE, use_default=False)]
    finally:
        sys.path.remove(str(side))
    remove(tags)
    argv = [".venv/bin/python", "-m", "builder", "build", "--force", "--no-cache", "-j", "2", "--select", WHEELS_SLICE]
    seconds, status = run(side, argv)
    rows = {"cold build, CUDA wheels slice": fmt(seconds, status)}
    remove(tags)
    return rows


def remove(tags: list[str]) -> None:
    """The images of these tags, and build stages older versions kept of them (only those: the engine may be shared)."""
    for tag in tags:
        stages = subprocess.run(
            ["docker", "images", "-aq", "--filter", f"label=io.builder.stage-of={tag}"], capture_output=True, text=True, check=False
        )
        subprocess.run(["docker", "rmi", "-f", tag, *stages.stdout.split()], capture_output=True, check=False)


def fmt(seconds: float, status: int) -> str:
    return f"{seconds:.0f} s" + ("" if status == 0 else f" (exit {status})")


def measure(side: Path, parts: list[str]) -> dict[str, str]:
    rows: dict[str, str] = {}
    if "setup" in parts:
        rows["setup (scripts/setup.sh)"] = fmt(*run(side, ["bash", "scripts/setup.sh"]))
    if "lint" in parts:
        results = [run(side, argv) for argv in LINT]
        rows["lint + types + render/lock --check"] = fmt(sum(s for s, _ in results), max(c for _, c in results))
    if "cli" in parts:
        rows.update(cli_cpu(side))
    if "offline" in parts:
        argv = [".venv/bin/python", "-m", "pytest", "-p", "no:cacheprovider", "-q", "-m", "not docker"]
        seconds, cpu, status = timed(side, argv)
        rows["offline tier (-m 'not docker')"] = fmt(seconds, status)
        rows["offline tier, CPU-s"] = f"{cpu:.0f}"
    if "integration" in parts:
        rows.update(integration(side))
    if "wheels" in parts:
        rows.update(cold_wheels_build(side))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default="main", help="commit of the before side (default main)")
    parser.add_argument("--after", default=None, help="commit of the after side (default this working tree)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    args = parser.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    sides = {}
    for label, ref in (("before", args.before), ("after", args.after)):
        with checkout(ref) as side:
            print(f"== {label}: {ref or 'this working tree'} ({side})", flush=True)
            sides[label] = measure(side, parts)
    names = list(dict.fromkeys([*sides["before"], *sides["after"]]))
    rows = [("tier", "before", "after"), *((n, sides["before"].get(n, "-"), sides["after"].get(n, "-")) for n in names)]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for row in rows:
        print(f"{row[0].ljust(widths[0])}  {row[1].rjust(widths[1])}  {row[2].rjust(widths[2])}")
    print(f"machine: {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
