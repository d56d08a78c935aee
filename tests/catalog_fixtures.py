"""Known-good records and smoke results for the pure catalog, publish-gate, report and nightly tests."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from builder.catalog.records import BaseIdentity, KnownGood, MeasuredAccelerator
from builder.model.plan import Vendor
from builder.model.results import GpuUse, SmokeResult, TestCounts, TestedOn, Verdict

SHA = "0123456789abcdef" * 4


def record(image_id: str, **changes: Any) -> KnownGood:
    stack = image_id.split("2")[0].split("0")[0].rstrip("0123456789.") or "torch"
    base = KnownGood(
        id=image_id,
        tag=f"127.0.0.1:5000/gpu-images:{image_id}",
        digest=f"127.0.0.1:5000/gpu-images@sha256:{SHA}",
        floating=(),
        content_hash="sha256:" + "a" * 64,
        stack=stack,
        os="debian12",
        base=BaseIdentity("local-debian12", "builder-base/debian12:latest", "sha256:" + "b" * 64, None),
        lock_sha256="c" * 64,
        frameworks={stack: "2.13.0"},
        accelerator=MeasuredAccelerator("cpu", None),
        python="3.11.2",
        libraries={},
        verdict="passed",
        gpu_skipped_accepted=False,
        tests={"tests": 9, "failures": 0, "errors": 0, "skipped": 1},
        host=TestedOn("no GPU", None, "20.10.24"),
        tested="2026-12-01T10:00:00Z",
        published="2026-12-01T10:05:00Z",
        builder_version="0.1.0",
        size_mb=917.0,
        manifest=f"manifests/{image_id}.txt",
    )
    return replace(base, **changes)


CUDA13 = MeasuredAccelerator("cuda", "13.0", cuda="13.0", cudnn="9.24.0")


def smoke(name: str, verdict: Verdict = "passed", /, **changes: Any) -> SmokeResult:
    """A smoke result whose contents give its verdict (results.from_json recomputes it): failed
    has a failing test, gpu-skipped is a CUDA image tested without its GPU."""
    vendor: Vendor = "cuda" if verdict == "gpu-skipped" else "cpu"
    failed = verdict == "failed"
    base = SmokeResult(
        id=name,
        tag=f"127.0.0.1:5000/gpu-images:{name}",
        verdict=verdict,
        gpu=GpuUse(False, "no GPU on this host" if vendor == "cuda" else "cpu image: no GPU needed"),
        seconds=3.5,
        tests=TestCounts(tests=9, failures=int(failed), errors=0, skipped=1),
        failures=("test_x: boom",) if failed else (),
        date="2026-12-01T10:00:00Z",
        content_hash="sha256:" + "a" * 64,
        image_id="sha256:img",  # the engine's id of the tested image
        host=TestedOn("no GPU", None, "20.10.24"),
        returncode=int(failed),
        vendor=vendor,
    )
    return replace(base, **changes)
