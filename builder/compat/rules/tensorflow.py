"""tensorflow: tested CUDA/cuDNN per release; [and-cuda] on CUDA, -cpu on cpu, -rocm on ROCm; the
CUDA a release's [and-cuda] extra pins (its nvidia-cuda-runtime requirement)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from packaging.utils import canonicalize_name
from packaging.version import Version

from builder.compat.facts import Compat
from builder.compat.requires import Meta, extras, requirements
from builder.compat.rules import COMPAT_FILE, Framework, Placed, Row
from builder.compat.tables import PyRange, Table
from builder.model.plan import Base, Install, Verdict
from builder.model.versions import in_range, mm, release_of, span
from builder.util.yamlsrc import LDict

SECTION_KEYS = ("releases", "and_cuda_from", "rocm_index_url", "rocm")


@dataclass(frozen=True)
class TfRelease:
    release: str
    python: PyRange
    cuda: str
    cudnn: str


@dataclass(frozen=True)
class TensorflowFacts:
    releases: tuple[TfRelease, ...]
    and_cuda_from: str
    rocm_index_url: str
    rocm: tuple[tuple[str, tuple[str, ...]], ...]  # ROCm minor -> tensorflow-rocm releases


def load(t: Table, section: LDict) -> TensorflowFacts:
    return TensorflowFacts(
        releases=tuple(
            TfRelease(str(row["release"]), t.pyrange(row["python"], row.line), str(row["cuda"]), str(row["cudnn"]))
            for row in t.rows(t.section(section, "releases"), ("release", "python", "cuda", "cudnn"), "release", section.line)
        ),
        and_cuda_from=str(t.section(section, "and_cuda_from")),
        rocm_index_url=str(t.section(section, "rocm_index_url")),
        rocm=tuple(
            (str(row["rocm"]), t.strs(row["tf"], row.line))
            for row in t.rows(t.section(section, "rocm"), ("rocm", "tf"), "rocm", section.line)
        ),
    )


def decide_tensorflow(base: Base, python: str, version: str, compat: Compat) -> Verdict:
    facts = compat.facts(TensorflowFacts)
    rel = _row_of(version, facts)
    if rel is None:
        known = ", ".join(r.release for r in facts.releases)
        return Verdict.no(
            f"tensorflow {version} is not in the compatibility table (known: {known}); add its row to builder/compat/data/compat.yaml"
        )
    if not in_range(python, rel.python):
        return Verdict.no(f"tensorflow {version} supports Python {span(rel.python)}; this image has Python {python}")
    if base.vendor == "cpu":
        return Verdict(ok=True, install=Install("tensorflow", version, (f"tensorflow-cpu=={version}",), variant="cpu"))
    assert base.version is not None
    if base.vendor == "rocm":
        return _rocm(base, version, facts)
    if Version(version) < Version(facts.and_cuda_from):
        return Verdict.no(f"tensorflow {version} predates the [and-cuda] extra ({facts.and_cuda_from}+); use a newer release")
    tested, have = mm(rel.cuda), mm(base.version)
    if have[0] != tested[0]:
        return Verdict.no(f"tensorflow {version} is tested with CUDA {rel.cuda}; base {base.name} is CUDA {have[0]}")
    if have < tested:
        # Every CUDA image holds its CUDA wheels on its base's minor (one CUDA user space), and
        # [and-cuda] needs the tested CUDA's wheels or newer (PYPI_TF): they cannot be held there.
        return Verdict.no(
            f"tensorflow {version}[and-cuda] needs CUDA >= {rel.cuda} wheels; base {base.name} is CUDA {base.version}, "
            "and an image keeps its CUDA wheels on its base's CUDA (one CUDA per image): use a CUDA "
            f"{rel.cuda}+ base"
        )
    install = Install(
        "tensorflow",
        version,
        (f"tensorflow[and-cuda]=={version}",),
        variant=f"cuda{tested[0]}",
        built_cuda=rel.cuda,
        cudnn=rel.cudnn,
    )
    return Verdict(ok=True, install=install)


def _rocm(base: Base, version: str, facts: TensorflowFacts) -> Verdict:
    assert base.version is not None
    rocm = "{}.{}".format(*mm(base.version))
    offered = dict(facts.rocm).get(rocm)
    if not offered:
        known = ", ".join(r for r, _ in facts.rocm)
        return Verdict.no(f"tensorflow-rocm wheels are listed for ROCm {known}; base {base.name} is ROCm {base.version}")
    if version not in offered:
        return Verdict.no(f"tensorflow-rocm for ROCm {rocm} exists for {', '.join(offered)} only, not {version}")
    wheel = f"{version}.{rocm.replace('.', '')}0"
    index = facts.rocm_index_url.format(rocm=base.version)
    install = Install("tensorflow", version, (f"tensorflow-rocm=={wheel}",), index_urls=(index,), variant=f"rocm{rocm}")
    return Verdict(
        ok=True, install=install, warnings=(f"tensorflow-rocm index {index} is unconfirmed; check it or override it under indexes:",)
    )


def tensorflow_cuda(lines: Iterable[str]) -> str | None:
    """CUDA major.minor of the `and-cuda` extra's nvidia-cuda-runtime(-cuNN) requirement."""
    for req in requirements(lines):
        if re.fullmatch(r"nvidia-cuda-runtime(?:-cu\d+)?", canonicalize_name(req.name)) and "and-cuda" in extras(req):
            found = sorted(req.specifier, key=lambda s: s.operator not in ("==", "==="))
            for spec in found:
                if spec.operator in ("==", "===", ">=", "~=") and "*" not in spec.version:
                    return "{}.{}".format(*mm(spec.version))
    return None


