"""jax: `jax[cudaNN]` by CUDA major and release (cuDNN floor, minimum CUDA), Python range, the
NumPy floor, a consistent jaxlib/plugin pin, and the ROCm plugin where PyPI has one; a release's
cudaNN extras and the jaxlib they pin, and jaxlib as the companion a release waits for."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from packaging.utils import canonicalize_name
from packaging.version import Version

from builder.compat import rocm
from builder.compat.facts import Compat
from builder.compat.requires import Meta, extras, pinned, requirements
from builder.compat.rules import COMPAT_FILE, Framework, Placed, Row
from builder.compat.tables import PyRange, Table
from builder.model.plan import Base, Install, Verdict
from builder.model.versions import in_range, mm, newest_at_or_below, span
from builder.util.yamlsrc import LDict

SECTION_KEYS = ("bands", "cuda_min", "jaxlib_pins", "rocm_plugins", "numpy_min")


@dataclass(frozen=True)
class JaxBand:
    start: str
    python: PyRange
    cuda: tuple[tuple[str, str], ...]  # CUDA major with wheels -> cuDNN floor of its plugin


@dataclass(frozen=True)
class RocmPlugin:
    start: str
    until: str  # inclusive
    plugin: str
    rocm: str  # "6.0" (must equal the base's minor) or "7" (its major)


@dataclass(frozen=True)
class NumpyFloor:
    start: str
    numpy: str
    python: str | None  # from this Python on


@dataclass(frozen=True)
class JaxFacts:
    bands: tuple[JaxBand, ...]  # each applies from `start` up to the next band
    cuda_min: tuple[tuple[str, str], ...]  # CUDA major -> lowest CUDA its wheels work with
    jaxlib_pins: tuple[tuple[str, str], ...]  # jax release -> the jaxlib its cuda extras pin
    rocm_plugins: tuple[RocmPlugin, ...]
    numpy_min: tuple[NumpyFloor, ...]


def load(t: Table, section: LDict) -> JaxFacts:
    bands = []
    for row in t.rows(t.section(section, "bands"), ("from", "python", "cuda"), "from", section.line):
        cuda = row["cuda"]
        if not isinstance(cuda, dict) or not all(str(k).isdigit() for k in cuda):
            raise t.fail('jax cuda must map a CUDA major to its cuDNN floor, e.g. {"12": "9.8"}', row.line)
        bands.append(
            JaxBand(str(row["from"]), t.pyrange(row["python"], row.line), tuple(sorted((str(k), str(v)) for k, v in cuda.items())))
        )
    plugins = tuple(
        RocmPlugin(str(row["from"]), str(row["until"]), str(row["plugin"]), str(row["rocm"]))
        for row in t.rows(t.section(section, "rocm_plugins"), ("from", "until", "plugin", "rocm"), "from", section.line)
    )
    floors = tuple(
        NumpyFloor(str(row["from"]), str(row["numpy"]), None if row.get("python") is None else str(row["python"]))
        for row in t.rows(t.section(section, "numpy_min"), ("from", "numpy"), None, section.line, optional=("python",))
    )
    return JaxFacts(
        bands=tuple(bands),
        cuda_min=tuple(sorted((str(k), str(v)) for k, v in t.mapping(section, "cuda_min").items())),
        jaxlib_pins=tuple(
            (str(row["jax"]), str(row["jaxlib"]))
            for row in t.rows(t.section(section, "jaxlib_pins"), ("jax", "jaxlib"), "jax", section.line)
        ),
        rocm_plugins=plugins,
        numpy_min=floors,
    )


def numpy_floor(version: str, python: str, facts: JaxFacts) -> str | None:
    """The newest `from` at or below the release; its rows for Pythons at or below the image's; the highest floor."""
    i = newest_at_or_below(version, sorted({f.start for f in facts.numpy_min}, key=Version))
    if i is None:
        return None
    start = sorted({f.start for f in facts.numpy_min}, key=Version)[i]
    found = [f.numpy for f in facts.numpy_min if f.start == start and (f.python is None or mm(f.python) <= mm(python))]
    return max(found, key=Version) if found else None


