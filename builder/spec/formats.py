"""Plan output formats for tools: json (the plan) and github (an Actions strategy.matrix); tables are in ui/."""

from __future__ import annotations

from typing import Any

from builder.records import ImageSpec, Skipped
from builder.spec.plan import image_entry, skipped_entry


def plan_json(images: tuple[ImageSpec, ...], skipped: tuple[Skipped, ...]) -> dict[str, Any]:
    return {"images": [image_entry(s) for s in images], "skipped": [skipped_entry(s) for s in skipped]}


def github_matrix(images: tuple[ImageSpec, ...]) -> dict[str, Any]:
    """`strategy: matrix: ${{ fromJSON(needs.plan.outputs.matrix) }}` consumes this as is."""
    return {
        "include": [
            {
                "id": s.id,
                "base": s.base.name,
                "vendor": s.base.vendor,
                "stack": s.stack,
                "python": s.python,
                "select": f"id={s.id}",
                "gpu": s.base.vendor != "cpu",
            }
            for s in images
        ]
    }
