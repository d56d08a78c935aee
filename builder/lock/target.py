"""What an image's lock is resolved for, and the hash of those inputs (pure).

The inputs are what the matrix decides: the top-level pins, the constraints, the Python, the
platform its OS's glibc allows, the plan's framework indexes. The host's mirrors, wheelhouse and
CA change how a lock is resolved, not what it locks, so they are not inputs: a lock made on one
machine checks as current on another.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from builder.compat.facts import Compat
from builder.model.image_entry import LockState
from builder.model.plan import AMD64, ARM64, ImageSpec
from builder.model.versions import Release
from builder.util.errors import UserError

SCHEMA = 1  # bump when the resolution procedure changes what a lock holds
MAX_MANYLINUX = (2, 40)  # the newest manylinux tag uv knows (x86_64 and aarch64 alike)
ARCH = {AMD64: "x86_64", ARM64: "aarch64"}  # an image's platform -> the wheel tags' architecture (uv's --python-platform)
PYPI = "https://pypi.org/simple"


@dataclass(frozen=True)
class LockTarget:
    image: str
    requirements: tuple[str, ...]
    constraints: tuple[str, ...]
    python: str
    platform: str  # uv's --python-platform, e.g. x86_64-manylinux_2_36, aarch64-manylinux_2_36
    indexes: tuple[str, ...]  # the plan's framework indexes, besides the default index

    @property
    def inputs(self) -> str:
        doc = {
            "schema": SCHEMA,
            "requirements": sorted(self.requirements),
            "constraints": sorted(self.constraints),
            "python": self.python,
            "platform": self.platform,
            "indexes": list(self.indexes),
        }
        return "sha256:" + hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def platform_for(os_name: str, compat: Compat, platform: str = AMD64) -> str:
    """uv's --python-platform for an OS's glibc on an image platform: x86_64-manylinux_2_36."""
    glibc = dict(compat.os_glibc).get(os_name)
    if glibc is None:
        known = ", ".join(name for name, _ in compat.os_glibc)
        raise UserError(
            f"os {os_name} has no glibc in builder/compat/data/compat.yaml (os_glibc; known: {known}); add it to lock its images"
        )
    major, minor = min(Release.parse(glibc).major_minor, MAX_MANYLINUX)
    return f"{ARCH[platform]}-manylinux_{major}_{minor}"


def target_for(spec: ImageSpec, compat: Compat) -> LockTarget:
    return LockTarget(
        image=spec.id,
        requirements=spec.packages,
        constraints=spec.constraints,
        python=spec.python,
        platform=platform_for(spec.base.os, compat, spec.platform),
        indexes=spec.index_urls,
    )


def lock_state(spec: ImageSpec, compat: Compat) -> LockState:
    """locked | stale (its inputs changed) | missing | unlocked (matrix.yaml lets it build without one)."""
    if spec.lock is not None:
        return "locked" if spec.lock.inputs == target_for(spec, compat).inputs else "stale"
    return "unlocked" if spec.unlocked else "missing"
