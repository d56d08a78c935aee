"""What making a canonical image's layer tars costs on the build host, this checkout against another,
side by side in one run (never a timed test):

    python benchmarks/bench_layer_make.py [--before REV] [--select EXPR] [--rounds N]

For each canonical image of `--select` (default: the Debian 12 amd64 CUDA-from-wheels slice, the suite's
wheels slice), and for the cuda13 line's NVIDIA layer, a child process of each checkout makes its layer
tars from the lock's wheels (usecases/layers.py `layer_maker`, as `builder build` calls it; the wheels
are read where they lie, their sha256 checked) and reads their bytes once, as the build's load does (a
maker that writes tar files: the files; one that hands back layers: their bytes made as they are read),
rounds interleaved (before, after, before, ...): the child's CPU-s (user + system), its wall time and
the bytes it wrote (/proc/self/io), best of the rounds. The tars of both checkouts must be the same bytes (their sha256 are compared: a difference
exits 1), so a faster maker is the same layers made faster.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
SELECT = "base=cuda1*-debian12,platform=linux/amd64"
LINE = "line"  # the job name of the cuda13 line's NVIDIA layer


def written() -> int:
    with open("/proc/self/io", encoding="ascii") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("write_bytes:"))


def _sha256(data: IO[bytes]) -> str:
    digest = hashlib.sha256()
    while chunk := data.read(1 << 20):
        digest.update(chunk)
    return digest.hexdigest()


def child(image: str, line: bool, out: Path) -> None:
    """In the checkout on PYTHONPATH: make `image`'s layers (its line's NVIDIA layer with `line`) and
    read their bytes once, as a build's load does (a maker that writes tars into a folder: those files;
    one that hands back layers: their bytes made as they are read); print JSON: cpu, wall, written,
    and each tar's sha256."""
    from builder.model.sources import BuildSettings
    from builder.usecases.layers import layer_maker
    from builder.workspace import Workspace

    ws = Workspace.locate(str(Path.cwd() / "matrix.yaml"))
    spec = next(s for s in ws.selected(f"id={image}", use_default=False))
    make: Any = layer_maker([spec], BuildSettings(), ROOT / "build" / "wheels")
    assert make is not None, f"{image} takes no layers"
    folder = out / "context"
    folder.mkdir(parents=True)
    before, io_before, started = resource.getrusage(resource.RUSAGE_SELF), written(), time.monotonic()
    try:
        made = make(spec, line=line)
    except TypeError:  # a maker before 2026-12-07's second change: it writes the tars into a folder
        make(spec, folder, line=line)
        made = None
    sums = {}
    for name, layer in sorted(made.items()) if made is not None else ():
        with layer.reader() as data:
            sums[name] = _sha256(data)
    for tar in sorted(folder.iterdir()):
        with tar.open("rb") as data:
            sums[tar.name] = _sha256(data)
    after, io_after = resource.getrusage(resource.RUSAGE_SELF), written()
    wall = time.monotonic() - started
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(json.dumps({"cpu": cpu, "wall": wall, "written": io_after - io_before, "sha256": sums}))


def run(checkout: Path, image: str, line: bool) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="bench-layer-") as scratch:
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--child", image, *(["--line"] if line else []), "--out", scratch],
            cwd=checkout,
            env=dict(os.environ, PYTHONPATH=str(checkout)),
            capture_output=True,
            text=True,
            check=False,
        )
        # the line's tar is kept in <wheels>/../layers by the wheels it holds: each round makes it anew
        shutil.rmtree(ROOT / "build" / "layers", ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"making {image}'s layers in {checkout} failed:\n{done.stderr[-3000:]}")
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="HEAD", help="the checkout to compare with (default: HEAD, this tree's last commit)")
    parser.add_argument("--select", default=SELECT, help=f"the images (default: {SELECT})")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--line", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.line, args.out)
        return 0
    sys.path.insert(0, str(ROOT))
    from builder.lock.layer import line_layer, takes_layers
    from builder.workspace import Workspace

    specs = [s for s in Workspace.locate(str(ROOT / "matrix.yaml")).selected(args.select, use_default=False) if takes_layers(s)]
    jobs = [(s.id, False) for s in specs]
    members = [s for s in specs if line_layer(s)]
    if members:
        jobs.insert(0, (members[0].id, True))
    with tempfile.TemporaryDirectory(prefix="bench-layer-before-") as scratch:
        before = Path(scratch) / "checkout"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(before), args.before], check=True, capture_output=True)
        try:
            print(
                f"{'layers of':<44} {'CPU-s before':>12} {'after':>7} {'wall before':>12} {'after':>7} {'GB written before':>18} {'after':>7}"
            )
            differ = 0
            totals = [0.0] * 6
            for image, line in jobs:
                best: dict[str, list[dict[str, object]]] = {"before": [], "after": []}
                for _ in range(args.rounds):
                    for side, checkout in (("before", before), ("after", ROOT)):
                        best[side].append(run(checkout, image, line))
                figures = []
                for key in ("cpu", "wall", "written"):
                    for side in ("before", "after"):
                        figures.append(min(float(str(r[key])) for r in best[side]))
                totals = [t + f for t, f in zip(totals, figures, strict=True)]
                same = best["before"][0]["sha256"] == best["after"][0]["sha256"]
                differ += not same
                name = f"{LINE} of {image}" if line else image
                cpu_b, cpu_a, wall_b, wall_a, gb_b, gb_a = figures
                print(
                    f"{name[:44]:<44} {cpu_b:>12.1f} {cpu_a:>7.1f} {wall_b:>12.1f} {wall_a:>7.1f} {gb_b / 1e9:>18.2f} {gb_a / 1e9:>7.2f}"
                    + ("" if same else "  TARS DIFFER")
                )
            cpu_b, cpu_a, wall_b, wall_a, gb_b, gb_a = totals
            print(f"{'all':<44} {cpu_b:>12.1f} {cpu_a:>7.1f} {wall_b:>12.1f} {wall_a:>7.1f} {gb_b / 1e9:>18.2f} {gb_a / 1e9:>7.2f}")
            print(f"tars the same bytes both ways: {len(jobs) - differ} of {len(jobs)}")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)], check=False, capture_output=True)
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
