"""torch: wheel variant (cuXYZ / rocmX.Y / cpu), its index, Python range, cuDNN."""

from __future__ import annotations

from dataclasses import dataclass

from builder.compat.facts import Compat
from builder.compat.tables import PyRange, Table
from builder.compat.versions import in_range, mm, release_of, span, variant_version
from builder.records import Base, Install, Verdict
from builder.yamlsrc import LDict

SECTION_KEYS = ("index_url", "releases")


@dataclass(frozen=True)
class TorchRelease:
    release: str
    python: PyRange
    cuda: tuple[str, ...]
    rocm: tuple[str, ...]
    cudnn: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class TorchFacts:
    index_url: str
    releases: tuple[TorchRelease, ...]


def load(t: Table, section: LDict) -> TorchFacts:
    rows = t.rows(t.section(section, "releases"), ("release", "python", "cuda", "rocm", "cudnn"), "release", section.line)
    out = []
    for row in rows:
        cuda = t.strs(row["cuda"], row.line)
        if any(not v.startswith("cu") or not v[2:].isdigit() for v in cuda):
            raise t.fail(f"torch CUDA variants must look like cu124: {cuda}", row.line)
        cudnn = row["cudnn"]
        if not isinstance(cudnn, dict) or set(cudnn) - set(cuda):
            raise t.fail("torch cudnn must map the release's CUDA variants", row.line)
        out.append(
            TorchRelease(str(row["release"]), t.pyrange(row["python"], row.line), cuda, t.strs(row["rocm"], row.line), tuple(sorted(cudnn.items())))
        )
    return TorchFacts(index_url=str(t.section(section, "index_url")), releases=tuple(out))


def _release(version: str, facts: TorchFacts) -> TorchRelease | None:
    wanted = release_of(version)
    return next((r for r in facts.releases if r.release == wanted), None)


def pick_variant(variants: tuple[str, ...], accel_version: str) -> str | None:
    """Newest variant <= the base version within the same major."""
    major, minor = mm(accel_version)
    fitting = [v for v in variants if variant_version(v)[0] == major and variant_version(v) <= (major, minor)]
    return max(fitting, key=variant_version) if fitting else None


def decide_torch(base: Base, python: str, version: str, compat: Compat) -> Verdict:
    facts = compat.facts(TorchFacts)
    rel = _release(version, facts)
    if rel is None:
        known = ", ".join(r.release for r in facts.releases)
        return Verdict.no(f"torch {version} is not in the compatibility table (known: {known}); add its row to builder/compat/data/compat.yaml")
    if not in_range(python, rel.python):
        return Verdict.no(f"torch {version} supports Python {span(rel.python)}; this image has Python {python}")
    if base.vendor == "cpu":
        variant = "cpu"
    else:
        assert base.version is not None
        variants = rel.cuda if base.vendor == "cuda" else rel.rocm
        kind = "CUDA" if base.vendor == "cuda" else "ROCm"
        if not variants:
            return Verdict.no(f"torch {version} ships no {kind} wheels in the table; use another torch release")
        found = pick_variant(variants, base.version)
        if found is None:
            return Verdict.no(
                f"torch {version} has no {kind} {mm(base.version)[0]} wheel at or below {base.version} "
                f"(variants: {', '.join(variants)}); base {base.name} is {kind} {base.version}"
            )
        variant = found
    cudnn = dict(rel.cudnn).get(variant)
    built_cuda = "{}.{}".format(*variant_version(variant)) if variant.startswith("cu") else None
    install = Install(
        framework="torch",
        version=version,
        requirements=(f"torch=={version}+{variant}",),
        index_urls=(facts.index_url.format(variant=variant),),
        variant=variant,
        built_cuda=built_cuda,
        cudnn=cudnn,
    )
    return Verdict(ok=True, install=install)


decide = decide_torch
