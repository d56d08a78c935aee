"""Plan output formats for tools: json (the plan), github (an Actions strategy.matrix) and bake
(builder/spec/bake.py); tables are in ui/."""

from __future__ import annotations

from typing import Any

from builder.errors import UserError
from builder.records import ImageSpec, Skipped, Vendor
from builder.spec.plan import image_entry, skipped_entry

# Where a leg of .github/workflows/images.yml runs: GPU images on self-hosted runners with that
# vendor's GPU (the labels a runner is registered with), the rest on GitHub's hosted runners.
RUNNERS: dict[Vendor, tuple[str, ...]] = {
    "cuda": ("self-hosted", "linux", "x64", "nvidia"),
    "rocm": ("self-hosted", "linux", "x64", "amd"),
    "cpu": ("ubuntu-latest",),
}
MAX_MATRIX_JOBS = 256  # GitHub Actions refuses a larger strategy.matrix


def plan_json(images: tuple[ImageSpec, ...], skipped: tuple[Skipped, ...]) -> dict[str, Any]:
    return {"images": [image_entry(s) for s in images], "skipped": [skipped_entry(s) for s in skipped]}


def github_matrix(images: tuple[ImageSpec, ...]) -> dict[str, Any]:
    """`strategy: matrix: ${{ fromJSON(needs.plan.outputs.matrix) }}` consumes this as is; every
    field the workflow reads (`matrix.<field>`) is in every entry (tests/test_workflows.py)."""
    if len(images) > MAX_MATRIX_JOBS:
        raise UserError(
            f"{len(images)} images exceed GitHub's {MAX_MATRIX_JOBS} jobs per matrix; split the run with --select (e.g. vendor=cuda)"
        )
    return {
        "include": [
            {
                "id": s.id,
                "tag": s.tag,
                "base": s.base.name,
                "base_from": s.base.from_ref,
                "local_base": s.base.bootstrap is not None,
                "vendor": s.base.vendor,
                "stack": s.stack,
                "python": s.python,
                "select": f"id={s.id}",
                "gpu": s.base.vendor != "cpu",
                "runs_on": list(RUNNERS[s.base.vendor]),
            }
            for s in images
        ]
    }
