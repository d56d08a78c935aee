"""The derived image as an ImageSpec (pure), so the engine builds it and the smoke checks test it
exactly as they do the base: the same frameworks, Python, accelerator and top-level pins (the
NumPy pin check then proves the environment did not move NumPy), under the environment's own id,
tag and content hash, FROM the base's digest.
"""

from __future__ import annotations

from dataclasses import replace

from builder.catalog.records import KnownGood
from builder.env.envfile import EnvFile
from builder.model.plan import Base, ImageSpec
from builder.model.versions import release_line


def base_of(record: KnownGood) -> Base:
    repository, _, digest = record.digest.partition("@")
    return Base(
        name=record.base.name,
        vendor=record.accelerator.kind,
        os=record.os,
        version=record.accelerator.version,
        image=repository,
        digest=digest,
    )


def derived_spec(env: EnvFile, record: KnownGood, planned: ImageSpec | None, content_hash: str) -> ImageSpec:
    """`planned`: the base's ImageSpec when the workspace's plan still has it (its installs and pins);
    else what the record measured."""
    base = base_of(record)
    if planned is not None:
        return replace(
            planned, id=env.id, tag=env.tag, base=base, content_hash=content_hash, warnings=(), tag_line=None, canonical=None
        )  # no line: an environment's own image
    return ImageSpec(
        id=env.id,
        tag=env.tag,
        base=base,
        stack=record.stack,
        python=release_line(record.python),
        frameworks=tuple(sorted(record.frameworks.items())),
        installs=(),
        packages=(),
        index_urls=(),
        accelerator=record.accelerator.planned,
        content_hash=content_hash,
    )
