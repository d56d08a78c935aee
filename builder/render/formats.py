"""Plan output formats for tools: json (the plan, whose image entries are also each
images/<id>/image.json), github (an Actions strategy.matrix) and bake (builder/render/bake.py);
tables are in ui/. Here, not in spec/: an entry states the image's lock (builder/lock/), which
comes after the plan."""

from __future__ import annotations

from typing import Any

from builder.compat import lifecycle
from builder.compat.rules import table
from builder.lock.files import libraries
from builder.lock.target import lock_state
from builder.model.image_entry import BaseEntry, ImageEntry, ReproducibleEntry, RunsOnEntry
from builder.model.locked_fit import variant_properties
from builder.model.plan import AMD64, ImageSpec, Skipped, Vendor
from builder.util.errors import UserError

# Where a leg of .github/workflows/images.yml runs: GPU images on self-hosted runners with that
# vendor's GPU (the labels a runner is registered with), the rest on GitHub's hosted runners.
RUNNERS: dict[Vendor, tuple[str, ...]] = {
    "cuda": ("self-hosted", "linux", "x64", "nvidia"),
    "rocm": ("self-hosted", "linux", "x64", "amd"),
    "cpu": ("ubuntu-latest",),
}
# linux/arm64 legs: GPU images on arm64 self-hosted runners, CPU images on GitHub's hosted arm64 runners.
ARM64_RUNNERS: dict[Vendor, tuple[str, ...]] = {
    "cuda": ("self-hosted", "linux", "arm64", "nvidia"),
    "rocm": ("self-hosted", "linux", "arm64", "amd"),
    "cpu": ("ubuntu-24.04-arm",),
}
MAX_MATRIX_JOBS = 256  # GitHub Actions refuses a larger strategy.matrix


def plan_json(images: tuple[ImageSpec, ...], skipped: tuple[Skipped, ...]) -> dict[str, Any]:
    """The plan: each image's entry (images/<id>/image.json) plus its platform (image.json names it
    only when it is not linux/amd64) and its lines' end-of-life dates, which are not part of image.json:
    a date passing must not change an image's content hash."""
    return {
        "images": [{**image_entry(s).to_json(), "platform": s.platform, **end_of_life(s)} for s in images],
        "skipped": [skipped_entry(s) for s in skipped],
    }


def end_of_life(spec: ImageSpec) -> dict[str, dict[str, str]]:
    """`end_of_life`: `kind line` -> the ISO day its vendor ends it; `support_window`: `framework line` ->
    the day this project's own window for it ends, which is no end of life (compat/data/lifecycle.yaml)."""
    dates = lifecycle.for_image(spec.python, spec.base.os, spec.versions)
    return {"end_of_life": lifecycle.to_json(dates), "support_window": lifecycle.window_json(dates)}


def github_matrix(images: tuple[ImageSpec, ...]) -> dict[str, Any]:
    """`strategy: matrix: ${{ fromJSON(needs.plan.outputs.matrix) }}` consumes this as is; every
    field the workflow reads (`matrix.<field>`) is in every entry (tests/test_workflows.py)."""
    if len(images) > MAX_MATRIX_JOBS:
        raise UserError(
            f"{len(images)} images exceed GitHub's {MAX_MATRIX_JOBS} jobs per matrix; split the run with --select (e.g. vendor=cuda)"
        )
    return {
        "include": [
            {
                "id": s.id,
                "tag": s.tag,
                "base": s.base.name,
                "base_from": s.base.from_ref,
                "local_base": s.base.bootstrap is not None,
                "vendor": s.base.vendor,
                "stack": s.stack,
                "python": s.python,
                "select": f"id={s.id}",
                "gpu": s.base.vendor != "cpu",
                "platform": s.platform,
                "runs_on": list((RUNNERS if s.platform == AMD64 else ARM64_RUNNERS)[s.base.vendor]),
            }
            for s in images
        ]
    }


