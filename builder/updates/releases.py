"""New framework releases placed against the compatibility rules, never guessed.

Pure: the index's JSON documents come in through a `Fetch` callable (builder.updates.index's
client, or a dict in tests). For each framework matrix.yaml lists, a candidate is a final release
newer than the newest version listed, not yanked, with a Linux x86_64 wheel. Each one is read from
its own metadata (Requires-Python, the CUDA it was built for, its NumPy bounds) and given to the
rules for every base and Python of the matrix:

- "needs rules": the table does not know it, or it starts a series newer than the table's newest
  row (rows apply "from here on" and must not silently cover it), or its metadata contradicts the
  rules (a Python it excludes, another CUDA build, a missing cudaNN extra, a NumPy the rules would
  pin that it refuses); the reason says what to add or confirm in compat.yaml.
- "no image here": the rules know it, but this matrix gets no image of it (with the first reason), or
  `builder lock` would refuse every image of it for what its metadata pins exactly (the lock's own
  one-CUDA-per-image check, builder/lock/claims.py: tensorflow[and-cuda] 2.18 pins CUDA 12.5 on a 12.8 base).
- "needs rules" also when the lock would refuse some of its images: matrix.yaml must exclude them first,
  so `--apply` never plans what `builder lock` refuses.
- "waiting": a release whose companion (Framework.companion: jax's jaxlib) is not on the index yet.
- "plannable": planning the matrix with it added makes images whose locks the lock's check lets
  through; `accepted` lists them.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.utils import canonicalize_name
from packaging.version import Version

from builder.compat.facts import Compat
from builder.compat.requires import Meta, pinned, requirements
from builder.compat.rules import Framework, Placed, Row, registry, table
from builder.compat.rules.numpy import pick_numpy
from builder.lock import claims
from builder.model.plan import Base, ImageSpec, Lock, Matrix, Verdict
from builder.model.versions import mm
from builder.spec.plan import make_plan
from builder.updates.metadata import available, candidates, numpy_allows, numpy_bounds, python_allows, read_meta
from builder.util.errors import UserError
from builder.util.text import printable

PLANNABLE = "plannable"
NEEDS_RULES = "needs rules"
NO_IMAGE = "no image here"
WAITING = "waiting"
STATUSES = (PLANNABLE, NEEDS_RULES, NO_IMAGE, WAITING)
UNKNOWN_MARKERS = ("is not in the compatibility table", "predates the table")  # what the rules say of a release they lack


class Fetch(Protocol):
    """`fetch(project)` -> the project document (`releases`); `fetch(project, version)` -> that release's (`info`)."""

    def __call__(self, project: str, version: str | None = None) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class Release:
    """One new release and where the rules put it."""

    framework: str
    project: str  # the index project(s) it was found under ("cupy-cuda12x, cupy-cuda13x")
    version: str
    requires_python: str | None
    cuda: str | None  # what its metadata says it was built for (Framework.built_for): cu130, 12.5, "12, 13"
    numpy: str | None  # its NumPy requirement, e.g. ">=1.24,<2.4"
    status: str  # one of STATUSES
    reason: str
    accepted: tuple[str, ...] = ()  # plannable: the "base/py3.12" pairs that get an image
    companion: CompanionPin | None = None  # the companion release it needs (Framework.companion), for a framework that has one

    @property
    def plannable(self) -> bool:
        return self.status == PLANNABLE

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["accepted"] = list(self.accepted)
        return out


@dataclass(frozen=True)
class CompanionPin:
    """The release of another index project a release needs beside it (Framework.companion and
    companion_version say which: jax's jaxlib, its own version or the one its extras pin)."""

    project: str
    version: str
    missing: bool = False  # that release is not on the index (yet)


@dataclass(frozen=True)
class UpdatesReport:
    releases: tuple[Release, ...]
    newest_listed: tuple[tuple[str, str], ...] = ()  # framework -> the newest version matrix.yaml lists (the baseline)

    @property
    def plannable(self) -> tuple[Release, ...]:
        return tuple(r for r in self.releases if r.plannable)

    def to_json(self) -> dict[str, Any]:
        return {"releases": [r.to_json() for r in self.releases], "newest_listed": dict(self.newest_listed)}


