"""`builder nightly` when nothing changed upstream vs the same slice built and tested from scratch
(never a timed test):

    python benchmarks/bench_nightly.py [--rounds N]

A temp workspace with the nightly test's matrix (jax 0.10.2 and numba 0.68.0 on the bootstrapped
Debian base), against the test's index server on 127.0.0.1 (this machine's wheels, the JSON API),
so upstream cannot move during the run. After one warm-up night:
  (a) `builder nightly` again: updates checked, every lock re-resolved, nothing rebuilt or re-tested
  (b) `builder build --force --no-cache` + `builder test`: the same slice from scratch
Target: (a) under 10% of (b). Needs the engine (bash .ci/docker-up.sh); removes what it built.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from builder.engine import client as engine  # noqa: E402
from tests.integration.test_nightly_end_to_end import MATRIX, REPOSITORY, nightly, nightly_index  # noqa: E402

TARGET = 0.10


def builder(repo: Path, *args: str) -> float:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "builder", *args],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"builder {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.monotonic() - started


def timed_nightly(repo: Path, url: str) -> float:
    started = time.monotonic()
    done = nightly(repo, url, "--no-publish")
    if done.returncode != 0:
        raise SystemExit(f"builder nightly failed ({done.returncode}): {done.stdout[-2000:]} {done.stderr[-2000:]}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="nothing-changed nightlies to time (the figure is the median)")
    args = parser.parse_args()
    client = engine.connect()
    with tempfile.TemporaryDirectory(prefix="bench-nightly-") as tmp, nightly_index(Path(tmp) / "planted") as url:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        (Path(tmp) / "planted").mkdir()
        (repo / "matrix.yaml").write_text(MATRIX, encoding="utf-8")
        try:
            warm = timed_nightly(repo, url)
            unchanged = sorted(timed_nightly(repo, url) for _ in range(args.rounds))[args.rounds // 2]
            sources = ("--no-host-settings", "--index-url", f"{url}/simple/")
            scratch_build = builder(repo, "build", "-j", "2", "--force", "--no-cache", *sources)
            scratch_test = builder(repo, "test")
        finally:
            for image in client.api.images(name=REPOSITORY):
                for tag in image.get("RepoTags") or []:
                    engine.remove_image_quietly(client, tag)
    scratch = scratch_build + scratch_test
    ratio = unchanged / scratch
    print("builder nightly, nothing changed upstream vs the same slice from scratch (jax 0.10.2 + numba 0.68.0, CPU, -j 2)")
    print(f"  warm-up night (first build of the slice)     {warm:8.1f} s")
    print(f"  (a) nightly, nothing changed (median of {args.rounds})  {unchanged:8.1f} s")
    print(f"  (b) build --force --no-cache + test          {scratch:8.1f} s  (build {scratch_build:.1f} s, test {scratch_test:.1f} s)")
    print(f"  (a) / (b) = {ratio:.3f} (target < {TARGET:.2f}: {'met' if ratio < TARGET else 'NOT met'})")


if __name__ == "__main__":
    main()