def decide_jax(base: Base, python: str, version: str, compat: Compat) -> Verdict:
    facts = compat.facts(JaxFacts)
    i = newest_at_or_below(version, [band.start for band in facts.bands])
    if i is None:
        return Verdict.no(f"jax {version} predates the table (from {facts.bands[0].start}); use a newer jax")
    band = facts.bands[i]
    if not in_range(python, band.python):
        return Verdict.no(f"jax {version} supports Python {span(band.python)}; this image has Python {python}")
    numpy_min = numpy_floor(version, python, facts)
    if base.vendor == "cpu":
        return Verdict(
            ok=True, install=Install("jax", version, (f"jax=={version}", f"jaxlib=={version}"), variant="cpu", numpy_min=numpy_min)
        )
    assert base.version is not None
    if base.vendor == "rocm":
        return _rocm(base, version, facts, numpy_min, compat.rocm)
    return _cuda(base, version, band, facts, numpy_min)


def _cuda(base: Base, version: str, band: JaxBand, facts: JaxFacts, numpy_min: str | None) -> Verdict:
    assert base.version is not None
    major = str(mm(base.version)[0])
    cudnn = dict(band.cuda).get(major)
    if cudnn is None:
        have = ", ".join(k for k, _ in band.cuda)
        first = next((b.start for b in facts.bands if major in dict(b.cuda)), None)
        since = f" (the first with CUDA {major} wheels is {first})" if first else ""
        return Verdict.no(f"jax {version} ships CUDA {have} wheels only{since}; base {base.name} is CUDA {major}")
    floor = dict(facts.cuda_min).get(major, f"{major}.0")
    if mm(base.version) < mm(floor):
        return Verdict.no(f"jax {version}'s cuda{major} wheels need CUDA >= {floor}; base {base.name} is CUDA {base.version}")
    jaxlib = dict(facts.jaxlib_pins).get(version, version)
    pins: tuple[str, ...] = (f"jax[cuda{major}]=={version}", f"jaxlib=={jaxlib}")
    notes: tuple[str, ...] = ()
    if jaxlib != version:  # the extra pins an older jaxlib: pin the plugin to it too, or the resolver mixes them
        pins += (f"jax-cuda{major}-plugin[with-cuda]=={jaxlib}",)
        notes = (f"jax {version}'s cuda{major} extra pins jaxlib {jaxlib}; the plugin is pinned to {jaxlib} to match",)
    install = Install("jax", version, pins, variant=f"cuda{major}", built_cuda=major, cudnn=f">={cudnn}", numpy_min=numpy_min, notes=notes)
    return Verdict(ok=True, install=install)


def _rocm(base: Base, version: str, facts: JaxFacts, numpy_min: str | None, rocm_facts: rocm.RocmFacts) -> Verdict:
    assert base.version is not None
    plugin = next((p for p in facts.rocm_plugins if Version(p.start) <= Version(version) <= Version(p.until)), None)
    if plugin is None:
        listed = "; ".join(f"{p.plugin} {p.start}-{p.until}" for p in facts.rocm_plugins)
        return Verdict.no(f"jax {version} has no ROCm plugin on PyPI (there are: {listed}); use another jax or rocm/jax images")
    have = mm(base.version)
    fits = have[0] == int(plugin.rocm) if "." not in plugin.rocm else have == mm(plugin.rocm)
    if not fits:
        return Verdict.no(
            f"jax {version}'s ROCm plugin ({plugin.plugin}) is built for ROCm {plugin.rocm} and must match the host ROCm; "
            f"base {base.name} is ROCm {base.version}"
        )
    pjrt = plugin.plugin.replace("-plugin", "-pjrt")
    loads = [(plugin.plugin, version), *([(pjrt, version)] if "." not in plugin.rocm else [])]  # the rocm7 plugin's XLA is its -pjrt wheel
    why = rocm.missing(loads, base, rocm_facts)
    if why is not None:
        return Verdict.no(why)
    pins = (f"jax=={version}", f"jaxlib=={version}", f"{plugin.plugin}=={version}")
    install = Install("jax", version, pins, variant=f"rocm{base.version}", numpy_min=numpy_min)
    return Verdict(ok=True, install=install)


