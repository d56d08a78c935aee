"""What measuring a fit costs: builder's .nv_fatbin reader against NVIDIA's cuobjdump, and one
built image's measured fit against its smoke test.

    python benchmarks/bench_fit.py [LIBRARY ...] [--repeat N]
    python benchmarks/bench_fit.py --image IMAGE_ID [--repeat N]   (a Docker engine, the image built)

For each library (default: tests/fixtures/cuobjdump/probe.o): the best of N timings of
builder/fit/fatbin.py and, where cuobjdump is installed (`pip install nvidia-cuda-cuobjdump` or
$BUILDER_CUOBJDUMP), of `cuobjdump --list-elf/--list-ptx/--dump-ptx`, and whether the two agree.
Exit 1 when they do not.

With --image: the image's smoke test (`builder test`'s runner, the fit measured inside it), then the
fit alone, N times, in the same locked-down container the smoke test uses (fit/measure.py); both
printed with their ratio against the target (< 10% of the smoke test). Exit 1 when it is missed.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from builder.fit import cuobjdump, fatbin  # noqa: E402
from builder.fit.arch import Embedded  # noqa: E402
from builder.util.errors import UserError  # noqa: E402

DEFAULT = ROOT / "tests" / "fixtures" / "cuobjdump" / "probe.o"


def best(repeat: int, work: Callable[[], Embedded]) -> tuple[float, Embedded]:
    times, found = [], Embedded((), ())
    for _ in range(repeat):
        start = time.perf_counter()
        found = work()
        times.append(time.perf_counter() - start)
    return min(times), found


TARGET = 0.10  # the fit's share of the smoke test (issue 17)


def bench_image(image_id: str, repeat: int) -> int:
    """The smoke test of one built image, then its fit measured alone in the same kind of container."""
    import tempfile

    from builder.compat.rules import table
    from builder.engine.client import open_engine
    from builder.fit import measure
    from builder.host import facts as hostinfo
    from builder.smoke.args import gpu_access, run_spec
    from builder.smoke.runner import smoke_one
    from builder.workspace import Workspace

    ws = Workspace.locate(str(ROOT / "matrix.yaml"))
    specs = [s for s in ws.selected(f"id={image_id}", use_default=False) if s.id == image_id]
    if not specs:
        print(f"error: no image {image_id!r} in the plan", file=sys.stderr)
        return 2
    spec = specs[0]
    engine = open_engine()
    host = hostinfo.gather(engine=lambda: hostinfo.EngineFacts(True, engine.version(), engine.gpu_runtimes()))
    with tempfile.TemporaryDirectory() as results:
        result = smoke_one(engine, spec, host, "auto", 600, Path(results))
    access = gpu_access(spec, "auto", host)
    times = []
    with engine.container(run_spec(spec, access, host, 600)) as container:
        container.start()
        for _ in range(repeat):
            start = time.perf_counter()
            fit = measure.measure(container, sorted(spec.versions), table())
            times.append(time.perf_counter() - start)
    alone = min(times)
    ratio = alone / result.seconds if result.seconds else float("inf")
    print(f"image            {spec.id}")
    print(f"smoke test       {result.seconds:.2f} s  (verdict {result.verdict}; fit measured inside it: {result.fit is not None})")
    print(f"fit alone        {alone:.2f} s  (best of {repeat}; {len(fit.libraries)} libraries with device code)")
    print(f"ratio            {ratio:.1%}  (target < {TARGET:.0%}: {'met' if ratio < TARGET else 'MISSED'})")
    print(f"runs on          {fit.cc_label()}; driver >= {fit.driver_floor() or '?'}")
    return 0 if ratio < TARGET else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("libraries", nargs="*", type=Path, default=[DEFAULT])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--image", help="a built image's id: its smoke test against its fit measurement")
    args = parser.parse_args(argv)
    if args.image:
        return bench_image(args.image, max(1, args.repeat))
    try:
        binary: Path | None = cuobjdump.find_binary()
    except UserError:
        binary = None
    agree = True
    print(f"{'library':<40} {'MB':>7} {'fatbin ms':>10} {'cuobjdump ms':>13}  same  device code")
    for path in args.libraries:
        ours_s, ours = best(args.repeat, functools.partial(fatbin.read, path))
        theirs = "-"
        same = "n/a"
        if binary is not None:
            theirs_s, measured = best(args.repeat, functools.partial(cuobjdump.measure, path, binary))
            theirs, same = f"{theirs_s * 1000:.1f}", "yes" if measured == ours else "NO"
            agree = agree and measured == ours
        size = path.stat().st_size / 1e6
        print(f"{path.name:<40} {size:>7.1f} {ours_s * 1000:>10.2f} {theirs:>13}  {same:<4}  {ours.label}")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