# --- placing one release --------------------------------------------------------------------


@dataclass(frozen=True)
class Published:
    """What the index says about one release (cupy: one Meta per package that has it)."""

    framework: Framework
    version: str
    metas: tuple[Meta, ...]
    companion: str | None = None  # the companion's version it needs (Framework.companion)
    companion_missing: bool = False

    def meta(self, project: str | None = None) -> Meta | None:
        return next((m for m in self.metas if project is None or m.project == project), None)

    @property
    def cuda(self) -> str | None:
        return self.framework.built_for(self.metas)


def read_release(fw: Framework, version: str, metas: Sequence[Meta], companion_versions: Collection[str] = ()) -> Published:
    """The release as its metadata describes it; with a companion (jax's jaxlib), the companion's
    version it needs and whether the index has it."""
    metas = tuple(sorted(metas, key=lambda m: m.project))
    if fw.companion is None:
        return Published(fw, version, metas)
    needed = fw.companion_version(version, metas[0])
    return Published(fw, version, metas, companion=needed, companion_missing=needed not in companion_versions)


SHOWN_LIMIT = 200  # characters of a Requires-Python or NumPy bound a release reports
REASON_LIMIT = 2000  # characters of a release's detail, which quotes metadata too


def _shown(value: str | None) -> str | None:
    """Metadata text as a release reports it (table, JSON, summary): bounded like any text from the
    index, since a mirror's 64 MiB document may hold one endless Requires-Python."""
    return None if value is None else printable(value, SHOWN_LIMIT)


def _joined(values: Iterable[tuple[str, str | None]]) -> str | None:
    """One value when all agree, else `project: value` for each."""
    pairs = list(values)
    distinct = {v for _, v in pairs}
    if len(distinct) <= 1:
        return next(iter(distinct), None)
    return "; ".join(f"{p}: {v or 'none'}" for p, v in pairs)


def _facts_text(pub: Published) -> str:
    meta = pub.metas[0]
    said = [f"Requires-Python {printable(meta.requires_python or 'unstated', 120)}"]
    stated = pub.framework.stated(pub.metas)
    if stated:
        said.append(stated)
    numpy = numpy_bounds(meta.requires_dist)
    if numpy:
        said.append(f"numpy {numpy}")
    return ", ".join(said)


def _row_hint(pub: Published) -> str:
    return f"add {pub.framework.row_hint(pub.version)} to {pub.framework.facts_at}, with its source ({_facts_text(pub)})"


def contradictions(pub: Published, ok: Sequence[Placed], row: Row, compat: Compat) -> list[str]:
    """Where the release's own metadata says otherwise than the rules that accept it: the project an
    install comes from, the Pythons and NumPy it accepts (alike for every framework), then what the
    framework reads of its build (Framework.contradictions)."""
    fw, version, facts_at = pub.framework.name, pub.version, pub.framework.facts_at
    problems: list[str] = []
    refused: dict[str, list[str]] = {}  # Requires-Python -> the Pythons it refuses
    numpy_refused: dict[tuple[str, str], list[str]] = {}  # (numpy pin, the release's numpy requirement) -> the Pythons
    for base, python, install in ok:
        project = pub.framework.install_project(install, pub.metas)
        meta = pub.meta(project)
        if meta is None:
            major = str(mm(base.version or "0")[0])
            problems.append(
                f"{fw} {version} is not on the index as {project} (only as {', '.join(m.project for m in pub.metas)}), but {row.label} in "
                f'{facts_at} maps CUDA {major} to it: add a {row.section} row for "{version}" without it'
            )
            continue
        if python_allows(meta.requires_python, python) is False and python not in refused.setdefault(meta.requires_python or "", []):
            refused[meta.requires_python or ""].append(python)
        try:
            pin = pick_numpy((install,), python, compat)
        except ValueError:
            pin = None
        if pin and not numpy_allows(meta.requires_dist, python, pin):
            pythons = numpy_refused.setdefault((pin, numpy_bounds(meta.requires_dist) or ""), [])
            pythons += [] if python in pythons else [python]
    for requires, pythons in refused.items():
        if pythons:
            problems.append(
                f"{fw} {version} requires Python {printable(requires, 120)} (its metadata), but {row.label} in {facts_at} allows Python "
                f"{', '.join(sorted(pythons))} (python: [{', '.join(row.python)}]): narrow it, or add a row for {version}"
            )
    for (pin, bounds), pythons in numpy_refused.items():
        if pythons:
            ceiling = next((i.numpy_max for _, p, i in ok if i.numpy_max and p in pythons), None)
            problems.append(
                f"{fw} {version} requires numpy {bounds} (its metadata), but the rules in {facts_at} "
                f"pin numpy {pin} for its Python {', '.join(sorted(pythons))} images (ceiling {ceiling}, {row.label}): lower the ceiling, or add a row for {version}"
            )
    problems += pub.framework.contradictions(version, pub.metas[0], ok, row, compat)
    return problems


