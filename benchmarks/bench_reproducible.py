"""Same lock, same image ID, for whole slices, on two engines (a run of figures, never a timed test):

    python benchmarks/bench_reproducible.py [--engine2 URL] [--select EXPR ...] [--out FILE]

For each selection (default: the CPU slice, matrix.yaml's default selection; and the cuda13 slice,
`base=cuda13-debian12,platform=linux/amd64`: the line's torch, jax and cupy and the canonical numba),
on this engine and then on the second one (default: $BUILDER_TEST_ENGINE2, the suite's second dockerd
that `BUILDER_SECOND_ENGINE=1 bash .ci/docker-up.sh` starts), from clean: every image of the
selection and every CUDA line image they build on is removed from that engine first (the bootstrapped
bases stay: where the second engine has none, `builder build` bootstraps it there, and
benchmarks/bench_base.py shows that gives the same base ID), then `builder build -j 2 --select EXPR`.
The build host's caches (build/wheels, build/layers) are shared by both runs: they hold files, and
what the engine makes of them is what is compared.

Printed, per image: the image ID each engine holds, its layer count, whether IDs and every layer diff
ID are equal; per engine and selection the wall time of the build. Exit 1 when any image differs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from builder.engine import client as engine  # noqa: E402
from builder.engine.port import Engine  # noqa: E402
from builder.model.plan import ImageSpec  # noqa: E402
from builder.workspace import Workspace  # noqa: E402

DEFAULT = ""  # the default selection
SLICES = (DEFAULT, "base=cuda13-debian12,platform=linux/amd64")
ENGINE2 = "unix:///run/builder-engine2/docker.sock"


def build(select: str, host: str | None, lock_dir: str | None) -> float:
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    if host:
        env["DOCKER_HOST"] = host
    if lock_dir:
        env["BUILDER_LOCK_DIR"] = lock_dir  # each engine its own tag locks: the tags are the same names
    started = time.monotonic()
    args = ["build", "-j", "2", *(["--select", select] if select else [])]
    done = subprocess.run([sys.executable, "-m", "builder", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"builder {' '.join(args)} on {host or 'the default engine'} failed ({done.returncode}):\n{done.stdout[-3000:]}")
    return time.monotonic() - started


def held(client: Engine, specs: list[ImageSpec]) -> dict[str, tuple[str, tuple[str, ...]]]:
    out = {}
    for spec in specs:
        found = client.inspect_image(spec.tag)
        if found is None:
            raise SystemExit(f"{spec.tag} is not on the engine after its build")
        out[spec.id] = (found.id, tuple(found.diff_ids))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine2", default=os.environ.get("BUILDER_TEST_ENGINE2") or ENGINE2, help="the second engine's DOCKER_HOST")
    parser.add_argument("--select", action="append", help="a selection to compare (repeatable; default: the CPU and cuda13 slices)")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    args = parser.parse_args(argv)
    ws = Workspace.locate(str(ROOT / "matrix.yaml"))
    second = engine.DockerEngine(docker.DockerClient(base_url=args.engine2, timeout=600))
    engines = [(None, None, engine.open_engine()), (args.engine2, "/tmp/builder-engine2", second)]
    out, differs = [], 0
    for select in args.select or SLICES:
        specs = list(ws.selected(select or None, use_default=not select))
        lines = sorted({s.line_image for s in specs if s.line_image})
        found, seconds = [], []
        for host, lock_dir, client in engines:
            for ref in [s.tag for s in specs] + lines:
                client.remove_image(ref)  # False where the engine has none
            seconds.append(build(select, host, lock_dir))
            found.append(held(client, specs))
        out += [
            "",
            f"## {select or 'the default selection'}: built from clean in {seconds[0]:.0f} s (engine 1), {seconds[1]:.0f} s (engine 2)",
        ]
        out.append(f"{'image':<42} {'image ID (engine 1)':<22} {'image ID (engine 2)':<22} {'layers':>6}  same")
        for spec in specs:
            (one, one_layers), (two, two_layers) = found[0][spec.id], found[1][spec.id]
            same = one == two and one_layers == two_layers
            differs += not same
            what = (
                "yes"
                if same
                else ("no: " + ", ".join(f"layer {i}" for i, (a, b) in enumerate(zip(one_layers, two_layers, strict=False)) if a != b))
            )
            out.append(f"{spec.id:<42} {one[:19]:<22} {two[:19]:<22} {len(one_layers):>6}  {what}")
    text = "\n".join(["# the same lock on two engines, from clean", *out])
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 1 if differs else 0


if __name__ == "__main__":
    raise SystemExit(main())
