"""The labels `builder build` adds to every image at build time (the render-time ones are in the
Dockerfile): one definition for the engine's build and the bake file's targets."""

from __future__ import annotations

from builder.records import ImageSpec

HASH_LABEL = "io.builder.content-hash"  # what incremental builds, publish and the smoke checks compare
REVISION_LABEL = "org.opencontainers.image.revision"


def build_labels(spec: ImageSpec, revision: str) -> dict[str, str]:
    return {HASH_LABEL: spec.content_hash, REVISION_LABEL: revision}