def has_and_cuda(lines: Iterable[str]) -> bool:
    return any("and-cuda" in extras(r) for r in requirements(lines))


def _row_of(version: str, facts: TensorflowFacts) -> TfRelease | None:
    return next((r for r in facts.releases if r.release == release_of(version)), None)


@dataclass(frozen=True)
class Tensorflow(Framework):
    def load(self, t: Table, section: LDict) -> TensorflowFacts:
        return load(t, section)

    def decide(self, base: Base, python: str, version: str, compat: Compat) -> Verdict:
        return decide_tensorflow(base, python, version, compat)

    def row(self, version: str, compat: Compat) -> Row | None:
        found = _row_of(version, compat.facts(TensorflowFacts))
        return Row("tensorflow.releases", found.release, found.python) if found else None

    def row_starts(self, compat: Compat) -> tuple[str, ...]:
        return tuple(r.release for r in compat.facts(TensorflowFacts).releases)

    def row_hint(self, version: str) -> str:
        return 'a tensorflow.releases row for "{}.{}" (python, cuda, cudnn)'.format(*mm(version))

    def built_for(self, metas: Sequence[Meta]) -> str | None:
        return tensorflow_cuda(metas[0].requires_dist)

    def stated(self, metas: Sequence[Meta]) -> str | None:
        cuda = self.built_for(metas)
        return f"its [and-cuda] extra pins CUDA {cuda}" if cuda else "no CUDA stated"

    def contradictions(self, version: str, meta: Meta, ok: Sequence[Placed], row: Row, compat: Compat) -> list[str]:
        """The [and-cuda] extra the rules plan on CUDA bases, and the CUDA it pins against the row's tested one."""
        found = _row_of(version, compat.facts(TensorflowFacts))
        assert found is not None  # the row that accepts it
        stated = tensorflow_cuda(meta.requires_dist)
        if any((i.variant or "").startswith("cuda") for _, _, i in ok) and not has_and_cuda(meta.requires_dist):
            return [
                f"tensorflow {version} has no [and-cuda] extra (its metadata), but {row.label} in {COMPAT_FILE} plans "
                "tensorflow[and-cuda] on CUDA bases: confirm how it gets CUDA, and fix the row (or add one for it)"
            ]
        if stated and mm(stated) != mm(found.cuda):
            return [
                f"tensorflow {version}'s [and-cuda] extra pins CUDA {stated} (nvidia-cuda-runtime), but {row.label} in {COMPAT_FILE} "
                f'says cuda: "{found.cuda}": confirm its tested CUDA and fix the row (or add one for {version})'
            ]
        return []


FRAMEWORK = Tensorflow("tensorflow", SECTION_KEYS)
