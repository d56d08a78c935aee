"""Benchmark: plan + render of synthetic matrices of ~1,000 and ~10,000 combinations.

    .venv/bin/python benchmarks/bench_plan.py             # both sizes x both shapes, side by side
    .venv/bin/python benchmarks/bench_plan.py --profile   # plus cProfile of the largest dense run

Each size runs in its own child process, so ru_maxrss is that size's peak and not the previous one's.
The child first runs untimed-by-tracemalloc (seconds, ru_maxrss), then again under tracemalloc (peak
of Python allocations), each time into a fresh temporary images/ folder.

Targets: 1,000 combinations < 2 s and 10,000 < 20 s (plan + render), peak memory < 300 MB.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import pstats
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from builder.compat.rules import table  # noqa: E402
from builder.render import tree as render  # noqa: E402
from builder.spec.expand import expand  # noqa: E402
from builder.workspace import Workspace  # noqa: E402

SIZES = (1_000, 10_000)
TIME_TARGET = {1_000: 2.0, 10_000: 20.0}
MEMORY_TARGET_MB = 300.0

FRAMEWORKS = {
    "torch": ["2.4.1", "2.5.1", "2.6.0", "2.7.1", "2.8.0", "2.9.1", "2.11.0", "2.13.0", "2.14.1"],
    "tensorflow": ["2.16.1", "2.18.0", "2.20.0", "2.21.0"],
    "jax": ["0.4.35", "0.6.2", "0.7.0", "0.10.2", "0.11.0"],
    "cupy": ["13.3.0", "13.6.0", "14.0.0"],
    "numba": ["0.60.0", "0.64.0", "0.68.0"],
}


@dataclass(frozen=True)
class Profile:
    """How a synthetic matrix is shaped; `size` picks how many of the pool's bases it uses."""

    name: str
    oses: tuple[str, ...]
    rocm: tuple[str, ...]
    python: tuple[str, ...]
    stacks: dict[str, list[str]]


# mixed: every OS and Python a user might list; most combinations are skipped with a reason (an OS
# the interpreter table lacks, a Python the OS does not ship, a wheel that does not exist).
MIXED = Profile(
    name="mixed",
    oses=("ubuntu22.04", "ubuntu24.04", "debian12", "debian13", "ubuntu20.04", "rockylinux9"),
    rocm=("6.0", "6.1", "6.2", "6.3", "6.4", "7.0", "7.1", "7.2"),
    python=("3.10", "3.11", "3.12", "3.13"),
    stacks={name: [name] for name in FRAMEWORKS},
)
# dense: OS/Python pairs the table has, ROCm patch releases as their own bases, and multi-framework
# stacks, so far more combinations become images (the render-heavy case).
DENSE = Profile(
    name="dense",
    oses=("ubuntu22.04", "debian12", "debian13"),
    rocm=("6.0", "6.0.2", "6.1", "6.1.3", "6.2", "6.2.4", "6.3", "6.3.4", "6.4", "6.4.4", "7.0", "7.0.2", "7.1", "7.1.1", "7.2", "7.2.4"),
    python=("3.11", "3.13"),
    stacks={
        **{name: [name] for name in FRAMEWORKS},
        "torch-jax": ["torch", "jax"],
        "torch-numba": ["torch", "numba"],
        "cupy-numba": ["cupy", "numba"],
        "jax-numba": ["jax", "numba"],
    },
)
PROFILES = {p.name: p for p in (MIXED, DENSE)}


def cuda_versions() -> list[str]:
    """The newest patch of every CUDA minor in the compatibility table (11.8.0 ... 13.2.1)."""
    newest: dict[str, str] = {}
    for cuda, _ in table().cuda_toolkits:
        newest[".".join(cuda.split(".")[:2])] = cuda
    return list(newest.values())


def base_pool(profile: Profile) -> list[tuple[str, dict[str, str]]]:
    """Bases with distinct image-id parts (os, CUDA major.minor, ROCm version), interleaved so any prefix mixes vendors and OSes."""
    by_os: list[list[tuple[str, dict[str, str]]]] = []
    for os_name in profile.oses:
        row: list[tuple[str, dict[str, str]]] = [
            (f"cpu-{os_name}", {"vendor": "cpu", "os": os_name, "image": f"library/{os_name.replace('.', '')}:latest"})
        ]
        for cuda in cuda_versions():
            minor = ".".join(cuda.split(".")[:2])
            row.append(
                (
                    f"cuda{minor}-{os_name}",
                    {"vendor": "cuda", "version": cuda, "os": os_name, "image": f"nvidia/cuda:{cuda}-cudnn-runtime-{os_name}"},
                )
            )
        for rocm in profile.rocm:
            row.append(
                (
                    f"rocm{rocm}-{os_name}",
                    {"vendor": "rocm", "version": rocm, "os": os_name, "image": f"rocm/dev-{os_name.replace('.', '-')}:{rocm}"},
                )
            )
        by_os.append(row)
    pool = []
    for i in range(max(len(r) for r in by_os)):
        pool += [row[i] for row in by_os if i < len(row)]
    return pool


