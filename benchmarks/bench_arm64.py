"""An arm64 image under emulation against its amd64 twin: build and smoke-test time of the same image.

    python benchmarks/bench_arm64.py [--image numba0.68.0-cpu-py3.11-debian12] ... [--slice] [--rounds N]

`--slice`: every planned arm64 image and its amd64 twin (numba CPU and CUDA, cupy, jax, both torch),
with the builds summed. A smoke test that fails emulated is shown as failed, not fatal (torch's
import crashes under qemu-user: pytorch/pytorch#188255).

For each amd64 image id given (default: the numba CPU image) and its `-arm64` twin: a full
`builder build --force --no-cache` of each (the bases bootstrapped beforehand and not counted;
their bootstrap time is printed from a first build when it had to run), then `builder test` of
each, and what costs the difference: the interpreter's start, `pip --version`, the framework's
import, each run in the image (`docker run --platform`). Target: arm64 build <= 2x amd64.
Needs a running engine, and qemu-user-static with its aarch64 handler on an amd64 host
(scripts/setup.sh). Builds under `flock /tmp/docker-suite.lock` on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import platform as host_platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from builder.model.plan import AMD64, ARM64  # noqa: E402
from builder.workspace import Workspace  # noqa: E402

BUILDER = [sys.executable, "-m", "builder"]
TARGET = 2.0
IN_IMAGE_TIMEOUT_S = 120


def timed(argv: list[str], *, may_fail: bool = False, timeout_s: float | None = None) -> float:
    """Seconds `argv` took; a failure stops the benchmark, or (may_fail) comes back negative."""
    started = time.perf_counter()
    try:
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        if may_fail:
            return -(time.perf_counter() - started)
        raise
    if done.returncode != 0:
        if may_fail:
            return -(time.perf_counter() - started)
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return time.perf_counter() - started


def fastest(runs: list[float]) -> float:
    """The fastest run that passed, else the fastest failure (negative)."""
    passed = [r for r in runs if r >= 0]
    return min(passed) if passed else max(runs)


def cell(seconds: float, digits: int = 1) -> str:
    return f"{seconds:.{digits}f} s" if seconds >= 0 else f"{-seconds:.{digits}f} s failed"


def in_image(tag: str, platform: str, command: list[str]) -> float:
    """A run may fail or hang emulated (torch's import under qemu-user crashes, or hangs after the
    crash: pytorch/pytorch#188255): shown as failed after IN_IMAGE_TIMEOUT_S, not fatal."""
    name = f"bench-arm64-{os.getpid()}-{time.monotonic_ns()}"
    argv = ["docker", "run", "--rm", "--name", name, "--network", "none", "--platform", platform, tag, *command]
    try:
        return timed(argv, may_fail=True, timeout_s=IN_IMAGE_TIMEOUT_S)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)  # a hung one; gone already otherwise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", action="append", help="an amd64 image id with an -arm64 twin (repeatable)")
    parser.add_argument("--slice", action="store_true", help="every planned arm64 image with its amd64 twin (the full arm64 slice)")
    parser.add_argument("--rounds", type=int, default=1, help="full builds of each image (the fastest counts)")
    args = parser.parse_args()
    ws = Workspace.locate(str(ROOT / "matrix.yaml"))
    plan = {s.id: s for s in ws.plan.images}
    if args.slice:
        args.image = [s.id for s in ws.plan.images if s.platform == AMD64 and f"{s.id}-arm64" in plan]
    rows: list[tuple[str, ...]] = []
    totals = {AMD64: 0.0, ARM64: 0.0}  # the builds of every pair, summed
    for amd_id in args.image or ["numba0.68.0-cpu-py3.11-debian12"]:
        if amd_id not in plan or f"{amd_id}-arm64" not in plan:
            raise SystemExit(f"{amd_id} and {amd_id}-arm64 must both be in the plan")
        pair = [plan[amd_id], plan[f"{amd_id}-arm64"]]
        build: dict[str, float] = {}
        test: dict[str, float] = {}
        for spec in pair:
            first = timed([*BUILDER, "build", "--select", f"id={spec.id}"])  # bootstraps the base when it is missing
            log = ws.build_dir / "logs" / f"base-{spec.base.os}{'' if spec.platform == AMD64 else '-arm64'}.log"
            print(f"{spec.id}: first build {first:.1f} s (base log: {log.name if log.exists() else 'base was current'})", flush=True)
            build[spec.platform] = min(
                timed([*BUILDER, "build", "--force", "--no-cache", "--select", f"id={spec.id}"]) for _ in range(args.rounds)
            )
            test[spec.platform] = fastest([timed([*BUILDER, "test", "--select", f"id={spec.id}"], may_fail=True) for _ in range(2)])
            print(f"{spec.id}: build {build[spec.platform]:.1f} s, test {cell(test[spec.platform])}", flush=True)
        for what, seconds in (("build --force --no-cache", build), ("test", test)):
            ratio = abs(seconds[ARM64]) / abs(seconds[AMD64])
            verdict = ("PASS" if ratio <= TARGET else "MISS") if what.startswith("build") else ""
            rows.append((f"{what} {amd_id}", cell(seconds[AMD64]), cell(seconds[ARM64]), f"{ratio:.2f}", verdict))
        totals[AMD64] += build[AMD64]
        totals[ARM64] += build[ARM64]
        framework = pair[0].stack
        for label, command in (
            ("python -c pass", ["python", "-c", "pass"]),
            ("pip --version", ["python", "-m", "pip", "--version"]),
            (f"import {framework}", ["python", "-c", f"import {framework}"]),
        ):
            amd = fastest([in_image(pair[0].tag, AMD64, command) for _ in range(2)])
            arm = fastest([in_image(pair[1].tag, ARM64, command) for _ in range(2)])
            rows.append((f"  in the image: {label}", cell(amd, 2), cell(arm, 2), f"{abs(arm) / abs(amd):.2f}", ""))
        subprocess.run([*BUILDER, "clean"], cwd=ROOT, check=False, capture_output=True)  # the --no-cache build stages (only the tool's own)
    if len(args.image or []) > 1:
        ratio = totals[ARM64] / totals[AMD64]
        verdict = "PASS" if ratio <= TARGET else "MISS"
        rows.append(("build --force --no-cache, all pairs", f"{totals[AMD64]:.1f} s", f"{totals[ARM64]:.1f} s", f"{ratio:.2f}", verdict))
    header = ("case", "amd64", "arm64 (emulated)", "ratio", f"target <= {TARGET:g}")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(5)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    print(f"machine: {os.cpu_count()} cores, {host_platform.machine()}; arm64 under qemu-user (binfmt_misc)")


if __name__ == "__main__":
    main()
