"""A local image `builder build` made, read back from its io.builder.* labels, for `builder doctor --image`.

The labels say what the catalog record of a published image says about its fit (accelerator and
version, the CUDA runtime and cuDNN its lock pins, its frameworks), so the image is judged by the
same `judge` as `builder fit` judges records. Label values come from an image, which anyone can
build: each is checked against the grammar it was written with, and a bad one is one line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from builder.catalog.records import BaseIdentity, KnownGood, MeasuredAccelerator
from builder.model.amd_fit import AmdFit
from builder.model.measured_fit import MeasuredFit
from builder.model.plan import AMD64, VENDORS
from builder.model.results import TestedOn
from builder.model.versions import release_line
from builder.render import labels as lb
from builder.spec import grammar
from builder.util.errors import UserError

_CC = re.compile(r"^\d{1,2}\.\d$")
_CCS = re.compile(r"^\d{1,2}\.\d( \d{1,2}\.\d)*$")
MAX_FRAMEWORKS = 16
MAX_CCS = 64


@dataclass(frozen=True)
class LabelledImage:
    ref: str  # as the person named it
    id: str
    stack: str
    python: str
    frameworks: tuple[tuple[str, str], ...]  # (name, version), as the label lists them
    accelerator: MeasuredAccelerator  # kind, the base's version, the locked CUDA runtime's major.minor and cuDNN
    cc_min: str | None  # the lowest compute capability it runs on, as rendered
    content_hash: str = ""
    runs_on: tuple[str, ...] | None = None  # every compute capability it runs on, measured from its locked wheels; None: not labelled


def from_labels(ref: str, labels: Mapping[str, str]) -> LabelledImage:
    """The image's builder labels as a typed view; UserError (one line) when it has none or one is malformed."""
    if lb.ID_LABEL not in labels or lb.ACCELERATOR_LABEL not in labels:
        raise UserError(
            f"--image {ref} has no {lb.ID_LABEL} / {lb.ACCELERATOR_LABEL} labels: not an image `builder build` made; "
            "give one it built or `builder pull` fetched"
        )

    def label(name: str, pattern: re.Pattern[str] | None = None, required: bool = True) -> str | None:
        value = labels.get(name)
        if value is None:
            if required:
                raise UserError(f"--image {ref}: label {name} is missing; rebuild it with this builder")
            return None
        if pattern is not None and not pattern.fullmatch(value):
            raise UserError(f"--image {ref}: label {name}={value[:80]!r} is malformed; rebuild it with this builder")
        return value

    kind = label(lb.ACCELERATOR_LABEL) or ""
    if kind not in VENDORS:
        raise UserError(f"--image {ref}: label {lb.ACCELERATOR_LABEL}={kind[:80]!r} is not one of {', '.join(VENDORS)}")
    version = label(lb.ACCELERATOR_VERSION_LABEL, grammar.ACCEL_VERSION, required=False)
    runtime = _version(ref, labels, lb.library_label("cuda-runtime"))
    cudnn = _version(ref, labels, lb.library_label("cudnn"))
    cuda = None
    if kind == "cuda":
        found = runtime or version
        cuda = release_line(found) if found else None  # the runtime the image loads, as major.minor
    return LabelledImage(
        ref=ref,
        id=label(lb.ID_LABEL, grammar.DOCKER_TAG) or "",
        stack=label(lb.STACK_LABEL, grammar.NAME) or "",
        python=label(lb.PYTHON_LABEL, grammar.PYTHON) or "",
        frameworks=_frameworks(ref, label(lb.FRAMEWORKS_LABEL) or ""),
        accelerator=MeasuredAccelerator(kind, version, cuda=cuda, cudnn=cudnn, rocm=version if kind == "rocm" else None),
        cc_min=label(lb.CC_MIN_LABEL, _CC, required=False),
        content_hash=labels.get(lb.HASH_LABEL, "")[:80],
        runs_on=_runs_on(ref, label(lb.RUNS_ON_LABEL, _CCS, required=False)),
    )


def _runs_on(ref: str, value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    found = tuple(value.split())
    if len(found) > MAX_CCS:
        raise UserError(f"--image {ref}: label {lb.RUNS_ON_LABEL} lists more than {MAX_CCS} compute capabilities")
    return found


def _version(ref: str, labels: Mapping[str, str], name: str) -> str | None:
    value = labels.get(name)
    if value is not None and not grammar.is_version(value):
        raise UserError(f"--image {ref}: label {name}={value[:80]!r} is not a release like 9.3.0.75; rebuild it with this builder")
    return value


def _frameworks(ref: str, value: str) -> tuple[tuple[str, str], ...]:
    """`torch=2.14.1,numpy=2.4.6` as pairs."""
    pairs = lb.parse_frameworks_label(value, MAX_FRAMEWORKS)
    if pairs is not None:
        return pairs
    first = ",".join(value.split(",")[: MAX_FRAMEWORKS + 1])  # all well formed, only too many
    if lb.parse_frameworks_label(first, MAX_FRAMEWORKS + 1) is not None:
        raise UserError(f"--image {ref}: label {lb.FRAMEWORKS_LABEL} lists more than {MAX_FRAMEWORKS} frameworks")
    raise UserError(f"--image {ref}: label {lb.FRAMEWORKS_LABEL}={value[:80]!r} is not name=version,...; rebuild it with this builder")


def as_record(image: LabelledImage) -> KnownGood:
    """The view as the record `judge` and `runs_on` read (accelerator, frameworks, id)."""
    return unpublished(
        image.id,
        image.ref,
        stack=image.stack,
        os="",
        base=BaseIdentity("", "", "", None),
        frameworks=dict(image.frameworks),
        accelerator=image.accelerator,
        python=image.python,
        libraries={},
        content_hash=image.content_hash,
    )


def unpublished(
    id: str,  # noqa: A002 - the record's field
    tag: str,
    *,
    stack: str,
    os: str,
    base: BaseIdentity,
    frameworks: dict[str, str],
    accelerator: MeasuredAccelerator,
    python: str,
    libraries: dict[str, str],
    content_hash: str = "",
    fit: MeasuredFit | None = None,
    platform: str = AMD64,
    host: str = "not recorded",
    amd: AmdFit | None = None,
) -> KnownGood:
    """An image that was not published (a local image, a planned one) as the record `judge` reads:
    no digest, no base identity, no smoke verdict (`not-built` stands for "none recorded")."""
    return KnownGood(
        id=id,
        tag=tag,
        digest="",
        floating=(),
        content_hash=content_hash,
        stack=stack,
        os=os,
        base=base,
        lock_sha256=None,
        frameworks=frameworks,
        accelerator=accelerator,
        python=python,
        libraries=libraries,
        verdict="not-built",
        gpu_skipped_accepted=False,
        tests={},
        host=TestedOn(host),
        tested="",
        published="",
        builder_version="",
        fit=fit,
        amd=amd,
        platform=platform,
    )