def _pairs_text(pairs: Sequence[tuple[str, str]]) -> str:
    """cpu-ubuntu24.04 (3.12), cuda13-debian12 (3.11, 3.12)."""
    by_base: dict[str, list[str]] = {}
    for base, python in pairs:
        by_base.setdefault(base, []).append(python)
    return ", ".join(f"{base} ({', '.join(pythons)})" for base, pythons in by_base.items())


def planned(matrix: Matrix, framework: str, version: str, compat: Compat) -> tuple[tuple[ImageSpec, ...], str]:
    """Plan the matrix with this version added: the images of it, and else why none (the plan's first
    skip reason). The plan is the one list of images."""
    grown = replace(matrix, frameworks=tuple((n, (*vs, version) if n == framework else vs) for n, vs in matrix.frameworks))
    try:
        plan = make_plan(grown, compat)
    except UserError as exc:
        return (), f"planning the matrix with it fails: {exc}"
    images = tuple(s for s in plan.images if s.versions.get(framework) == version)
    if images:
        return images, ""
    skip = next((s for s in plan.skipped if dict(s.frameworks).get(framework) == version), None)
    if skip is None:
        return (), f"no stack of {matrix.path} uses {framework}"
    return (), f"{skip.reason} ({skip.base}, Python {skip.python}; and every other combination)"


def _pairs(matrix: Matrix, images: Sequence[ImageSpec]) -> tuple[tuple[str, str], ...]:
    """The (base, python) pairs of the images, in matrix order."""
    got = {(s.base.name, s.python) for s in images}
    order = {(b.name, p): i for i, (b, p) in enumerate((b, p) for b in matrix.bases for p in matrix.python)}
    return tuple(sorted(got, key=lambda pair: (order.get(pair, len(order)), pair)))


