"""Build and test overhead against the plain Docker equivalents, on the CI slice.

    python benchmarks/bench_build.py [--skip-parallel]

(a) a no-op `builder build` of the slice vs a plain `docker build` of the same staged contexts
    with a warm layer cache (target ratio <= 0.3);
(b) `builder test` per image vs a bare `docker run IMAGE hello-gpu --json` (target <= 1.3);
(c) `builder build --force --no-cache -j 2` vs `-j 1` on the slice (full rebuilds: minutes).
Needs a running engine and the slice built once (`builder build`). Prints one table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from builder.engine import settings  # noqa: E402
from builder.engine import staging as context  # noqa: E402
from builder.workspace import Workspace  # noqa: E402

BUILDER = [sys.executable, "-m", "builder"]


def timed(argv: list[str], **kwargs: object) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload]
    return time.perf_counter() - started


def noop_rebuild(ws: Workspace) -> tuple[float, float]:
    specs = ws.selected(None, use_default=True)
    builder_s = min(timed([*BUILDER, "build"]) for _ in range(3))
    chosen = settings.resolve(os.environ)
    staging = Path(tempfile.mkdtemp(prefix="bench-contexts-"))
    try:
        rendered = ws.contexts(specs)
        staged = [context.stage(s, rendered[s.id], staging, chosen) for s in specs]
        args = [
            # the classic builder, as `builder build`'s SDK builds: with the buildx plugin installed
            # (.ci/buildx.sh) the CLI's `docker build` would be BuildKit's
            ["env", "DOCKER_BUILDKIT=0", "docker", "build", "-q", "--network", "host", "-t", f"bench/{s.id}:plain", str(st.path)]
            for s, st in zip(specs, staged, strict=True)
        ]
        for argv in args:  # warm the layer cache for exactly these contexts
            timed(argv)
        docker_s = min(sum(timed(argv) for argv in args) for _ in range(3))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        for s in specs:
            subprocess.run(["docker", "rmi", "-f", f"bench/{s.id}:plain"], capture_output=True, check=False)
    return builder_s, docker_s


def test_overhead(ws: Workspace) -> list[tuple[str, float, float]]:
    rows = []
    for spec in ws.selected(None, use_default=True):
        bare = min(timed(["docker", "run", "--rm", "--network", "none", spec.tag, "hello-gpu", "--json"]) for _ in range(2))
        ours = min(timed([*BUILDER, "test", "--select", f"id={spec.id}"]) for _ in range(2))
        rows.append((spec.id, ours, bare))
    return rows


def parallel() -> tuple[float, float]:
    one = timed([*BUILDER, "build", "--force", "--no-cache", "-j", "1"])
    two = timed([*BUILDER, "build", "--force", "--no-cache", "-j", "2"])
    return one, two


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-parallel", action="store_true", help="skip (c), the two full rebuilds")
    args = parser.parse_args()
    ws = Workspace.locate(str(ROOT / "matrix.yaml"))
    subprocess.run([*BUILDER, "build", "-j", "2"], cwd=ROOT, check=True)
    rows: list[tuple[str, str, str, str, str]] = []
    ours, plain = noop_rebuild(ws)
    ratio = ours / plain
    rows.append(
        (
            "(a) no-op rebuild of the slice",
            f"builder build {ours:.2f} s",
            f"docker build (warm) {plain:.2f} s",
            f"{ratio:.2f}",
            "PASS" if ratio <= 0.3 else "MISS",
        )
    )
    for image, mine, bare in test_overhead(ws):
        ratio = mine / bare
        rows.append(
            (
                f"(b) test {image}",
                f"builder test {mine:.2f} s",
                f"docker run hello-gpu {bare:.2f} s",
                f"{ratio:.2f}",
                "PASS" if ratio <= 1.3 else "MISS",
            )
        )
    if not args.skip_parallel:
        one, two = parallel()
        subprocess.run([*BUILDER, "clean"], cwd=ROOT, check=False, capture_output=True)  # the --no-cache build stages (only the tool's own)
        rows.append(("(c) full rebuild of the slice", f"-j 2 {two:.1f} s", f"-j 1 {one:.1f} s", f"{two / one:.2f}", "(lower is better)"))
    widths = [max(len(r[i]) for r in [("case", "ours", "baseline", "ratio", "target"), *rows]) for i in range(5)]
    for row in [("case", "ours", "baseline", "ratio", "target"), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    print(f"machine: {os.cpu_count()} cores; targets: (a) <= 0.3, (b) <= 1.3")


if __name__ == "__main__":
    main()
