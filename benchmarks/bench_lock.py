"""`builder lock` measured, side by side in one run (never a timed test):

    python benchmarks/bench_lock.py

1. every lockable embedded image: `builder lock --upgrade -j 2` vs one plain `uv pip compile`
   per image run one after another (the same sources and flags; a warm uv cache for both)
2. `builder lock --check` on every image (offline; target: under 1 s)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from builder.compat.rules import table  # noqa: E402
from builder.engine import settings as build_settings  # noqa: E402
from builder.engine import staging  # noqa: E402
from builder.lock.resolve import command, environment, sources, uv_binary  # noqa: E402
from builder.lock.target import lock_state, target_for  # noqa: E402
from builder.workspace import Workspace  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def timed(argv: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=ENV, check=True, capture_output=True)
    return time.perf_counter() - started


def sequential_uv(repo: Path) -> tuple[float, int]:
    """One bare `uv pip compile` per lockable image, one after another: what `builder lock` parallelises."""
    ws = Workspace(repo / "matrix.yaml")
    chosen = build_settings.resolve(os.environ)
    uv = uv_binary()
    cache = repo / "build" / "uv-cache"
    total, count = 0.0, 0
    with tempfile.TemporaryDirectory(prefix="bench-lock-") as tmp:
        folder = Path(tmp)
        for spec in ws.decided.images:
            if lock_state(spec, table()) == "unlocked":
                continue
            target = target_for(spec, table())
            requirements = folder / f"{spec.id}.in"
            requirements.write_text("".join(f"{line}\n" for line in target.requirements), encoding="utf-8")
            where = sources(staging.needed_indexes(spec, set(staging.local_wheels(spec, chosen.pip.local_dirs))), chosen)
            argv = command(uv, target, where, requirements, None, folder / f"{spec.id}.lock")
            started = time.perf_counter()
            subprocess.run(argv, env=environment(chosen, cache, where), check=True, capture_output=True)
            total += time.perf_counter() - started
            count += 1
    return total, count


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-lock-repo-") as tmp:
        repo = Path(tmp)
        shutil.copy(ROOT / "matrix.yaml", repo / "matrix.yaml")
        shutil.copytree(ROOT / "images", repo / "images")
        timed([sys.executable, "-m", "builder", "lock", "--upgrade", "-j", "2"], repo)  # warm the uv cache for both sides
        ours = timed([sys.executable, "-m", "builder", "lock", "--upgrade", "-j", "2"], repo)
        plain, count = sequential_uv(repo)
        check = min(timed([sys.executable, "-m", "builder", "lock", "--check"], repo) for _ in range(3))
    print(
        f"lock {count} images: builder lock --upgrade -j 2 {ours:.1f} s vs sequential uv pip compile {plain:.1f} s (ratio {ours / plain:.2f})"
    )
    print(f"builder lock --check (all images, offline): {check:.2f} s  [{'PASS' if check < 1 else 'MISS'}: < 1 s]")
    print(f"machine: {os.cpu_count()} cores")
    return 0 if check < 1 else 1


if __name__ == "__main__":
    sys.exit(main())
