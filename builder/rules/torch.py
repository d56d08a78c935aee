"""torch: wheel variant (cuXYZ / rocmX.Y / cpu), its index, Python range, cuDNN."""

from __future__ import annotations

from builder.compat import Compat, TorchRelease
from builder.records import Base, Install, Verdict
from builder.rules._util import in_range, mm, release_of, span


def _release(version: str, compat: Compat) -> TorchRelease | None:
    wanted = release_of(version)
    return next((r for r in compat.torch if r.release == wanted), None)


def _variant_version(variant: str) -> tuple[int, int]:
    """cu124 -> (12, 4); cu118 -> (11, 8); cu130 -> (13, 0); rocm6.2.4 -> (6, 2)."""
    if variant.startswith("cu"):
        digits = variant[2:]
        return int(digits[:-1]), int(digits[-1])
    return mm(variant.removeprefix("rocm"))


def pick_variant(variants: tuple[str, ...], accel_version: str) -> str | None:
    """Newest variant <= the base version within the same major."""
    major, minor = mm(accel_version)
    fitting = [v for v in variants if _variant_version(v)[0] == major and _variant_version(v) <= (major, minor)]
    return max(fitting, key=_variant_version) if fitting else None


def decide_torch(base: Base, python: str, version: str, compat: Compat) -> Verdict:
    rel = _release(version, compat)
    if rel is None:
        known = ", ".join(r.release for r in compat.torch)
        return Verdict.no(f"torch {version} is not in the compatibility table (known: {known}); add its row to builder/data/compat.yaml")
    if not in_range(python, rel.python):
        return Verdict.no(f"torch {version} supports Python {span(rel.python)}; this image has Python {python}")
    if base.vendor == "cpu":
        variant = "cpu"
    else:
        assert base.version is not None
        variants = rel.cuda if base.vendor == "cuda" else rel.rocm
        if not variants:
            kind = "CUDA" if base.vendor == "cuda" else "ROCm"
            return Verdict.no(f"torch {version} ships no {kind} wheels in the table; use another torch release")
        found = pick_variant(variants, base.version)
        if found is None:
            kind = "CUDA" if base.vendor == "cuda" else "ROCm"
            return Verdict.no(
                f"torch {version} has no {kind} {mm(base.version)[0]} wheel at or below {base.version} "
                f"(variants: {', '.join(variants)}); base {base.name} is {kind} {base.version}"
            )
        variant = found
    cudnn = dict(rel.cudnn).get(variant)
    built_cuda = "{}.{}".format(*_variant_version(variant)) if variant.startswith("cu") else None
    install = Install(
        framework="torch",
        version=version,
        requirements=(f"torch=={version}+{variant}",),
        index_urls=(compat.torch_index_url.format(variant=variant),),
        variant=variant,
        built_cuda=built_cuda,
        cudnn=cudnn,
    )
    return Verdict(ok=True, install=install)
