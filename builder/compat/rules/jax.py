"""jax: `jax[cudaNN]` by CUDA major and release, minimum CUDA/cuDNN, Python range, ROCm plugin."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from builder.compat.facts import Compat
from builder.compat.tables import PyRange, Table
from builder.compat.versions import in_range, mm, newest_at_or_below, span
from builder.records import Base, Install, Verdict
from builder.yamlsrc import LDict

SECTION_KEYS = ("bands", "cuda12_min", "cuda13_min", "numpy_min")


@dataclass(frozen=True)
class JaxRocm:
    extra: str
    plugin: str
    rocm: str  # "6.0" (exact minor) or "7" (any 7.x)


@dataclass(frozen=True)
class JaxBand:
    start: str
    python: PyRange
    cuda12: bool
    cuda13: bool
    cudnn_min: str
    rocm: JaxRocm | None


@dataclass(frozen=True)
class JaxFacts:
    bands: tuple[JaxBand, ...]  # each applies from `start` up to the next band
    cuda12_min: str
    cuda13_min: str
    numpy_min: tuple[tuple[str, str], ...]  # from jax release -> numpy floor


def load(t: Table, section: LDict) -> JaxFacts:
    keys = ("from", "python", "cuda12", "cuda13", "cudnn_min", "rocm")
    bands = []
    for row in t.rows(t.section(section, "bands"), keys, "from", section.line):
        rocm = row["rocm"]
        jr = None
        if rocm is not None:
            if not isinstance(rocm, dict) or set(rocm) != {"extra", "plugin", "rocm"}:
                raise t.fail("jax rocm must be null or {extra, plugin, rocm}", row.line)
            jr = JaxRocm(str(rocm["extra"]), str(rocm["plugin"]), str(rocm["rocm"]))
        bands.append(
            JaxBand(str(row["from"]), t.pyrange(row["python"], row.line), bool(row["cuda12"]), bool(row["cuda13"]), str(row["cudnn_min"]), jr)
        )
    return JaxFacts(
        bands=tuple(bands),
        cuda12_min=str(t.section(section, "cuda12_min")),
        cuda13_min=str(t.section(section, "cuda13_min")),
        numpy_min=tuple((str(k), str(v)) for k, v in t.mapping(section, "numpy_min").items()),
    )


def _numpy_min(version: str, facts: JaxFacts) -> str | None:
    starts = [start for start, _ in facts.numpy_min]
    i = newest_at_or_below(version, starts)
    return facts.numpy_min[i][1] if i is not None else None


def decide_jax(base: Base, python: str, version: str, compat: Compat) -> Verdict:
    facts = compat.facts(JaxFacts)
    i = newest_at_or_below(version, [band.start for band in facts.bands])
    if i is None:
        return Verdict.no(f"jax {version} predates the table (from {facts.bands[0].start}); use a newer jax")
    band = facts.bands[i]
    if not in_range(python, band.python):
        return Verdict.no(f"jax {version} supports Python {span(band.python)}; this image has Python {python}")
    pins = (f"jaxlib=={version}",)
    numpy_min = _numpy_min(version, facts)
    if base.vendor == "cpu":
        return Verdict(ok=True, install=Install("jax", version, (f"jax=={version}", *pins), variant="cpu", numpy_min=numpy_min))
    assert base.version is not None
    if base.vendor == "rocm":
        return _rocm(base, version, band, pins, numpy_min)
    return _cuda(base, version, band, pins, numpy_min, facts)


def _cuda(base: Base, version: str, band: JaxBand, pins: tuple[str, ...], numpy_min: str | None, facts: JaxFacts) -> Verdict:
    assert base.version is not None
    major = mm(base.version)[0]
    if major == 12 and band.cuda12:
        floor = facts.cuda12_min
    elif major == 13 and band.cuda13:
        floor = facts.cuda13_min
    elif major == 13:
        return Verdict.no(f"jax {version} has no CUDA 13 wheels (the cuda13 extra starts at 0.7.0); base {base.name} is CUDA 13")
    else:
        return Verdict.no(
            f"jax {version} ships CUDA 12/13 wheels only (CUDA 11.8 was dropped in jaxlib 0.4.26); base {base.name} is CUDA {major}"
        )
    if mm(base.version) < mm(floor):
        return Verdict.no(f"jax {version}'s cuda{major} wheels need CUDA >= {floor}; base {base.name} is CUDA {base.version}")
    install = Install(
        "jax",
        version,
        (f"jax[cuda{major}]=={version}", *pins),
        variant=f"cuda{major}",
        built_cuda=str(major),
        cudnn=f">={band.cudnn_min}",
        numpy_min=numpy_min,
    )
    return Verdict(ok=True, install=install)


def _rocm(base: Base, version: str, band: JaxBand, pins: tuple[str, ...], numpy_min: str | None) -> Verdict:
    assert base.version is not None
    if band.rocm is None:
        return Verdict.no(f"jax {version} publishes no ROCm plugin wheels (they start at 0.5.0); use rocm/jax images or a newer jax")
    wanted = band.rocm.rocm
    have = mm(base.version)
    fits = have[0] == int(wanted) if "." not in wanted else have == mm(wanted)
    if not fits:
        return Verdict.no(
            f"jax {version}'s ROCm plugin ({band.rocm.plugin}) is built for ROCm {wanted} and must match the host ROCm; "
            f"base {base.name} is ROCm {base.version}"
        )
    extra = band.rocm.extra
    if Version(version) >= Version("0.10.0") and wanted == "7":
        extra = "rocm7-local"
    install = Install("jax", version, (f"jax[{extra}]=={version}", *pins), variant=f"rocm{base.version}", numpy_min=numpy_min)
    return Verdict(ok=True, install=install)


decide = decide_jax
