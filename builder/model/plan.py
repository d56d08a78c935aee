"""Typed records that flow through the pipeline: matrix -> combination -> image spec.

Everything here is frozen and plain data, so the pure half of the pipeline (load, validate,
rules, plan, render) can pass records around without any I/O.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Literal

from builder.model.locked_fit import LockedFit

Vendor = Literal["cuda", "rocm", "cpu"]
VENDORS: tuple[Vendor, ...] = ("cuda", "rocm", "cpu")
AMD64 = "linux/amd64"
ARM64 = "linux/arm64"
PLATFORMS: tuple[str, ...] = (AMD64, ARM64)  # what a base may declare; amd64 is the default
PLATFORM_ARCH = {AMD64: "amd64", ARM64: "arm64"}  # `uname -m` spelled as Docker and the fit host do


def platform_suffix(platform: str) -> str:
    """What an image id and a local base tag gain on a platform other than the default: "" or "-arm64"."""
    return "" if platform == AMD64 else f"-{PLATFORM_ARCH[platform]}"


def platform_of_id(image_id: str) -> str:
    """The platform an image id names (builder/spec/plan.py image_id): its suffix, linux/amd64 without one."""
    return next((p for p in PLATFORMS if p != AMD64 and image_id.endswith(platform_suffix(p))), AMD64)


@dataclass(frozen=True)
class TagLine:
    """The line an image belongs to, as its floating tags name it (builder/publish/tags.py composes
    them from these fields): its one framework's name and release line, its accelerator, Python
    line, OS and platform. Planned with the image (ImageSpec.tag_line) and recorded with it
    (KnownGood.tag_line), so no tag is ever parsed back out of an image id."""

    name: str  # the framework: torch
    line: str  # its release line, major.minor: 2.14
    accelerator: str  # the base's, as the id spells it: cu130, rocm7.0, cpu
    python: str  # the Python line: 3.11
    os: str  # the base's OS: debian12
    platform: str = AMD64
    wheel: str | None = None  # the wheels' variant when it is not the base's (cu126 on a cu128 base)

    @property
    def accelerator_tag(self) -> str:
        """cu130, or cu126-on-cu128 when the wheels are built for another CUDA/ROCm than the base."""
        return f"{self.wheel}-on-{self.accelerator}" if self.wheel else self.accelerator


# The shape of an image id published before records carried their tag line (the id was then the
# only record of the wheels' variant, the `-on-` part). Read only by `recorded_tag_line`.
_PUBLISHED_ID = re.compile(
    r"^(?P<name>[a-z][a-z_-]*?)(?P<line>\d+\.\d+)(?:\.[0-9a-z.]+)?-(?:(?P<wheel>[a-z]+[0-9.]*)-on-(?P<on>[a-z0-9.]+)|(?P<accel>[a-z]+[0-9.]*))"
    r"-py(?P<python>\d+\.\d+)-(?P<os>.+)$"
)


def recorded_tag_line(image_id: str, platform: str) -> TagLine | None:
    """The tag line of a record written before records carried one: the one place an image id is read
    back, because such a record keeps the wheels' variant (cu126-on-cu128) nowhere else. None for an
    id of several frameworks or another shape (it had no floating tags then either)."""
    found = _PUBLISHED_ID.match(image_id.removesuffix(platform_suffix(platform)))
    if found is None or "+" in image_id:
        return None
    accelerator = found["on"] or found["accel"]
    return TagLine(found["name"], found["line"], accelerator, found["python"], found["os"], platform, found["wheel"])


@dataclass(frozen=True)
class Base:
    """One entry of matrix.yaml `bases:`."""

    name: str
    vendor: Vendor
    os: str
    version: str | None = None  # CUDA or ROCm version; None for cpu
    image: str | None = None  # registry reference; None for a bootstrapped base
    digest: str | None = None  # sha256:... pin
    bootstrap: str | None = None  # "debootstrap" for a locally built base
    line: int = 0  # where it was declared, for error messages
    local_repository: str = "builder-base"  # where bootstrapped bases are tagged; tests use their own
    platforms: tuple[str, ...] = (AMD64,)  # the platforms it exists for (matrix.yaml `platforms:`)
    platform: str = AMD64  # the one a combination of it is for: the expansion makes one copy per platform
    packages: tuple[str, ...] = ()  # a bootstrapped base's Debian packages beside those every base has (engine/bootstrap.py PACKAGES)

    @property
    def local_tag(self) -> str:
        """Tag of a bootstrapped base inside the local engine: one per OS, platform and package set, shared
        by every base bootstrapped from it (a cpu base and a CUDA-from-wheels base of Debian 12 use the
        same); a base that adds packages (Debian's ROCm) gets its own, named after its package set."""
        extra = "-" + hashlib.sha256(" ".join(self.packages).encode()).hexdigest()[:12] if self.packages else ""
        return f"{self.local_repository}/{self.os}{extra}{platform_suffix(self.platform)}:latest"

    @property
    def cuda_from_wheels(self) -> bool:
        """A CUDA base with no CUDA inside: the framework wheels bring the CUDA user space, the
        NVIDIA Container Toolkit injects the driver at `--gpus all`."""
        return self.vendor == "cuda" and self.bootstrap is not None

    @property
    def from_ref(self) -> str:
        """What the Dockerfile's FROM line names."""
        if self.bootstrap:
            return self.local_tag
        assert self.image is not None
        return f"{self.image.split('@')[0]}@{self.digest}" if self.digest else self.image


@dataclass(frozen=True)
class Rule:
    """An `include` or `exclude` entry: key -> value (frameworks by name)."""

    fields: tuple[tuple[str, str], ...]
    line: int = 0
    key_lines: tuple[tuple[str, int], ...] = ()

    def get(self, key: str) -> str | None:
        return dict(self.fields).get(key)

    def line_of(self, key: str) -> int:
        return dict(self.key_lines).get(key, self.line)


@dataclass(frozen=True)
class Newest:
    """A `newest:` entry: on the combinations `rule` selects, only the newest `releases` releases of each
    framework that install there are planned (per base, platform, stack and Python); the older ones are
    skipped with this entry's line, so a release `builder updates --apply` adds moves the slice forward."""

    rule: Rule
    releases: int


@dataclass(frozen=True)
class Matrix:
    path: str
    registry: str
    default_select: tuple[tuple[str, int], ...]  # (select expression, line): the default selection is their union
    bases: tuple[Base, ...]
    python: tuple[str, ...]
    frameworks: tuple[tuple[str, tuple[str, ...]], ...]
    stacks: tuple[tuple[str, tuple[str, ...]], ...]
    exclude: tuple[Rule, ...] = ()
    include: tuple[Rule, ...] = ()
    index_urls: tuple[tuple[str, str], ...] = ()  # pattern -> URL override
    ca_bundle: str | None = None
    source: str = "https://github.com/example/gpu-images"
    unlocked: tuple[tuple[str, str, int], ...] = ()  # (select expression, reason, line): may build without a lock
    cuda_exceptions: tuple[tuple[str, str, int], ...] = ()  # (select, reason, line): CUDA wheels may leave the base's minor
    keep_older_gpus: tuple[tuple[str, str, int], ...] = ()  # (select, reason, line): cuDNN held below the release that dropped GPUs
    newest: tuple[Newest, ...] = ()  # the newest N releases of each framework on the combinations each entry selects
    canonical_layers: tuple[tuple[str, str, int], ...] = ()  # (select, reason, line): venv as a canonical layer made from the lock
    line_layers: tuple[tuple[str, str, int], ...] = ()  # (select, reason, line): the CUDA line's NVIDIA wheels as one shared layer

    def base(self, name: str) -> Base:
        for b in self.bases:
            if b.name == name:
                return b
        raise KeyError(name)

    def stack(self, name: str) -> tuple[str, ...]:
        return dict(self.stacks)[name]


@dataclass(frozen=True)
class Combination:
    """One point of the expansion: a base, a stack, a python and a version per framework."""

    base: Base
    stack: str
    python: str
    frameworks: tuple[tuple[str, str], ...]  # (framework, version), in stack order
    origin: str = "expansion"  # "expansion" | "include"
    line: int = 0  # the include rule's line, when origin == "include"

    @property
    def platform(self) -> str:
        return self.base.platform

    @property
    def versions(self) -> dict[str, str]:
        return dict(self.frameworks)


@dataclass(frozen=True)
class Install:
    """What one framework contributes to an image, as decided by the compatibility rules."""

    framework: str
    version: str
    requirements: tuple[str, ...]  # exact pins, e.g. "torch==2.5.1+cu124"
    index_urls: tuple[str, ...] = ()
    variant: str | None = None  # cu124 / rocm6.2 / cpu / cuda12 ...
    built_cuda: str | None = None  # CUDA the wheel was built for
    cudnn: str | None = None
    numpy_min: str | None = None  # constraints on numpy this framework imposes (major.minor)
    numpy_max: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """A rule's answer: ok with an install, or not ok with a reason a user understands."""

    ok: bool
    reason: str = ""
    install: Install | None = None
    warnings: tuple[str, ...] = ()

    @staticmethod
    def no(reason: str) -> Verdict:
        return Verdict(ok=False, reason=reason)


@dataclass(frozen=True)
class Accelerator:
    kind: Vendor
    version: str | None  # base CUDA / ROCm version
    min_driver: str | None = None  # CUDA: driver the toolkit wants (Table 3)
    mvc_driver: str | None = None  # CUDA: minor-version-compatibility floor of the major
    require_cuda: str | None = None  # NVIDIA_REQUIRE_CUDA value


@dataclass(frozen=True)
class Lock:
    """images/<id>/requirements.lock as `builder lock` wrote it: every package pinned with hashes."""

    text: str
    inputs: str  # sha256 of what it was resolved from (builder.lock.target.LockTarget.inputs)
    pins: tuple[tuple[str, str], ...]  # normalised package name -> version, sorted
    hashes: tuple[tuple[str, tuple[str, ...]], ...] = ()  # normalised package name -> its allowed sha256 digests


@dataclass(frozen=True)
class ImageSpec:
    """A planned image: everything render, build and test need to know."""

    id: str
    tag: str
    base: Base
    stack: str
    python: str
    frameworks: tuple[tuple[str, str], ...]
    installs: tuple[Install, ...]
    packages: tuple[str, ...]  # requirements.txt lines (exact pins)
    index_urls: tuple[str, ...]
    accelerator: Accelerator
    python_packages: tuple[str, ...] = ()  # OS packages that provide the interpreter
    python_bin: str = "python3"
    warnings: tuple[str, ...] = ()
    content_hash: str = ""
    constraints: tuple[str, ...] = ()  # what keeps a CUDA-from-wheels image's CUDA wheels on its CUDA (lock, install)
    lock: Lock | None = None  # the image's requirements.lock, when `builder lock` made one
    unlocked: str | None = None  # why matrix.yaml lets this image build without a lock
    cuda_exception: str | None = None  # why matrix.yaml lets its CUDA wheels leave the base's CUDA minor
    canonical: str | None = None  # why matrix.yaml builds its venv as a canonical layer from the lock (locked images only)
    line: str | None = None  # the CUDA line it is on (matrix.yaml `line_layers`; lock/line.py): cuda13-debian12-py3.11-amd64
    line_image: str | None = None  # its FROM while its line has a current lock: the base + the line's NVIDIA layer (engine/line_image.py)
    locked_fit: LockedFit | None = None  # images/<id>/fit.json: its fit measured from the wheels of this lock
    tag_line: TagLine | None = None  # what its floating tags name; None: no line (several frameworks, a derived image)

    @property
    def versions(self) -> dict[str, str]:
        return dict(self.frameworks)

    @property
    def platform(self) -> str:
        """linux/amd64 or linux/arm64: what it is built, locked and run for."""
        return self.base.platform


@dataclass(frozen=True)
class Skipped:
    base: str
    stack: str
    python: str
    frameworks: tuple[tuple[str, str], ...]
    reason: str
    platform: str = AMD64


@dataclass(frozen=True)
class Plan:
    images: tuple[ImageSpec, ...]
    skipped: tuple[Skipped, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)
