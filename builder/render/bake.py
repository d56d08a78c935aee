"""`plan --format bake`: the plan as a docker-bake.json, so any BuildKit builder (`docker buildx bake`
with a remote or Kubernetes driver) builds the same images from the same rendered contexts (pure).

Each image is one target: its images/<id>/ folder as the context, the plan's tag, the labels
`builder build` adds, and the platform its lock was resolved for. Bake allows only
`[a-zA-Z0-9_-]` in target and group names, so ids map to names by `target_name` (dots and anything
else become `_`); the mapping is checked to be one-to-one (for base groups too: bases `x.y` and
`x_y` are refused, not merged), and each target's tag ends in its id,
so a name leads back to its image. Groups: `default` (everything), `base-<base>`, `vendor-<vendor>`,
and `needs-local-base` / `from-registry`: a bootstrapped base (`bootstrap: debootstrap`) exists only
in the engine that `builder build` made it in, never in a registry, so its images build only there.
An image matrix.yaml's `canonical_layers` names needs the venv layer the build host makes from its
lock (venv.tar): it is in the file only when its contexts are given (`canonical_dir`: `plan --format
bake --layers` writes them), with SOURCE_DATE_EPOCH (the lock's) as a build argument and in the
group `canonical`; `network_file` is the compose file that builds them with the network off (bake
0.13 takes a target's network only from a compose file). docs/reproducible.md, "bake".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from builder.compat.rules import table
from builder.lock.layer import source_date_epoch
from builder.lock.target import platform_for
from builder.model.plan import Base, ImageSpec
from builder.render.labels import build_labels
from builder.util.errors import UserError

NAME = re.compile(r"^[A-Za-z0-9_-]+$")  # bake's rule for target and group names
PLATFORMS = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}  # lock platform arch -> OCI platform
LOCAL_BASE_GROUP = "needs-local-base"
REGISTRY_BASE_GROUP = "from-registry"
CANONICAL_GROUP = "canonical"


def target_name(name: str) -> str:
    """A bake-safe name: torch2.13.0-cpu-py3.11-debian12 -> torch2_13_0-cpu-py3_11-debian12."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)


def platform(spec: ImageSpec) -> str:
    """The platform the image's lock resolves for (builder/lock/target.py), so a builder of another
    architecture does not build an image whose hashes cannot match: the image's own platform."""
    arch = platform_for(spec.base.os, table(), spec.platform).split("-", 1)[0]
    if arch not in PLATFORMS:
        raise ValueError(f"no OCI platform known for lock architecture {arch!r}; add it to builder/render/bake.py PLATFORMS")
    return PLATFORMS[arch]


def target(spec: ImageSpec, images_dir: str, revision: str) -> dict[str, Any]:
    if not spec.content_hash:
        raise ValueError(f"{spec.id} has no content hash: bake the hashed plan (Workspace.selected or .plan)")
    made: dict[str, Any] = {
        "context": f"{images_dir.rstrip('/')}/{spec.id}",
        "dockerfile": "Dockerfile",
        "tags": [spec.tag],
        "labels": build_labels(spec, revision),
        "platforms": [platform(spec)],
    }
    if spec.canonical and spec.lock is not None:  # BuildKit >= 0.11 stamps the config with it (and clamps with rewrite-timestamp)
        made["args"] = {"SOURCE_DATE_EPOCH": str(source_date_epoch(spec.lock))}
    return made


def bake_file(
    images: Iterable[ImageSpec], *, images_dir: str = "images", revision: str = "unknown", canonical_dir: str | None = None
) -> dict[str, Any]:
    """The docker-bake.json document for `images` (hashed specs). `images_dir`: the images/ folder
    as a path from where bake will run; `revision`: the git revision `builder build` would label;
    `canonical_dir`: where the canonical images' contexts (with venv.tar) are, from there too
    (None: canonical images are left out)."""
    specs = sorted((s for s in images if not s.canonical or canonical_dir is not None), key=lambda s: s.id)
    names: dict[str, str] = {}
    targets: dict[str, dict[str, Any]] = {}
    groups: dict[str, list[str]] = {"default": []}
    bases: dict[str, Base] = {}  # group name -> the one base it stands for (bake names are narrower than base names)
    local: list[str] = []
    pulled: list[str] = []
    for spec in specs:
        name = target_name(spec.id)
        _claim(names, name, f"image {spec.id}")
        targets[name] = target(spec, canonical_dir if spec.canonical and canonical_dir is not None else images_dir, revision)
        groups["default"].append(name)
        if spec.canonical:
            groups.setdefault(CANONICAL_GROUP, []).append(name)
        group = f"base-{target_name(spec.base.name)}"
        if bases.setdefault(group, spec.base).name != spec.base.name:
            other = bases[group]
            raise UserError(
                f"bases '{other.name}' (matrix.yaml line {other.line}) and '{spec.base.name}' (line {spec.base.line}) both become bake "
                f"group {group!r}, which would merge their images; rename one in matrix.yaml"
            )
        groups.setdefault(group, []).append(name)
        groups.setdefault(f"vendor-{spec.base.vendor}", []).append(name)
        (local if spec.base.bootstrap else pulled).append(name)
    if local:
        groups[LOCAL_BASE_GROUP] = local
    if pulled:
        groups[REGISTRY_BASE_GROUP] = pulled
    for group in groups:
        _claim(names, group, f"group {group}")
    return {
        "group": {name: _group(name, members, specs) for name, members in sorted(groups.items())},
        "target": dict(sorted(targets.items())),
    }


def network_file(images: Iterable[ImageSpec]) -> dict[str, Any]:
    """The compose file given to bake after the bake file (`-f docker-bake.json -f network.compose.yaml`):
    each canonical image's target built with the network off, as `builder build` builds it (nothing
    in it fetches; and an engine without a bridge, like this project's CI, has no default network)."""
    return {"services": {target_name(s.id): {"build": {"network": "none"}} for s in sorted(images, key=lambda s: s.id) if s.canonical}}


def _claim(names: dict[str, str], name: str, what: str) -> None:
    """Bake merges two blocks of one name silently, so a second claim on a name is an error."""
    if not NAME.fullmatch(name):
        raise UserError(f"{what}: {name!r} is not a valid bake name ([a-zA-Z0-9_-]+); rename it in matrix.yaml")
    if name in names:
        raise UserError(f"{names[name]} and {what} both become bake name {name!r}; rename one in matrix.yaml")
    names[name] = what


def _group(name: str, members: list[str], specs: list[ImageSpec]) -> dict[str, Any]:
    group: dict[str, Any] = {"targets": sorted(members)}
    if name == LOCAL_BASE_GROUP:
        froms = ", ".join(sorted({s.base.from_ref for s in specs if s.base.bootstrap}))
        group["description"] = (
            f"FROM a base that `builder build` bootstraps into its local engine ({froms}); no registry has it: "
            "build these with that engine, or push the base and point FROM at the registry copy"
        )
    elif name == REGISTRY_BASE_GROUP:
        group["description"] = "every base is pulled from a registry: builds on any BuildKit builder"
    elif name == CANONICAL_GROUP:
        group["description"] = (
            "venv from the lock as a canonical layer (venv.tar in the context); build with the network off: "
            "add -f network.compose.yaml from beside their contexts (docs/reproducible.md, bake)"
        )
    return group