def image_entry(spec: ImageSpec) -> ImageEntry:
    """The plan JSON entry for an image (also written as images/<id>/image.json). `platform` is
    there only when it is not linux/amd64, so the amd64 images' image.json stay as they were."""
    b = spec.base
    return ImageEntry(
        id=spec.id,
        tag=spec.tag,
        base=BaseEntry(b.name, b.vendor, b.os, b.from_ref, b.version, b.image, b.digest, b.bootstrap),
        stack=spec.stack,
        python=spec.python,
        frameworks=dict(spec.frameworks),
        packages=spec.packages,
        index_urls=spec.index_urls,
        content_hash=spec.content_hash,
        accelerator=spec.accelerator,
        variants={i.framework: i.variant for i in spec.installs},
        cudnn={i.framework: i.cudnn for i in spec.installs if i.cudnn},
        notes=tuple(note for i in spec.installs for note in i.notes),
        warnings=spec.warnings,
        lock=lock_state(spec, table()),
        libraries=libraries(spec.lock) if spec.lock else {},
        platform=spec.platform,
        reproducible=reproducible_entry(spec),
        **runs_on_entry(spec),
    )


def reproducible_entry(spec: ImageSpec) -> ReproducibleEntry:
    """Whether the same inputs give this image's ID again, from how it is built: only a canonical
    image on a bootstrapped base (no apt step) does; each other reason names the step that does not."""
    if spec.python_packages:
        return ReproducibleEntry(
            False,
            f"apt-get installs {' '.join(spec.python_packages)} unpinned from {spec.base.from_ref}'s apt sources "
            "(hadolint DL3008): the sources' state on build day decides their versions and files",
        )
    if spec.lock is None:
        return ReproducibleEntry(False, "unlocked: pip resolves its packages when it builds")
    if spec.canonical is None:
        return ReproducibleEntry(
            False, "a RUN installs the locked wheels: its files carry the build's clock (matrix.yaml canonical_layers does not name it)"
        )
    return ReproducibleEntry(
        True,
        "canonical layers from the lock, built with the network off and normalized to the lock's SOURCE_DATE_EPOCH: "
        "the same lock on the same base image gives the same image ID (docs/reproducible.md)",
    )


# What a ROCm image's `runs_on` says: its gfx targets are judged per GPU from the code objects fit.json holds
# (the rule needs the generic targets and xnack modes, fit/gfx.py, a later stage than rendering).
ROCM_RUNS_ON = (
    "AMD GPUs: the gfx targets of its code objects are in fit.json's amd part; "
    "`builder fit --planned --vendor amd --gfx <gfx>` judges a GPU, `builder report` lists them"
)


def runs_on_entry(spec: ImageSpec) -> dict[str, Any]:
    """What an image runs on, measured from its locked wheels (images/<id>/fit.json): `cc_min`,
    `runs_on` (the set of known compute capabilities, whether any library it loads carries PTX, or
    what the wheels cannot tell) and the same facts as wheel-variant properties. Nothing for an
    image that is not measured (not CUDA, not locked): no claim is taken from a table."""
    measured = spec.locked_fit
    if measured is None:
        return {}
    if measured.fit is None and measured.amd is not None:  # a ROCm image: its processors are gfx targets, not compute capabilities
        return {"runs_on": RunsOnEntry(None, unknown=ROCM_RUNS_ON)}
    if measured.fit is None:
        return {"runs_on": RunsOnEntry(None, unknown=measured.unknown)}
    found = measured.runs_on or ()
    if not found:
        return {"runs_on": RunsOnEntry((), measured.ptx)}
    return {
        "runs_on": RunsOnEntry(found, measured.ptx),
        "cc_min": measured.cc_min,
        "variant_properties": variant_properties(found, spec.accelerator.require_cuda),
    }


def skipped_entry(skip: Skipped) -> dict[str, Any]:
    return {
        "base": skip.base,
        "stack": skip.stack,
        "python": skip.python,
        "frameworks": dict(skip.frameworks),
        "platform": skip.platform,
        "reason": skip.reason,
    }
