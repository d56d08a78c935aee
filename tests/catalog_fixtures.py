"""Known-good records for the pure catalog, publish-gate and report tests."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from builder.catalog.records import KnownGood

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
        base={"name": "local-debian12", "ref": "builder-base/debian12:latest", "id": "sha256:" + "b" * 64, "digest": None},
        lock_sha256="c" * 64,
        frameworks={stack: "2.13.0"},
        accelerator={"kind": "cpu", "version": None, "cuda": None, "cudnn": None, "rocm": None},
        python="3.11.2",
        libraries={},
        verdict="passed",
        gpu_skipped_accepted=False,
        tests={"tests": 9, "failures": 0, "errors": 0, "skipped": 1},
        host={"gpu": "no GPU", "driver": None, "engine": "20.10.24"},
        tested="2026-12-01T10:00:00Z",
        published="2026-12-01T10:05:00Z",
        builder_version="0.1.0",
        size_mb=917.0,
        manifest=f"manifests/{image_id}.txt",
    )
    return replace(base, **changes)


CUDA13 = {"kind": "cuda", "version": "13.0", "cuda": "13.0", "cudnn": "9.24.0", "rocm": None}
