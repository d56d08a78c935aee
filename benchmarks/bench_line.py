"""A CUDA line's shared NVIDIA layer, measured side by side in one run (never a timed test):

    python benchmarks/bench_line.py [--select EXPR] [--before REV] [--previous REV] [--out FILE]

The images of `--select` (default: the cuda13-debian12 amd64 images: torch, jax, cupy, numba) are built
three ways on this engine, one after the other, each with `builder build -j 2`:

1. `before`: as the checkout at REV builds them (default: the last commit without matrix.yaml
   `line_layers`: every image installs all its wheels, NVIDIA's too, with one RUN), from no image of
   theirs in the engine (the bootstrapped base stays);
2. `line, cold`: as this checkout builds them, from no image of theirs and no line image: the line's
   NVIDIA image is made first, then the members
   (with `--previous REV`, first also as the checkout at REV builds them, cold the same way: two
   versions of the canonical path side by side);
3. `line, warm`: again, with the line image kept (what a second framework, or a nightly rebuild of
   one member, costs).

For each way: the wall time, and from the engine's layers (diff IDs and sizes from the history) each
image's size, the line's unique bytes against the sum of its images' sizes, and for each ordered
pair what a pull of the second image downloads once the first is there: the bytes of its layers
whose chain (that layer and every layer beneath) the first does not hold, as the engine's store and
a registry's pull skip a layer only on the same chain. Sizes are uncompressed (the engine's).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from builder.engine import client as engine  # noqa: E402
from builder.engine import sizes  # noqa: E402
from builder.engine.port import Engine  # noqa: E402
from builder.lock import line as lines  # noqa: E402
from builder.model.plan import ImageSpec  # noqa: E402
from builder.workspace import Workspace  # noqa: E402

SELECT = "base=cuda13-debian12,platform=linux/amd64"
BEFORE = "ad28eb2"  # main before the CUDA line locks


@dataclass(frozen=True)
class Way:
    name: str
    seconds: float
    layers: dict[str, list[tuple[str, int]]]  # image id -> its layers (diff ID, bytes), base first


def builder(root: Path, *args: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run([sys.executable, "-m", "builder", *args], cwd=root, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"builder {' '.join(args)} in {root} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")


def remove(client: Engine, refs: list[str]) -> None:
    for ref in refs:
        if client.inspect_image(ref) is not None:
            client.remove_image(ref)


def layers_of(client: Engine, specs: list[ImageSpec]) -> dict[str, list[tuple[str, int]]]:
    out = {}
    for spec in specs:
        base = client.inspect_image(spec.base.from_ref)
        found = sizes.layers_of(client, spec.tag, spec.base.from_ref)
        if found is None or base is None:
            raise SystemExit(f"{spec.tag} is not built on {spec.base.from_ref}")
        base_bytes = sum(size for _, size in found.sized[: found.base])
        out[spec.id] = [("base", base_bytes), *found.sized[found.base :]]
    return out


def build(root: Path, name: str, client: Engine, specs: list[ImageSpec], select: str) -> Way:
    started = time.monotonic()
    builder(root, "build", "-j", "2", "--force", "--select", select)
    return Way(name, time.monotonic() - started, layers_of(client, specs))


def chains(layers: list[tuple[str, int]]) -> list[tuple[tuple[str, ...], int]]:
    """Each layer as (its chain: the diff IDs from the base up to it, its bytes)."""
    out: list[tuple[tuple[str, ...], int]] = []
    below: tuple[str, ...] = ()
    for diff_id, size in layers:
        below = (*below, diff_id)
        out.append((below, size))
    return out


def report(way: Way) -> list[str]:
    ids = sorted(way.layers)
    total = {i: sum(size for _, size in way.layers[i]) for i in ids}
    unique: dict[tuple[str, ...], int] = {}
    for i in ids:
        unique.update(chains(way.layers[i]))
    out = [f"## {way.name}: {way.seconds:.0f} s", f"{'image':<40} {'size MB':>8}"]
    out += [f"{i:<40} {total[i] / 1e6:>8,.0f}" for i in ids]
    whole = sum(total.values())
    out.append(f"sum {whole / 1e6:,.0f} MB, unique {sum(unique.values()) / 1e6:,.0f} MB ({sum(unique.values()) / whole:.0%} of the sum)")
    out.append("a pull of the second after the first downloads (MB, % of the second's size):")
    for first in ids:
        held = {c for c, _ in chains(way.layers[first])}
        for second in ids:
            if second != first:
                need = sum(size for c, size in chains(way.layers[second]) if c not in held)
                out.append(f"  {second:<40} after {first:<40} {need / 1e6:>8,.0f} {need / total[second]:>5.0%}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--select", default=SELECT, help=f"the images (default: {SELECT})")
    parser.add_argument("--before", default=BEFORE, help=f"the revision to compare with (default: {BEFORE})")
    parser.add_argument("--previous", help="also build cold as the checkout at this revision does (e.g. an earlier canonical path)")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    args = parser.parse_args(argv)
    client = engine.open_engine()
    ws = Workspace.locate(str(ROOT / "matrix.yaml"))
    specs = list(ws.selected(args.select, use_default=False))
    line_images = sorted({s.line_image for s in specs if s.line_image})
    tags = [s.tag for s in specs]
    ways = []
    revisions = [(args.before, f"before ({args.before}: RUN installs)")]
    if args.previous:
        revisions.append((args.previous, f"line, cold, as {args.previous} builds it"))
    for revision, name in revisions:
        with tempfile.TemporaryDirectory(prefix="bench-line-") as scratch:
            checkout = Path(scratch) / "checkout"  # its own build/: no kept NVIDIA layer tar
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(checkout), revision], check=True, capture_output=True
            )
            try:
                remove(client, tags + line_images)
                ways.append(build(checkout, name, client, specs, args.select))
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(checkout)], check=False, capture_output=True)
    remove(client, tags + line_images)
    ways.append(build(ROOT, "line, cold (the line image made first)", client, specs, args.select))
    remove(client, tags)
    ways.append(build(ROOT, "line, warm (the line image kept)", client, specs, args.select))
    out = [f"# {args.select}: {', '.join(s.id for s in specs)}; lines: {', '.join(line_images) or 'none'}"]
    members = {s.line for s in specs if s.line}
    out.append(f"line locks: {', '.join(lines.rel_path(k) for k in sorted(m for m in members if m))}")
    for way in ways:
        out += ["", *report(way)]
    text = "\n".join(out)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
