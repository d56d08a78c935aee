"""An in-memory registry (builder/engine/registry.py's Registry protocol): manifests by repository
and reference (tag or digest), blobs by digest, and faults on request. `evidence_image` stores an
evidence tag as the engine's push leaves it (a one-layer image whose layer is a gzip'd tar)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Mapping

from builder.catalog.indexes import DOCKER_MANIFEST
from builder.catalog.store import Catalog
from builder.engine.port import EngineFault
from builder.engine.registry import Manifest, digest_of
from builder.publish import evidence


class FakeRegistry:
    def __init__(self) -> None:
        self.manifests: dict[tuple[str, str], Manifest] = {}  # (repository, tag or digest) -> manifest
        self.blobs: dict[tuple[str, str], bytes] = {}  # (repository, digest) -> bytes
        self.puts: list[tuple[str, str, str]] = []  # repository, tag, media type of each put
        self.asked: list[tuple[str, str]] = []  # (repository, reference) of each manifest read
        self.refuse_puts = False
        self.fault: EngineFault | None = None  # raised by every read

    def image(self, repository: str, tag: str, content: str) -> str:
        """A platform's image manifest, as the engine's push would leave it; its digest."""
        body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "config": {"digest": content}}).encode()
        manifest = Manifest(DOCKER_MANIFEST, digest_of(body), body)
        self.manifests[repository, tag] = self.manifests[repository, manifest.digest] = manifest
        return manifest.digest

    def tag(self, repository: str, tag: str, digest: str, media_type: str = DOCKER_MANIFEST, body: bytes = b"{}") -> None:
        """repository:tag pointing at `digest` (an image whose manifest bytes the test does not care about)."""
        self.manifests[repository, tag] = self.manifests[repository, digest] = Manifest(media_type, digest, body)

    def evidence_image(self, repository: str, tag: str, files: Mapping[str, bytes], compress: bool = True) -> str:
        """A FROM-scratch image holding `files` at its root, pushed as repository:tag; its digest."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in sorted(files.items()):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        layer = gzip.compress(buf.getvalue(), mtime=0) if compress else buf.getvalue()
        self.blobs[repository, digest_of(layer)] = layer
        config = json.dumps({"rootfs": {"type": "layers"}, "for": tag}).encode()
        self.blobs[repository, digest_of(config)] = config
        body = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": DOCKER_MANIFEST,
                "config": {"digest": digest_of(config), "size": len(config)},
                "layers": [{"digest": digest_of(layer), "size": len(layer)}],
            }
        ).encode()
        manifest = Manifest(DOCKER_MANIFEST, digest_of(body), body)
        self.manifests[repository, tag] = self.manifests[repository, manifest.digest] = manifest
        return manifest.digest

    def manifest(self, repository: str, reference: str) -> Manifest:
        self.asked.append((repository, reference))
        if self.fault is not None:
            raise self.fault
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

    def blob(self, repository: str, digest: str, limit: int) -> bytes:
        if self.fault is not None:
            raise self.fault
        found = self.blobs.get((repository, digest))
        if found is None:
            raise EngineFault(f"{repository}@{digest}: the registry answered 404 to reading the blob", 404)
        if len(found) > limit:
            raise EngineFault(f"{repository}@{digest}: the blob is larger than {limit} bytes, which no evidence is")
        return found


def published(catalog: Catalog) -> FakeRegistry:
    """The registry as `builder publish` leaves it for `catalog`: each record's immutable and floating
    tags at its digest, its .sbom and .att tags holding catalog/evidence/'s files."""
    registry = FakeRegistry()
    for record in catalog.load():
        repository, _, digest = record.digest.partition("@")
        for tag in (record.tag, *record.floating):
            registry.tag(repository, tag.rpartition(":")[2], digest)
        folder = catalog.evidence
        sbom = folder / evidence.sbom_name(record.id)
        statement = folder / evidence.statement_name(record.id)
        if sbom.is_file():
            registry.evidence_image(repository, evidence.evidence_tag(digest, "sbom"), {evidence.SBOM_FILE: sbom.read_bytes()})
        if statement.is_file():
            att = {evidence.STATEMENT_FILE: statement.read_bytes()}
            signature = folder / f"{statement.name}{evidence.SIG}"
            if signature.is_file():
                att[evidence.STATEMENT_FILE + evidence.SIG] = signature.read_bytes()
            registry.evidence_image(repository, evidence.evidence_tag(digest, "att"), att)
    return registry
