"""Which images may be published: only one whose latest smoke result is about the image's current
content hash and the very image the engine now holds, and whose verdict is `passed` (a CUDA/ROCm
image tested without a GPU, `gpu-skipped`, only when the caller accepts that; the record says so)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builder.model import results
from builder.model.plan import ImageSpec
from builder.model.results import SmokeResult
from builder.util.errors import UserError


@dataclass(frozen=True)
class Decision:
    id: str
    ok: bool
    reason: str  # why not; or what was accepted
    result: SmokeResult | None = None  # the smoke result it rests on


def read_result(results_dir: Path, image_id: str) -> SmokeResult | None:
    """For readers that only act on a result (nightly): one this tool cannot vouch for counts as
    none. Publish and the report use `results.load` themselves, to say why they leave one out."""
    try:
        return results.load(results_dir, image_id)
    except UserError:
        return None


def decide(spec: ImageSpec, result: SmokeResult | None, image_id: str | None, accept_gpu_skipped: bool) -> Decision:
    """`image_id`: what the engine holds under spec.tag now (None: not built)."""
    if image_id is None:
        return Decision(spec.id, False, "not built: run `builder build` and `builder test` first")
    if result is None:
        return Decision(spec.id, False, "never tested: run `builder test` first; nothing untested is published")
    if result.content_hash != spec.content_hash:
        return Decision(spec.id, False, "its last test was of another build (content hash differs): run `builder build` and `builder test`")
    if not results.is_good(result.verdict):
        first = next(iter(result.failures), "")
        return Decision(spec.id, False, f"its smoke tests {result.verdict}{': ' + first[:200] if first else ''}")
    if result.image_id != image_id:
        return Decision(spec.id, False, "the image changed since it was tested (another build under its tag): run `builder test` again")
    if not results.publishable(result.verdict, accept_gpu_skipped):
        return Decision(
            spec.id,
            False,
            "gpu-skipped: tested on a host without its GPU; pass --accept-gpu-skipped to publish it anyway (the record says so)",
        )
    accepted = "passed" if result.verdict == "passed" else "gpu-skipped, accepted with --accept-gpu-skipped (no GPU ran it)"
    return Decision(spec.id, True, accepted, result)
