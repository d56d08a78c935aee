"""One CUDA user space per image: which CUDA minor a lock's NVIDIA wheels belong to, the
constraints that keep them on the image's minor, and what a lock breaks (pure).

Two kinds of wheel. The toolkit wheels (cudart, nvrtc, nvcc/nvvm, cupti, nvjitlink, the
`cuda-toolkit` meta package, ...) carry the toolkit's version, so their major.minor *is* the CUDA
minor. cuBLAS, cuFFT and the other math libraries have versions of their own; which toolkit minor
ships them comes from compat.yaml `cuda.toolkit_components` (one row per minor: the versions its
first release pins), a component belonging to minor X.Y from its X.Y version up to the next row's.
cuDNN, NCCL, NVSHMEM and the like follow no toolkit: only their `-cuNN` suffix must name the
image's CUDA major.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import Version

from builder.model.versions import cc_tuple, mm, release_major

# Versioned with the toolkit: their X.Y is the CUDA minor they belong to.
TOOLKIT_VERSIONED = frozenset(
    {
        "cuda-toolkit", "cuda-runtime", "cuda-nvrtc", "cuda-nvcc", "nvvm", "cuda-crt", "cuda-cupti", "nvjitlink",
        "nvfatbin", "nvptxcompiler", "cuda-cuxxfilt", "cuda-profiler-api", "cuda-opencl", "cuda-sanitizer-api",
        "nvml-dev", "nvtx", "cuda-culibos", "cuda-tileiras",
    }
)  # fmt: skip
# Where a lock's CUDA minor is read from, in order (the runtime first: it is what the framework loads).
RUNTIME_ORDER = ("cuda-runtime", "cuda-nvrtc", "cuda-toolkit", "nvjitlink", "cuda-nvcc")
_WHEEL = re.compile(r"^nvidia-(?P<component>[a-z0-9-]+?)(?:-cu(?P<major>\d+))?$")

Rows = tuple[tuple[str, tuple[tuple[str, str], ...]], ...]  # CUDA minor -> (component, version at X.Y.0)


@dataclass(frozen=True)
class Wheel:
    """A CUDA wheel of a lock: its component name (nvidia-cublas-cu12 -> cublas) and the CUDA major
    its name states (-cu12), if any."""

    name: str
    component: str
    major: str | None
    version: str


def wheel(name: str, version: str) -> Wheel | None:
    """The CUDA component a pinned package is, or None for anything else."""
    if name == "cuda-toolkit":
        return Wheel(name, name, None, version)
    found = _WHEEL.match(name)
    if found is None:
        return None
    return Wheel(name, found.group("component"), found.group("major"), version)


def _v(text: str) -> Version | None:
    try:
        return Version(text)
    except ValueError:  # InvalidVersion, or int()'s refusal of a number over 4,300 digits
        return None


def minor_of(version: str) -> str | None:
    """`12.9.86` -> `12.9`."""
    try:
        return "{}.{}".format(*mm(version))
    except (ValueError, IndexError):
        return None


def package(component: str, major: str) -> str:
    """The wheel name of a component for a CUDA major (cu12 suffix up to 12, none from 13)."""
    if component == "cuda-toolkit":
        return component
    return f"nvidia-{component}-cu{major}" if int(major) <= 12 else f"nvidia-{component}"


def _bounds(minor: str, rows: Rows) -> tuple[dict[str, tuple[str | None, str | None]], str | None] | None:
    """component -> (its version at `minor`, its version at the first later minor that ships it),
    for every component of `minor`'s CUDA major, and the next minor; None when `minor` has no row.
    A component a later minor adds (tileiras in 13.1) gets no lower bound but that minor's version
    as its ceiling: any release of it belongs to a later CUDA."""
    major = release_major(minor)
    same = [(cuda, dict(components)) for cuda, components in rows if release_major(cuda) == major]
    index = next((i for i, (cuda, _) in enumerate(same) if cuda == minor), None)
    if index is None:
        return None
    here, later = same[index][1], same[index + 1 :]
    names = sorted({name for _, components in same for name in components})
    out: dict[str, tuple[str | None, str | None]] = {}
    for name in names:
        ceiling = next((components[name] for _, components in later if name in components), None)
        if name in here or ceiling is not None:
            out[name] = (here.get(name), ceiling)
    # the next minor: the next row of this major, else the first of a later major (12.9 -> 13.0:
    # the -cu12 wheels cannot leave 12.x, and the cuda-toolkit meta package is capped there)
    newer_majors = [cuda for cuda, _ in rows if int(release_major(cuda)) > int(major)]
    return out, (later[0][0] if later else newer_majors[0] if newer_majors else None)


def constraints(minor: str, rows: Rows) -> tuple[str, ...] | str:
    """The requirement lines that keep every CUDA component of a lock on `minor` (lower bound: the
    minor's first release; upper bound: the next minor's), or why there are none."""
    found = _bounds(minor, rows)
    major = release_major(minor)
    known = ", ".join(c for c, _ in rows)
    if found is None:
        return f"CUDA {minor} has no row in builder/compat/data/compat.yaml (cuda.toolkit_components; known: {known}); add it"
    bounds, next_minor = found
    if next_minor is None:
        return f"CUDA {minor} has no next minor in builder/compat/data/compat.yaml (cuda.toolkit_components; known: {known}), so its wheels cannot be capped; add the next minor's row"
    major_minor = mm(minor)
    out = [f"cuda-toolkit>={major_minor[0]}.{major_minor[1]}.0,<{next_minor}.0"]
    for component, (floor, ceiling) in bounds.items():
        spec = ",".join(part for part in (f">={floor}" if floor else "", f"<{ceiling}" if ceiling else "") if part)
        out.append(f"{package(component, major)}{spec}")
    return tuple(out)


def _shipped_in(wheel: Wheel, major: str, rows: Rows) -> str | None:
    """The minor whose range holds this math library's version."""
    version = _v(wheel.version)
    found = None
    for cuda, components in rows:
        floor = dict(components).get(wheel.component)
        if release_major(cuda) == major and floor is not None and version is not None and version >= Version(floor):
            found = cuda
    return found


