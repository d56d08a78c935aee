"""torch: wheel variant (cuXYZ / rocmX.Y / cpu), its index, Python range, cuDNN; the CUDA its PyPI
wheel's Requires-Dist names; the build its probe reports (torch.version.cuda / hip, cuDNN)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from builder.compat.facts import Compat
from builder.compat.requires import Meta
from builder.compat.rules import COMPAT_FILE, Built, Framework, Placed, Row
from builder.compat.tables import PyRange, Table
from builder.model.plan import Base, Install, Verdict
from builder.model.versions import in_range, mm, release_of, span, variant_version
from builder.util.yamlsrc import LDict

SECTION_KEYS = ("index_url", "releases")


@dataclass(frozen=True)
class TorchRelease:
    release: str
    python: PyRange
    cuda: tuple[str, ...]
    rocm: tuple[str, ...]
    cudnn: tuple[tuple[str, str], ...]
    pypi: str | None = None  # the CUDA variant of PyPI's own Linux wheel
    rocm_note: str | None = None  # ROCm wheels that exist but cannot be planned, and why


@dataclass(frozen=True)
class TorchFacts:
    index_url: str
    releases: tuple[TorchRelease, ...]


def load(t: Table, section: LDict) -> TorchFacts:
    rows = t.rows(
        t.section(section, "releases"),
        ("release", "python", "cuda", "rocm", "cudnn"),
        "release",
        section.line,
        optional=("pypi", "rocm_note"),
    )
    out = []
    for row in rows:
        cuda = t.strs(row["cuda"], row.line)
        if any(not v.startswith("cu") or not v[2:].isdigit() for v in cuda):
            raise t.fail(f"torch CUDA variants must look like cu124: {cuda}", row.line)
        cudnn = row["cudnn"]
        if not isinstance(cudnn, dict) or set(cudnn) - set(cuda):
            raise t.fail("torch cudnn must map the release's CUDA variants", row.line)
        pypi = row.get("pypi")
        if pypi is not None and pypi not in cuda:
            raise t.fail(f"torch pypi variant {pypi!r} is not one of the release's CUDA variants {list(cuda)}", row.line_of("pypi"))
        note = row.get("rocm_note")
        out.append(
            TorchRelease(
                str(row["release"]),
                t.pyrange(row["python"], row.line),
                cuda,
                t.strs(row["rocm"], row.line),
                tuple(sorted(cudnn.items())),
                pypi=None if pypi is None else str(pypi),
                rocm_note=None if note is None else str(note),
            )
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
        return Verdict.no(
            f"torch {version} is not in the compatibility table (known: {known}); add its row to builder/compat/data/compat.yaml"
        )
    if not in_range(python, rel.python):
        return Verdict.no(f"torch {version} supports Python {span(rel.python)}; this image has Python {python}")
    if base.vendor == "cpu":
        variant = "cpu"
    else:
        assert base.version is not None
        variants = rel.cuda if base.vendor == "cuda" else rel.rocm
        kind = "CUDA" if base.vendor == "cuda" else "ROCm"
        if not variants:
            if base.vendor == "rocm" and rel.rocm_note:
                return Verdict.no(f"{rel.rocm_note}; base {base.name} is ROCm {base.version}")
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
    from_pypi = variant == rel.pypi  # PyPI's own wheel is this variant: no extra index, mirrors carry it
    install = Install(
        framework="torch",
        version=version,
        requirements=(f"torch=={version}" if from_pypi else f"torch=={version}+{variant}",),
        index_urls=() if from_pypi else (facts.index_url.format(variant=variant),),
        variant=variant,
        built_cuda=built_cuda,
        cudnn=cudnn,
        notes=(f"torch {version} from PyPI: its Linux wheel is the {variant} build",) if from_pypi else (),
    )
    return Verdict(ok=True, install=install, warnings=_blackwell_warning(base, version, variant))


# The first CUDA release with kernels for Blackwell (compute capability 10.0 and 12.0).
BLACKWELL_CUDA = (12, 8)


def _blackwell_warning(base: Base, version: str, variant: str) -> tuple[str, ...]:
    """A CUDA 12.8+ base invites Blackwell GPUs; a wheel variant built for an older CUDA has no sm_100/sm_120 kernels."""
    if base.vendor != "cuda" or not variant.startswith("cu") or base.version is None:
        return ()
    if mm(base.version) >= BLACKWELL_CUDA and variant_version(variant) < BLACKWELL_CUDA:
        return (
            f"torch {version}+{variant} on base {base.name} (CUDA {base.version}) has no sm_100/sm_120 kernels: "
            "Blackwell GPUs will fail with 'no kernel image is available'; a cu128+ variant has them",
        )
    return ()


CUDA_TOOLKIT = re.compile(r"^cuda-toolkit\b[^=<>~!]*==\s*(\d+)\.(\d+)")
CUDA_RUNTIME = re.compile(r"^nvidia-cuda-runtime(?:-cu\d+)?\s*==\s*(\d+)\.(\d+)")


def variant_from_requires(requires: Sequence[str]) -> str | None:
    """The CUDA variant of a torch wheel, from its Requires-Dist lines: `nvidia-cuda-runtime-cu12==12.4.127`
    -> cu124, `cuda-toolkit[...]==13.0.3` -> cu130; None for a CPU wheel (no CUDA requirements)."""
    for line in requires:
        text = line.split(";")[0].strip()
        for pattern in (CUDA_RUNTIME, CUDA_TOOLKIT):
            found = pattern.match(text)
            if found:
                return f"cu{found.group(1)}{found.group(2)}"
    return None


@dataclass(frozen=True)
class Torch(Framework):
    def load(self, t: Table, section: LDict) -> TorchFacts:
        return load(t, section)

    def decide(self, base: Base, python: str, version: str, compat: Compat) -> Verdict:
        return decide_torch(base, python, version, compat)

    def row(self, version: str, compat: Compat) -> Row | None:
        found = _release(version, compat.facts(TorchFacts))
        return Row("torch.releases", found.release, found.python) if found else None

    def row_starts(self, compat: Compat) -> tuple[str, ...]:
        return tuple(r.release for r in compat.facts(TorchFacts).releases)

    def row_hint(self, version: str) -> str:
        return 'a torch.releases row for "{}.{}" (python, cuda, rocm, cudnn, pypi)'.format(*mm(version))

    def built_for(self, metas: Sequence[Meta]) -> str | None:
        return variant_from_requires(metas[0].requires_dist)

    def stated(self, metas: Sequence[Meta]) -> str | None:
        return f"its PyPI wheel is {self.built_for(metas) or 'a CPU build'}"

    def contradictions(self, version: str, meta: Meta, ok: Sequence[Placed], row: Row, compat: Compat) -> list[str]:
        """PyPI's own wheel is one CUDA variant (`pypi:`); its Requires-Dist says which."""
        found = _release(version, compat.facts(TorchFacts))
        assert found is not None  # the row that accepts it
        stated = variant_from_requires(meta.requires_dist)
        if found.pypi is None or stated == found.pypi:
            return []
        said = stated or ("a CPU build (no CUDA requirements)" if meta.requires_dist else "unknown (its metadata lists no Requires-Dist)")
        return [
            f"torch {version}'s PyPI wheel is {said} (its Requires-Dist), but {row.label} in "
            f"{COMPAT_FILE} says pypi: {found.pypi}: confirm which CUDA PyPI's torch {version} is built for and fix `pypi:` "
            f"(its images would install torch=={version} from PyPI as the {found.pypi} build)"
        ]

    def build_mismatches(self, variant: str, build: Mapping[str, object]) -> list[str]:
        """torch.version.cuda / .hip against the planned variant (cu130 -> 13.0, rocm6.4, cpu)."""
        if variant.startswith("cu"):
            expected = f"{variant[2:-1]}.{variant[-1]}"
            if build.get("cuda") != expected:
                return [f"torch.version.cuda: planned {expected} ({variant}), found {build.get('cuda')}"]
        elif variant.startswith("rocm"):
            if not build.get("hip"):
                return [f"torch.version.hip: planned {variant}, found none"]
        elif build.get("cuda") or build.get("hip"):
            return [f"torch: planned a cpu build, found cuda={build.get('cuda')} hip={build.get('hip')}"]
        return []

    def built(self, build: Mapping[str, object]) -> Built:
        cudnn, hip = build.get("cudnn"), build.get("hip")
        return Built(cudnn=str(cudnn) if cudnn else None, rocm=str(hip) if hip else None)


FRAMEWORK = Torch("torch", SECTION_KEYS, gpu_arch=True, local_variant=True)
