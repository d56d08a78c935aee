"""A CUDA line's NVIDIA wheels, locked once for all its images (matrix.yaml `line_layers`; pure).

A line is a base (its CUDA minor) x Python x platform: `cuda13-debian12-py3.11-amd64`. The images
`line_layers` names on a line are resolved together first: one uv resolution of every member's own
requirements (its NumPy pin left out: the NumPy ceiling is each image's own, and two members may
pin two NumPys) under the line's CUDA constraints. Of that resolution only the NVIDIA library wheels
(`layer.is_nvidia`) are kept: that is the line lock, `images/lines/<line>.lock`, in the format of
an image's lock. Each member then *requires* those pins (`name==version`, added to its
requirements.txt), so its own lock pins exactly the line's NVIDIA set, and the NVIDIA layer made
from it (`lock/layer.py`) has the same bytes, and the same diff ID on the same base, in every image
of the line: by construction, not by luck. A member whose own ranges exclude a line pin fails its
lock with uv's reason, which names both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from builder.compat.facts import Compat
from builder.lock.files import LINE_PREFIX, REQUIREMENTS, Contents, read, write
from builder.lock.layer import is_nvidia
from builder.lock.target import LockTarget, platform_for
from builder.model.plan import ImageSpec, Lock
from builder.util.errors import UserError

FOLDER = "lines"  # images/lines/<line>.lock
SUFFIX = ".lock"
PREFIX = LINE_PREFIX  # a line lock's header names `line-<line>` where an image lock names the image
IMAGE_REPOSITORY = "builder-line"  # the line's NVIDIA image, made by `builder build` (engine/line_image.py)
OWN = ("numpy",)  # requirements each member keeps to itself: left out of the joint resolution


def key_of(spec: ImageSpec) -> str:
    """`<base>-py<X.Y>-<arch>`: the base names the CUDA minor (cuda13-debian12 is 13.0)."""
    return f"{spec.base.name}-py{spec.python}-{spec.platform.rsplit('/', 1)[-1]}"


def lock_id(key: str) -> str:
    return PREFIX + key


def rel_path(key: str) -> str:
    """Its path below images/."""
    return f"{FOLDER}/{key}{SUFFIX}"


def path_of(images_dir: Path, key: str) -> Path:
    return images_dir / rel_path(key)


def _name(line: str) -> str:
    try:
        return str(canonicalize_name(Requirement(line).name))
    except InvalidRequirement:
        return line


def own(requirement: str) -> bool:
    """A member's own requirement: what the joint resolution takes from it (not NumPy, not a line pin)."""
    name = _name(requirement)
    return name not in OWN and not is_nvidia(name)


def members(images: Iterable[ImageSpec]) -> dict[str, list[ImageSpec]]:
    """The images of each line, by line key, in plan order."""
    out: dict[str, list[ImageSpec]] = {}
    for spec in images:
        if spec.line is not None:
            out.setdefault(spec.line, []).append(spec)
    return out


def target_of(key: str, line: Sequence[ImageSpec], compat: Compat) -> LockTarget:
    """The joint resolution's inputs: every member's own requirements, the line's constraints
    (one base, so one CUDA minor: the members share them), its Python, platform and indexes."""
    first = line[0]
    return LockTarget(
        image=lock_id(key),
        requirements=tuple(sorted({r for spec in line for r in spec.packages if own(r)})),
        constraints=tuple(sorted({c for spec in line for c in spec.constraints})),
        python=first.python,
        platform=platform_for(first.base.os, compat, first.platform),
        indexes=tuple(sorted({url for spec in line for url in spec.index_urls})),
    )


def nvidia_only(resolved: Lock) -> list[tuple[str, str]]:
    """The (name, version) pins of a joint resolution that the line keeps: its NVIDIA wheels."""
    return [(name, version) for name, version in resolved.pins if is_nvidia(name)]


def pins_of(lock: Lock) -> tuple[str, ...]:
    """The line's pins as requirements (`nvidia-cublas==13.1.1.3`), sorted."""
    return tuple(sorted(f"{name}=={version}" for name, version in lock.pins))


def joined(spec: ImageSpec, line_locks: Mapping[str, Lock]) -> ImageSpec:
    """A member with its line's NVIDIA pins added to its requirements; unchanged while its line has
    no current lock (its own lock is then stale too, and `builder lock` makes both)."""
    lock = line_locks.get(spec.line) if spec.line is not None else None
    if lock is None or spec.line is None:
        return spec
    kept = [p for p in spec.packages if own(p) or _name(p) in OWN]
    return replace(spec, packages=tuple(sorted((*kept, *pins_of(lock)))), line_image=image_of(spec.line, lock))


def image_of(key: str, lock: Lock) -> str:
    """The line's NVIDIA image, named by the line lock's content: `builder-line/<line>:<16 hex>`; a
    new line lock names another image, so a member never builds on a stale one."""
    return f"{IMAGE_REPOSITORY}/{key}:{hashlib.sha256(lock.text.encode()).hexdigest()[:16]}"


def differs(member: Lock, line: Lock) -> str | None:
    """Why a member's lock does not hold exactly its line's NVIDIA set, or None."""
    mine = {name: version for name, version in member.pins if is_nvidia(name)}
    theirs = dict(line.pins)
    extra = sorted(set(mine) - set(theirs))
    if extra:
        return f"it pins {extra[0]}=={mine[extra[0]]}, which the line lock does not hold"
    for name, version in sorted(theirs.items()):
        if name not in mine:
            return f"it does not pin {name}, which the line lock pins at {version}"
        if mine[name] != version:
            return f"it pins {name}=={mine[name]}, the line lock {name}=={version}"
    return None


def line_text(target: LockTarget, resolved: str) -> str:
    """The line lock for uv's joint resolution (`resolved`: a lock text of all of it, files.lock_text):
    its NVIDIA packages only, each with its hashes, each required by the line itself."""
    contents = read(resolved, f"uv's joint resolution of {target.image}")
    kept = tuple(replace(p, via=(REQUIREMENTS,), line=0) for p in contents.packages if is_nvidia(p.name))
    return write(Contents(target.image, target.inputs, target.python, target.platform, kept))


def verify_line(lock: Lock, target: LockTarget, where: str) -> None:
    """A line lock is this line's (its header names it) and, when its inputs are current, for its
    target and of NVIDIA wheels only; a UserError naming the file and line otherwise."""
    contents = read(lock.text, where)
    if contents.image != target.image:
        raise UserError(f"is the lock of {contents.image}, not of {target.image}; restore it from git or run `builder lock`", where, 1)
    if contents.inputs != target.inputs:
        return
    if (contents.python, contents.platform) != (target.python, target.platform):
        raise UserError(f"is for python {contents.python}, {contents.platform}, not {target.python}, {target.platform}; re-lock", where, 4)
    other = next((p for p in contents.packages if not is_nvidia(p.name)), None)
    if other is not None:
        raise UserError(f"{other.name} is not an NVIDIA library wheel: a line lock holds only those; re-lock", where, other.line)