def jax_cuda_majors(lines: Iterable[str]) -> tuple[str, ...]:
    """CUDA majors with a `cudaNN` extra that requires jax-cudaNN-plugin (or -pjrt)."""
    majors = set()
    for req in requirements(lines):
        plugin = re.fullmatch(r"jax-cuda(\d+)-(?:plugin|pjrt)", canonicalize_name(req.name))
        if plugin and f"cuda{plugin.group(1)}" in extras(req):
            majors.add(plugin.group(1))
    return tuple(sorted(majors, key=int))


def jax_jaxlib_pin(lines: Iterable[str]) -> str | None:
    """The jaxlib the cudaNN extras pin, when they pin one."""
    for req in requirements(lines):
        if canonicalize_name(req.name) == "jaxlib" and any(re.fullmatch(r"cuda\d+", e) for e in extras(req)):
            found = pinned(req.specifier)
            if found:
                return found
    return None


@dataclass(frozen=True)
class Jax(Framework):
    def load(self, t: Table, section: LDict) -> JaxFacts:
        return load(t, section)

    def decide(self, base: Base, python: str, version: str, compat: Compat) -> Verdict:
        return decide_jax(base, python, version, compat)

    def row(self, version: str, compat: Compat) -> Row | None:
        bands = compat.facts(JaxFacts).bands
        i = newest_at_or_below(version, [b.start for b in bands])
        return None if i is None else Row("jax.bands", f"from {bands[i].start}", bands[i].python)

    def row_starts(self, compat: Compat) -> tuple[str, ...]:
        return tuple(b.start for b in compat.facts(JaxFacts).bands)

    def row_hint(self, version: str) -> str:
        return f'a jax.bands row from "{version}" (python, cuda)'

    def built_for(self, metas: Sequence[Meta]) -> str | None:
        return ", ".join(jax_cuda_majors(metas[0].requires_dist)) or None

    def stated(self, metas: Sequence[Meta]) -> str | None:
        cuda = self.built_for(metas)
        return f"cuda extras for CUDA {cuda}" if cuda else "no cudaNN extra"

    def companion_version(self, version: str, meta: Meta) -> str:
        return jax_jaxlib_pin(meta.requires_dist) or version

    def contradictions(self, version: str, meta: Meta, ok: Sequence[Placed], row: Row, compat: Compat) -> list[str]:
        """A cudaNN extra for every CUDA major the rules plan, and the jaxlib its extras pin as the table pins it."""
        problems = []
        have = sorted(jax_cuda_majors(meta.requires_dist), key=int)
        planned = sorted({(i.variant or "").removeprefix("cuda") for _, _, i in ok if (i.variant or "").startswith("cuda")}, key=int)
        for major in (m for m in planned if m not in have):
            problems.append(
                f"jax {version}'s metadata has no cuda{major} extra (it has: {', '.join(f'cuda{m}' for m in have) or 'none'}), but {row.label} "
                f'in {COMPAT_FILE} plans CUDA {major} wheels: confirm, and add a jax.bands row from "{version}" without CUDA {major}'
            )
        pinned_jaxlib, rules = jax_jaxlib_pin(meta.requires_dist), dict(compat.facts(JaxFacts).jaxlib_pins).get(version, version)
        if pinned_jaxlib and pinned_jaxlib != rules:
            problems.append(
                f"jax {version}'s cuda extras pin jaxlib {pinned_jaxlib}, but {COMPAT_FILE} pins jaxlib {rules} for it: "
                f'add {{jax: "{version}", jaxlib: "{pinned_jaxlib}"}} to jax.jaxlib_pins'
            )
        return problems


FRAMEWORK = Jax("jax", SECTION_KEYS, gpu_arch=True, companion="jaxlib")
