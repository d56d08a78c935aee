"""Image sizes, measured on the images this engine holds (never a timed test):

    python benchmarks/bench_sizes.py [--select EXPR ...] [--out FILE]

1. every built image of the selection (default: the default selection and the CUDA-from-wheels
   images): image, venv and base size and image / (venv + base); target <= 1.05, nothing duplicated
2. where a CPU and a CUDA image of the same framework are both built: the CUDA image's extra bytes,
   split into the CUDA wheels (nvidia-*, cuda-*, *-cudaNN), the framework's own distribution (its GPU
   kernels) and the rest, from the installed files of each distribution (read in a container)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from builder.engine import client as engine  # noqa: E402
from builder.engine import sizes  # noqa: E402
from builder.model.plan import ImageSpec  # noqa: E402
from builder.workspace import Workspace  # noqa: E402

TARGET = 1.05
WHEELS_SLICE = "base=cuda1*-debian12,platform=linux/amd64"  # arm64 images need emulation: not in this slice yet


def chosen(selects: list[str]) -> list[ImageSpec]:
    ws = Workspace.locate(str(ROOT / "matrix.yaml"))
    groups = [ws.selected(expr, use_default=False) for expr in selects] or [
        ws.selected(None, use_default=True),
        ws.selected(WHEELS_SLICE, use_default=False),
    ]
    return list({s.id: s for group in groups for s in group}.values())


def mb(n: int) -> str:
    return f"{n / 1e6:,.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--select", action="append", default=[], help="a select expression, as `builder build --select`; repeat for more")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    args = parser.parse_args(argv)
    client = engine.open_engine()
    lines: list[str] = []
    measured: dict[str, tuple[ImageSpec, sizes.Sizes]] = {}
    for spec in chosen(args.select):
        found = sizes.measure(client, spec.tag, spec.base.from_ref)
        if found is not None:
            measured[spec.id] = (spec, found)
    if not measured:
        print("no image of the selection is built; run `builder build` first", file=sys.stderr)
        return 1
    lines.append(f"{'image':<48} {'image MB':>9} {'venv MB':>9} {'base MB':>9} {'ratio':>7}")
    for spec, found in measured.values():
        mark = "" if found.ratio <= TARGET else f"  over the {TARGET} target"
        lines.append(f"{spec.id:<48} {mb(found.image):>9} {mb(found.venv):>9} {mb(found.base):>9} {found.ratio:>7.4f}{mark}")
    worst = max(found.ratio for _, found in measured.values())
    lines.append(f"largest ratio {worst:.4f} (target <= {TARGET}: {'met' if worst <= TARGET else 'NOT met'})")
    lines.append("")
    lines.append("CUDA image over the CPU image of the same framework:")
    pairs = 0
    for spec, found in measured.values():
        if spec.base.vendor != "cuda":
            continue
        cpu = next((s for s, _ in measured.values() if s.base.vendor == "cpu" and s.stack == spec.stack and s.python == spec.python), None)
        if cpu is None:
            lines.append(f"  {spec.stack:<11} no CPU image of {spec.stack} built")
            continue
        pairs += 1
        split = sizes.explain_difference(sizes.per_distribution(client, cpu.tag), sizes.per_distribution(client, spec.tag), spec.stack)
        extra = found.image - measured[cpu.id][1].image
        unexplained = extra - sum(split.values())
        lines.append(
            f"  {spec.stack:<11} {spec.id} - {cpu.id} = +{mb(extra)} MB: CUDA wheels {mb(split['cuda_wheels'])} MB,"
            f" {spec.stack} itself {mb(split['framework'])} MB, other packages {mb(split['other'])} MB, not in any package {mb(unexplained)} MB"
        )
    if not pairs:
        lines.append("  none: build a CPU and a CUDA image of one framework")
    report = "\n".join(lines)
    print(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