def exact_pins(pub: Published, spec: ImageSpec) -> dict[str, str]:
    """What the release's own metadata pins exactly (`==`) for the install the image makes of it: its
    Requires-Dist lines without an extra, and those of the extras its requirement names
    (tensorflow[and-cuda] pins nvidia-cuda-runtime-cu12==12.5.82), for the image's Python."""
    install = next((i for i in spec.installs if i.framework == pub.framework.name), None)
    if install is None:
        return {}
    meta = pub.meta(pub.framework.install_project(install, pub.metas)) or pub.meta()
    if meta is None:
        return {}
    wanted = {""}
    for line in requirements(install.requirements):
        if canonicalize_name(line.name) == canonicalize_name(meta.project):
            wanted |= {canonicalize_name(e) for e in line.extras}
    out: dict[str, str] = {}
    for req in requirements(meta.requires_dist):
        version = pinned(req.specifier)
        if version is None:
            continue
        if req.marker is not None:
            env = {
                "python_version": spec.python,
                "python_full_version": f"{spec.python}.0",
                "sys_platform": "linux",
                "platform_system": "Linux",
            }
            try:
                if not any(req.marker.evaluate({**env, "extra": extra}) for extra in wanted):
                    continue
            except (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
                continue
        out[canonicalize_name(req.name)] = version
    return out


def lock_refusals(pub: Published, images: Sequence[ImageSpec], compat: Compat) -> list[tuple[ImageSpec, str]]:
    """The images whose lock `builder lock` would refuse for what the release itself pins exactly: the
    lock's own check (builder/lock/claims.py, one CUDA per image), run on those pins before any lock."""
    out = []
    for spec in images:
        pins = exact_pins(pub, spec)
        found = claims.refusals(spec, Lock(text="", inputs="", pins=tuple(sorted(pins.items()))), compat) if pins else []
        if found:
            out.append((spec, found[0]))
    return out


def place(pub: Published, matrix: Matrix, compat: Compat) -> Release:
    """The rules' verdict on one release for this matrix's bases and Pythons, checked against its metadata."""
    framework, fw, version = pub.framework, pub.framework.name, pub.version
    verdicts: list[tuple[Base, str, Verdict]] = [
        (b, p, framework.decide(b, p, version, compat)) for b in matrix.bases for p in matrix.python
    ]
    ok: list[Placed] = [(b, p, v.install) for b, p, v in verdicts if v.ok and v.install is not None]
    row = framework.row(version, compat)
    newest = framework.newest_row(compat)
    unknown = not ok and any(marker in v.reason for _, _, v in verdicts for marker in UNKNOWN_MARKERS)
    if row is None or unknown:
        reason = f"{fw} {version} is not in the compatibility table: {_row_hint(pub)}"
        return _release(pub, NEEDS_RULES, reason)
    if mm(version) > mm(newest):
        reason = (
            f"{fw} {version} starts a series newer than the newest {fw} row ({newest}, which applies from there on) and the rules must not "
            f"silently cover it: {_row_hint(pub)}"
        )
        return _release(pub, NEEDS_RULES, reason)
    problems = list(dict.fromkeys(contradictions(pub, ok, row, compat)))
    if problems:
        return _release(pub, NEEDS_RULES, "; ".join(problems))
    if not ok:
        first = verdicts[0]
        return _release(
            pub,
            NO_IMAGE,
            f"the rules place it on none of this matrix's bases and Pythons, e.g. {first[0].name}, Python {first[1]}: {first[2].reason}",
        )
    images, why_not = planned(matrix, fw, version, compat)
    if not images:
        return _release(
            pub,
            NO_IMAGE,
            f"the rules accept it ({_pairs_text([(b.name, p) for b, p, _ in ok])}), but the matrix makes no image of it: {why_not}",
        )
    refused = lock_refusals(pub, images, compat)
    if refused:
        spec, problem = refused[0]
        where = _pairs_text(_pairs(matrix, [s for s, _ in refused]))
        detail = (
            f"`builder lock` would refuse {len(refused)} of its {len(images)} image(s), on {where}: {spec.id}: {problem} "
            f"(what {fw} {version} itself pins exactly; one CUDA per image)"
        )
        if len(refused) == len(images):
            return _release(pub, NO_IMAGE, f"{detail}; no image of it can be locked here")
        return _release(
            pub,
            NEEDS_RULES,
            f'{detail}: exclude it there in matrix.yaml (`exclude: [{{base: {spec.base.name}, {fw}: "{version}"}}]`), or name those '
            "images under cuda_exceptions: with a reason, then it is plannable",
        )
    pairs = _pairs(matrix, images)
    if pub.companion_missing:
        return _release(
            pub,
            WAITING,
            f"{framework.companion} {pub.companion} (which {fw} {version} needs) is not on the index yet; it is placed once it is",
        )
    accepted = tuple(f"{b}/py{p}" for b, p in pairs)
    noun = "pair" if len(pairs) == 1 else "pairs"
    return _release(pub, PLANNABLE, f"the rules place it on {len(pairs)} base/Python {noun}: {_pairs_text(pairs)}", accepted)


def _release(pub: Published, status: str, reason: str, accepted: tuple[str, ...] = ()) -> Release:
    return Release(
        framework=pub.framework.name,
        project=", ".join(m.project for m in pub.metas),
        version=pub.version,
        requires_python=_shown(_joined((m.project, m.requires_python) for m in pub.metas)),
        cuda=pub.cuda,
        numpy=_shown(_joined((m.project, numpy_bounds(m.requires_dist)) for m in pub.metas)),
        status=status,
        reason=printable(reason, REASON_LIMIT),
        accepted=accepted,
        companion=None
        if pub.framework.companion is None or pub.companion is None
        else CompanionPin(pub.framework.companion, pub.companion, pub.companion_missing),
    )


# --- orchestration -------------------------------------------------------------------------------


def _newest(versions: Iterable[str]) -> str | None:
    parsed = []
    for text in versions:
        try:
            parsed.append(Version(text))
        except ValueError:  # InvalidVersion, or int()'s refusal of a number over 4,300 digits
            continue
    return str(max(parsed)) if parsed else None


def find_updates(matrix: Matrix, compat: Compat, fetch: Fetch) -> UpdatesReport:
    """Every new release of the frameworks matrix.yaml lists, placed; ordered by framework (registry order), then version."""
    listed = dict(matrix.frameworks)
    out: list[Release] = []
    newest_listed: list[tuple[str, str]] = []
    cuda_majors = frozenset(str(mm(b.version)[0]) for b in matrix.bases if b.vendor == "cuda" and b.version)
    for fw in registry():
        baseline = _newest(listed.get(fw.name, ()))
        if baseline is None:
            continue  # not in matrix.yaml: nothing to compare with, no list to add to
        newest_listed.append((fw.name, baseline))
        projects = fw.projects(compat, baseline, cuda_majors)
        found: dict[Version, dict[str, str]] = {}  # one release (PEP 440 equality) -> project -> the spelling it is fetched by
        for project in projects:
            for version in candidates(fetch(project), project, baseline):
                spellings = found.setdefault(Version(version), {})
                spellings[project] = min(spellings.get(project, version), version, key=spelling_rank)
        companion = available(fetch(fw.companion), fw.companion) if fw.companion and found else set()
        for release in sorted(found):
            by_project = found[release]
            version = min(by_project.values(), key=spelling_rank)
            metas = [read_meta(fetch(project, spelled), project, version) for project, spelled in by_project.items()]
            out.append(place(read_release(fw, version, metas, companion), matrix, compat))
    return UpdatesReport(tuple(out), tuple(newest_listed))


def spelling_rank(version: str) -> tuple[bool, int, str]:
    """Of several spellings of one release (2.14.2, 2.14.2.0, 2.14.02: one by PEP 440, which pip
    installs alike), the one to keep: its normal form, then the shortest. Several would each become
    an image of the same release."""
    try:
        normal = str(Version(version)) == version
    except ValueError:  # InvalidVersion, or int()'s refusal of a number over 4,300 digits
        normal = False
    return (not normal, len(version), version)


def check(
    matrix: Matrix,
    *,
    base_url: str | None = None,
    ca_bundle: str | None = None,
    compat: Compat | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> UpdatesReport:
    """find_updates against the index's JSON API: base_url, else $BUILDER_INDEX_JSON_URL, else PyPI's; the CA bundle
    given, else $BUILDER_CA_BUNDLE, else matrix.yaml build.ca_bundle, else the system's. IndexFailure (a RunFailure)
    when the index cannot answer; UserError for a malformed URL or CA bundle."""
    from builder.engine.settings import CA_ENV  # the network side, imported only when asked to use it
    from builder.updates.index import DEFAULT_TIMEOUT_S, IndexClient, index_deadline, index_json_url

    env = os.environ if env is None else env
    client = IndexClient(
        index_json_url(base_url, env),
        ca_bundle=ca_bundle or env.get(CA_ENV) or matrix.ca_bundle,
        timeout_s=DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s,
        deadline_s=index_deadline(env),
    )
    return find_updates(matrix, compat or table(), client)
