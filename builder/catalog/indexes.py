"""Multi-platform image indexes: one per image name (an image id without its platform suffix), in
the registry at repository:<name> and in catalog/indexes.json, naming each platform's digest.

An amd64 image's id is its name (torch2.14.1-cu130-py3.11-debian12); its arm64 sibling's id ends
in -arm64 and shares the name. When a name has known-good records for two or more platforms, publish
puts an index at repository:<name> listing the newest record of each platform, so `docker pull
repository:<name>` gets the host's platform; each platform's digest stays pullable on its own and
is the one its record (and `builder pull`) names. Pure: records in, the index's bytes out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from builder.catalog.records import DIGEST, KnownGood
from builder.model import jsonfields as jf
from builder.model.plan import PLATFORM_ARCH, platform_suffix

INDEX_FILE = "indexes.json"
SCHEMA = 1
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
VARIANTS = {"arm64": "v8"}  # what Docker and containerd write for linux/arm64


class IndexError_(ValueError):  # noqa: N801 - IndexError is a builtin
    """A malformed catalog/indexes.json entry (one line, naming the file and the name)."""


def image_name(image_id: str, platform: str) -> str:
    """The name the platforms of an image share: the id of its `platform` image without that
    platform's suffix (the id is never read for a platform: the spec or record names it)."""
    return image_id.removesuffix(platform_suffix(platform))


def members(records: Sequence[KnownGood], name: str) -> dict[str, KnownGood]:
    """platform -> the record of `name` on it (one record per id, so one per platform)."""
    return {r.platform: r for r in sorted(records, key=lambda r: r.id) if image_name(r.id, r.platform) == name}


@dataclass(frozen=True)
class Entry:
    """One platform's manifest, as the registry holds it."""

    platform: str  # linux/amd64
    digest: str  # sha256:<hex>
    size: int  # bytes of the manifest
    media_type: str


def index_body(entries: Sequence[Entry]) -> tuple[str, bytes]:
    """(media type, bytes) of the index naming `entries`, in platform order: a Docker manifest list
    when every entry is a Docker manifest (what the engine pushes), else an OCI image index.
    Deterministic: the same entries always give the same bytes, so the same digest."""
    if len({e.platform for e in entries}) != len(entries) or len(entries) < 2:
        raise ValueError(f"an index needs two or more distinct platforms, got {[e.platform for e in entries]}")
    docker = all(e.media_type == DOCKER_MANIFEST for e in entries)
    media_type = DOCKER_LIST if docker else OCI_INDEX
    manifests = []
    for entry in sorted(entries, key=lambda e: e.platform):
        os_name, _, arch = entry.platform.partition("/")
        platform: dict[str, str] = {"architecture": arch, "os": os_name}
        if arch in VARIANTS:
            platform["variant"] = VARIANTS[arch]
        manifests.append({"mediaType": entry.media_type, "digest": entry.digest, "size": entry.size, "platform": platform})
    doc = {"schemaVersion": 2, "mediaType": media_type, "manifests": manifests}
    return media_type, json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class IndexRecord:
    """What catalog/indexes.json keeps of a pushed index."""

    name: str
    tag: str  # repository:<name>
    digest: str  # repository@sha256:... of the index
    platforms: dict[str, str]  # platform -> repository@sha256:... of that platform's image (its record's digest)
    published: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "tag": self.tag, "digest": self.digest, "platforms": dict(self.platforms), "published": self.published}


def index_from_json(data: Any, where: str) -> IndexRecord:
    def fail(message: str) -> IndexError_:
        return IndexError_(f"{where}: index {str(data.get('name', '?'))[:80] if isinstance(data, dict) else '?'}: {message}")

    if not isinstance(data, dict) or set(data) != {"name", "tag", "digest", "platforms", "published"}:
        raise fail("expected an object with exactly name, tag, digest, platforms, published")
    platforms = jf.obj(data["platforms"], "platforms", fail)
    for platform, digest in platforms.items():
        if platform.partition("/")[2] not in PLATFORM_ARCH.values() or not isinstance(digest, str) or not DIGEST.match(digest):
            raise fail(f"platforms entry {platform!r} must be linux/<arch> -> repository@sha256:<hex>")
    digest = jf.text(data["digest"], "digest", fail)
    if not DIGEST.match(digest):
        raise fail("digest must be repository@sha256:<64 hex>")
    return IndexRecord(
        jf.text(data["name"], "name", fail),
        jf.text(data["tag"], "tag", fail),
        digest,
        dict(platforms),
        jf.text(data["published"], "published", fail),
    )


def render_indexes(indexes: Mapping[str, IndexRecord]) -> dict[str, Any]:
    return {"schema": SCHEMA, "indexes": [indexes[name].to_json() for name in sorted(indexes)]}
