"""The labels `builder build` adds to every image at build time (the render-time ones are in the
Dockerfile): one definition for the engine's build and the bake file's targets."""

from __future__ import annotations

from builder.records import ImageSpec

# On every image a build makes, from the Dockerfile's first step on (templates/Dockerfile.j2), so
# the untagged intermediate images of a failed or interrupted build can be found and removed.
BUILT_BY_LABEL = "io.builder.built-by"
BUILT_BY_VALUE = "builder"
HASH_LABEL = "io.builder.content-hash"  # what incremental builds, publish and the smoke checks compare
REVISION_LABEL = "org.opencontainers.image.revision"


def build_labels(spec: ImageSpec, revision: str) -> dict[str, str]:
    return {HASH_LABEL: spec.content_hash, REVISION_LABEL: revision}