def problems(pins: tuple[tuple[str, str], ...], minor: str, rows: Rows) -> list[str]:
    """What in a lock leaves CUDA `minor` (empty when every CUDA wheel belongs to it)."""
    major = release_major(minor)
    found_bounds = _bounds(minor, rows)
    bounds = found_bounds[0] if found_bounds else {}
    out = []
    for name, version in pins:
        found = wheel(name, version)
        if found is None:
            continue
        if found.major is not None and found.major != major:
            out.append(f"{name} {version} is built for CUDA {found.major}, the image is CUDA {minor}")
        elif found.component in TOOLKIT_VERSIONED:
            if minor_of(version) != minor:
                out.append(f"{name} {version} is CUDA {minor_of(version)}, the image is CUDA {minor}")
        elif found.component in bounds:
            floor, ceiling = bounds[found.component]
            have = _v(version)
            if have is None or (floor is not None and have < Version(floor)) or (ceiling is not None and have >= Version(ceiling)):
                shipped = _shipped_in(found, major, rows)
                span = f"{floor or '-'} <= {found.component} < {ceiling or '?'}"
                where = f"ships with CUDA {shipped}" if shipped and shipped != minor else "is outside CUDA " + minor
                out.append(f"{name} {version} {where}, the image is CUDA {minor} ({span})")
    return out


def lock_cuda(pins: tuple[tuple[str, str], ...]) -> str | None:
    """The CUDA minor a lock's runtime wheels belong to (what the framework loads), or None when the
    lock brings no CUDA toolkit wheels (the base's CUDA is the one)."""
    by_component: dict[str, str] = {}
    for name, version in pins:
        found = wheel(name, version)
        if found is not None and found.component in TOOLKIT_VERSIONED:
            by_component.setdefault(found.component, version)
    for component in RUNTIME_ORDER:
        if component in by_component:
            return minor_of(by_component[component])
    return None


def cudnn_floor(cudnn: str, cudnn_cc: tuple[tuple[str, str], ...]) -> str | None:
    """The lowest compute capability a cuDNN release supports (compat.yaml cuda.cudnn_cc), or None
    when it dropped no GPU generation the table knows."""
    have = _v(cudnn)
    floors = [cc for since, cc in cudnn_cc if have is not None and have >= Version(since)]
    return max(floors, key=cc_tuple) if floors else None


def older_gpus_cudnn(minor: str, cudnn_cc: tuple[tuple[str, str], ...]) -> str | None:
    """The constraint that keeps a lock's cuDNN below the first release that dropped a GPU
    generation (cuda.cudnn_cc: 9.11), so the image still runs where its wheels' kernels do."""
    if not cudnn_cc:
        return None
    first = min((since for since, _ in cudnn_cc), key=Version)
    return f"nvidia-cudnn-cu{release_major(minor)}<{first}"