def combinations_per_base(profile: Profile) -> int:
    return len(profile.python) * sum(math.prod(len(FRAMEWORKS[m]) for m in members) for members in profile.stacks.values())


def write_matrix(folder: Path, size: int, profile: Profile) -> Path:
    pool = base_pool(profile)
    count = max(1, min(len(pool), round(size / combinations_per_base(profile))))
    doc: dict[str, Any] = {
        "registry": "ghcr.io/example/gpu-images",
        "bases": dict(pool[:count]),
        "python": list(profile.python),
        "frameworks": {name: versions for name, versions in FRAMEWORKS.items() if any(name in m for m in profile.stacks.values())},
        "stacks": profile.stacks,
    }
    path = folder / "matrix.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def plan_and_render(matrix_path: Path, out: Path) -> dict[str, Any]:
    started = time.perf_counter()
    ws = Workspace(matrix_path)
    plan = ws.decided  # what `builder render` plans; the content hashes come from the render itself
    planned = time.perf_counter()
    changed = render.write_tree(out, ws.rendered_tree())
    rendered = time.perf_counter()
    return {
        "combinations": sum(1 for _ in expand(ws.matrix)),
        "bases": len(ws.matrix.bases),
        "images": len(plan.images),
        "skipped": len(plan.skipped),
        "files": len(changed),
        "plan_s": planned - started,
        "render_s": rendered - planned,
    }


def run_one(size: int, profile: Profile) -> dict[str, Any]:
    """Runs in the child process: a timed run, then a tracemalloc run, each into a fresh folder."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{size}-") as tmp:
        folder = Path(tmp)
        matrix = write_matrix(folder, size, profile)
        table()  # the shipped table is loaded once per process in real use too
        result = plan_and_render(matrix, folder / "images")
        result["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        tracemalloc.start()
        plan_and_render(matrix, folder / "images-traced")
        result["tracemalloc_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        result["size"] = size
        result["profile"] = profile.name
        return result


def profile_one(size: int, profile: Profile, top: int = 25) -> str:
    with tempfile.TemporaryDirectory(prefix=f"bench-prof-{size}-") as tmp:
        folder = Path(tmp)
        matrix = write_matrix(folder, size, profile)
        table()
        profiler = cProfile.Profile()
        profiler.enable()
        plan_and_render(matrix, folder / "images")
        profiler.disable()
    stream = io.StringIO()
    stats = pstats.Stats(profiler, stream=stream).strip_dirs()
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return stream.getvalue()


def child(size: int, profile: Profile) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--one", str(size), "--shape", profile.name], capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def print_table(results: list[dict[str, Any]]) -> bool:
    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("combinations", lambda r: f"{r['combinations']:,}"),
        ("bases", lambda r: f"{r['bases']}"),
        ("images planned", lambda r: f"{r['images']:,}"),
        ("skipped", lambda r: f"{r['skipped']:,}"),
        ("files written", lambda r: f"{r['files']:,}"),
        ("seconds plan", lambda r: f"{r['plan_s']:.2f}"),
        ("seconds render", lambda r: f"{r['render_s']:.2f}"),
        ("seconds total", lambda r: f"{r['plan_s'] + r['render_s']:.2f}"),
        ("time target", lambda r: f"< {TIME_TARGET[r['size']]:.0f} s  {verdict(r['plan_s'] + r['render_s'] < TIME_TARGET[r['size']])}"),
        ("peak MB (ru_maxrss)", lambda r: f"{r['maxrss_mb']:.1f}"),
        ("peak MB (tracemalloc)", lambda r: f"{r['tracemalloc_mb']:.1f}"),
        ("memory target", lambda r: f"< {MEMORY_TARGET_MB:.0f} MB {verdict(max(r['maxrss_mb'], r['tracemalloc_mb']) < MEMORY_TARGET_MB)}"),
    ]
    width = max(len(name) for name, _ in rows)
    columns = [f"~{r['size']:,} {r['profile']}" for r in results]
    col = max(20, *(len(c) for c in columns))
    print(f"{'size':<{width}}  " + "  ".join(f"{c:>{col}}" for c in columns))
    for name, cell in rows:
        print(f"{name:<{width}}  " + "  ".join(f"{cell(r):>{col}}" for r in results))
    return all(
        r["plan_s"] + r["render_s"] < TIME_TARGET[r["size"]] and max(r["maxrss_mb"], r["tracemalloc_mb"]) < MEMORY_TARGET_MB
        for r in results
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--shape", choices=sorted(PROFILES), default="mixed", help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of the largest dense run")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, PROFILES[args.shape])))
        return 0
    results = [child(size, profile) for profile in (MIXED, DENSE) for size in SIZES]
    ok = print_table(results)
    if args.profile or not ok:
        print(f"\ncProfile of ~{SIZES[-1]:,} dense combinations (plan + render):")
        print(profile_one(SIZES[-1], DENSE))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
