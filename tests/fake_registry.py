"""An in-memory registry for publish's index step (builder/engine/registry.py's Registry protocol):
manifests by repository and reference (tag or digest), and faults on request."""

from __future__ import annotations

import json

from builder.catalog.indexes import DOCKER_MANIFEST
from builder.engine.port import EngineFault
from builder.engine.registry import Manifest, digest_of


class FakeRegistry:
    def __init__(self) -> None:
        self.manifests: dict[tuple[str, str], Manifest] = {}  # (repository, tag or digest) -> manifest
        self.puts: list[tuple[str, str, str]] = []  # repository, tag, media type of each put
        self.refuse_puts = False

    def image(self, repository: str, tag: str, content: str) -> str:
        """A platform's image manifest, as the engine's push would leave it; its digest."""
        body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "config": {"digest": content}}).encode()
        manifest = Manifest(DOCKER_MANIFEST, digest_of(body), body)
        self.manifests[repository, tag] = self.manifests[repository, manifest.digest] = manifest
        return manifest.digest

    def manifest(self, repository: str, reference: str) -> Manifest:
        found = self.manifests.get((repository, reference))
        if found is None:
            raise EngineFault(f"{repository}@{reference}: manifest unknown", 404)
        return found

    def put_manifest(self, repository: str, tag: str, media_type: str, body: bytes) -> str:
        if self.refuse_puts:
            raise EngineFault(f"{repository}:{tag}: the registry refused the manifest (503)", 503)
        manifest = Manifest(media_type, digest_of(body), body)
        self.manifests[repository, tag] = self.manifests[repository, manifest.digest] = manifest
        self.puts.append((repository, tag, media_type))
        return manifest.digest
