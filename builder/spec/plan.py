"""Plan: expand the matrix, apply the compatibility rules, and describe every image.

Pure: no Docker, no network. The plan carries no content hashes: those come from rendering the
build contexts (builder.workspace.Workspace.hashed), two stages later.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

from builder.compat import cuda_components
from builder.compat.facts import Compat
from builder.compat.platforms import platform_reason
from builder.compat.rules import decide, framework, table
from builder.compat.rules.cuda import accelerator
from builder.compat.rules.numpy import pick_numpy
from builder.compat.rules.python import decide_python
from builder.model.plan import Combination, ImageSpec, Install, Matrix, Plan, Skipped, TagLine, platform_suffix
from builder.model.versions import WheelVariant, framework_line, mm
from builder.spec import grammar
from builder.spec.expand import Excluder, expand, included
from builder.spec.newest import Keeper
from builder.util.errors import UserError

WHEEL_VARIANT = re.compile(r"cu\d{3}|rocm\d+(?:\.\d+)*")  # a wheel built for one CUDA/ROCm release (torch's)


def _accelerator_tag(combo: Combination, installs: tuple[Install, ...]) -> tuple[str, str | None]:
    """(the base's accelerator as an id spells it, the wheels' variant when it is another CUDA/ROCm)."""
    base = combo.base
    if base.vendor == "cuda" and base.version:
        accel = str(WheelVariant.cuda(base.version))
    elif base.vendor == "rocm" and base.version:
        accel = f"rocm{base.version}"
    else:
        accel = "cpu"
    wheel = next((i.variant for i in installs if i.variant and WHEEL_VARIANT.fullmatch(i.variant) and i.variant != accel), None)
    return accel, wheel


def image_id(combo: Combination, installs: tuple[Install, ...] = ()) -> str:
    """Readable, deterministic, a valid Docker tag: torch2.5.1-cu124-py3.11-ubuntu22.04. When a
    wheel is built for another CUDA/ROCm than the base, both show: torch2.13.0-cu126-on-cu128-...
    An image for a platform other than linux/amd64 ends in it: ...-py3.11-debian12-arm64."""
    accel, wheel = _accelerator_tag(combo, installs)
    if wheel is not None:
        accel = f"{wheel}-on-{accel}"
    frameworks = "-".join(f"{name}{version}" for name, version in combo.frameworks)
    return f"{frameworks}-{accel}-py{combo.python}-{combo.base.os}{platform_suffix(combo.platform)}"


def tag_line(combo: Combination, installs: tuple[Install, ...] = ()) -> TagLine | None:
    """The line the image's floating tags name (builder/publish/tags.py): only an image of one
    framework at an X.Y[.Z] version has one (torch2.14-cu130 for torch 2.14.1 on CUDA 13.0)."""
    if len(combo.frameworks) != 1:
        return None
    ((name, version),) = combo.frameworks
    line = framework_line(version)
    if line is None:
        return None
    accel, wheel = _accelerator_tag(combo, installs)
    return TagLine(name, line, accel, combo.python, combo.base.os, combo.platform, wheel)


def _indexes(install: Install, overrides: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """Apply `indexes:` from matrix.yaml (first matching `<framework>-<variant>` glob wins). An
    override also applies to a variant that PyPI carries (a company mirror of the vendor index)."""
    key = f"{install.framework}-{install.variant}"
    for pattern, replacement in overrides:
        if fnmatchcase(key, pattern):
            return (replacement.replace("{variant}", install.variant or ""),)
    return install.index_urls


def decide_combination(combo: Combination, matrix: Matrix, compat: Compat) -> ImageSpec | str:
    """The image for a combination, or why it cannot work."""
    interpreter = decide_python(combo.base, combo.python, compat)
    if isinstance(interpreter, str):
        return interpreter
    installs: list[Install] = []
    warnings: list[str] = []
    for name, version in combo.frameworks:
        verdict = decide(name, combo.base, combo.python, version, compat)
        if not verdict.ok or verdict.install is None:
            return verdict.reason
        missing = platform_reason(compat.platform_wheels, name, version, combo.base, framework(name).facts_at)
        if missing is not None:
            return missing
        installs.append(verdict.install)
        warnings.extend(verdict.warnings)
    try:
        numpy = pick_numpy(tuple(installs), combo.python, compat)
    except ValueError as exc:
        return str(exc)
    packages = sorted({req for i in installs for req in i.requirements} | ({f"numpy=={numpy}"} if numpy else set()))
    index_urls: list[str] = []
    for install in installs:
        for url in _indexes(install, matrix.index_urls):
            if url not in index_urls:
                index_urls.append(url)
    constraints = _cuda_constraints(combo, compat)
    if isinstance(constraints, str):
        return constraints
    image = image_id(combo, tuple(installs))
    if not grammar.DOCKER_TAG.fullmatch(image):
        return f"image id {image!r} is not a valid Docker tag (too long?); shorten the base os or versions"
    bootstrapped = combo.base.bootstrap is not None
    return ImageSpec(
        id=image,
        tag=f"{matrix.registry}:{image}",
        base=combo.base,
        stack=combo.stack,
        python=combo.python,
        frameworks=combo.frameworks,
        installs=tuple(installs),
        packages=tuple(packages),
        index_urls=tuple(index_urls),
        accelerator=accelerator(combo.base, compat),
        python_packages=() if bootstrapped else interpreter.packages,
        python_bin=interpreter.bin,
        warnings=tuple(warnings),
        constraints=constraints,
        tag_line=tag_line(combo, tuple(installs)),
    )


def _cuda_constraints(combo: Combination, compat: Compat) -> tuple[str, ...] | str:
    """What keeps the lock's CUDA wheels on the base's CUDA minor: one CUDA user space per image.
    A CUDA-from-wheels base has no CUDA without them, so a minor the table lacks is a skip; an
    nvidia/cuda base whose minor the table lacks (11.8: no framework here brings CUDA 11 wheels)
    gets none, and `builder lock` still refuses a lock whose CUDA wheels leave its minor."""
    if combo.base.vendor != "cuda" or combo.base.version is None:
        return ()
    found = cuda_components.constraints("{}.{}".format(*mm(combo.base.version)), compat.toolkit_components)
    if isinstance(found, str):
        return found if combo.base.cuda_from_wheels else ()
    return found


def _skipped(combo: Combination, reason: str) -> Skipped:
    return Skipped(
        base=combo.base.name, stack=combo.stack, python=combo.python, frameworks=combo.frameworks, reason=reason, platform=combo.platform
    )


def _collect(matrix: Matrix, compat: Compat) -> tuple[dict[str, ImageSpec], list[Skipped]]:
    images: dict[str, ImageSpec] = {}
    skipped: dict[tuple[object, ...], Skipped] = {}  # keyed, so an include un-skips in O(1)
    excluded_by = Excluder(matrix)
    newest = Keeper(matrix)
    for combo in expand(matrix):
        rule = excluded_by(combo)
        if rule is not None:
            skipped[_key(combo)] = _skipped(combo, f"excluded by {matrix.path}:{rule.line}")
            continue
        decided = decide_combination(combo, matrix, compat)
        if isinstance(decided, str):
            skipped[_key(combo)] = _skipped(combo, decided)
        elif not newest.hold(combo, decided):
            _add(images, decided, matrix)
    for combo, decided in newest.settle():
        if isinstance(decided, str):
            skipped[_key(combo)] = _skipped(combo, decided)
        else:
            _add(images, decided, matrix)
    for combo in included(matrix):
        decided = decide_combination(combo, matrix, compat)
        if isinstance(decided, str):
            raise UserError(f"this include cannot work: {decided}; change or remove it", matrix.path, combo.line)
        images.pop(decided.id, None)  # an include re-adds what an exclude removed or the expansion had
        _add(images, decided, matrix, combo.line)
        skipped.pop(_key(combo), None)
    return images, list(skipped.values())


def _key(combo: Combination) -> tuple[object, ...]:
    return (combo.base.name, combo.platform, combo.stack, combo.python, combo.frameworks)


def _add(images: dict[str, ImageSpec], spec: ImageSpec, matrix: Matrix, line: int = 0) -> None:
    other = images.get(spec.id)
    if other is not None and other.base.name != spec.base.name:
        raise UserError(
            f"bases '{other.base.name}' and '{spec.base.name}' produce the same image id {spec.id}; "
            "give them different os or versions, or exclude one",
            matrix.path,
            line or spec.base.line,
        )
    images[spec.id] = spec


def make_plan(matrix: Matrix, compat: Compat | None = None) -> Plan:
    """The images (without content hashes) and the skipped combinations."""
    compat = compat or table()
    images, skipped = _collect(matrix, compat)
    specs = tuple(sorted(images.values(), key=lambda s: s.id))
    warnings = sorted({w for spec in specs for w in spec.warnings})
    return Plan(images=specs, skipped=tuple(skipped), warnings=tuple(warnings))
