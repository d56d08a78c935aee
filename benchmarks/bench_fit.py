"""What measuring a library's fit costs: builder's .nv_fatbin reader against NVIDIA's cuobjdump.

    python benchmarks/bench_fit.py [LIBRARY ...] [--repeat N]

For each library (default: tests/fixtures/cuobjdump/probe.o): the best of N timings of
builder/fit/fatbin.py and, where cuobjdump is installed (`pip install nvidia-cuda-cuobjdump` or
$BUILDER_CUOBJDUMP), of `cuobjdump --list-elf/--list-ptx/--dump-ptx`, and whether the two agree.
Exit 1 when they do not.
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

from builder.errors import UserError  # noqa: E402
from builder.fit import cuobjdump, fatbin  # noqa: E402
from builder.fit.arch import Embedded  # noqa: E402

DEFAULT = ROOT / "tests" / "fixtures" / "cuobjdump" / "probe.o"


def best(repeat: int, work: Callable[[], Embedded]) -> tuple[float, Embedded]:
    times, found = [], Embedded((), ())
    for _ in range(repeat):
        start = time.perf_counter()
        found = work()
        times.append(time.perf_counter() - start)
    return min(times), found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("libraries", nargs="*", type=Path, default=[DEFAULT])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
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
