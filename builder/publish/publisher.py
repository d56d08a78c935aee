"""Push a tested image and build its known-good record: the immutable tag and the floating tags
of its line, the digest as the registry reports it, the package manifest read from the image,
and what the smoke tests measured inside it.

Everything here acts on the image id the gate approved, never on a name: a name (the build tag, a
push tag) can be moved by a concurrent `builder build --force` or a `docker tag` at any moment, and
the image behind it then is not the one that was tested. Every pushed tag is checked against the
registry: its digest must be the approved image's (the engine lists it among that image's
RepoDigests) and every floating tag's digest must be the immutable tag's."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import filelock

from builder.catalog.layers import ImageLayer, above_base
from builder.catalog.records import BaseIdentity, KnownGood, MeasuredAccelerator
from builder.compat.rules import framework
from builder.engine import push, sizes
from builder.engine.port import Engine, EngineFault
from builder.host.facts import HostInfo
from builder.model.locked_fit import variant_properties
from builder.model.plan import ImageSpec
from builder.model.results import SmokeResult, TestedOn
from builder.publish.inventory import Inventory, read_inventory, run_script
from builder.publish.tags import floating_tags, newest_of_line
from builder.util import fsio
from builder.util.errors import RunFailure, UserError
from builder.util.text import utc_stamp

REPOSITORY = re.compile(r"^(?:[a-z0-9.-]+(?::\d{1,5})?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")
MANIFEST_ENV = re.compile(r"^(PATH|VIRTUAL_ENV|LD_LIBRARY_PATH|NVIDIA_[A-Z_]+|CUDA_[A-Z_]+|PYTHON[A-Z_]*|NUMBA_[A-Z_]+|HSA_[A-Z_]+)=")
MANIFEST_SCRIPT = (
    "set -e; echo '## pip freeze'; python -m pip freeze --all --disable-pip-version-check 2>/dev/null; "
    "echo '## dpkg'; dpkg-query -W -f '${Package} ${Version}\\n'; echo '## environment'; env | sort"
)


def check_repository(value: str) -> str:
    """A registry repository (host[:port]/path), lower case, no tag or digest."""
    if not REPOSITORY.match(value) or len(value) > 255:
        raise UserError(
            f"--registry {value!r} is not a repository like 127.0.0.1:5000/gpu-images or ghcr.io/org/images (no tag, no digest)"
        )
    return value


def builder_version() -> str:
    try:
        return importlib.metadata.version("gpu-image-builder")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def now() -> str:
    return utc_stamp()


@dataclass(frozen=True)
class Measured:
    """What the smoke tests found inside the image, as its known-good record keeps it."""

    frameworks: dict[str, str]  # public versions
    python: str
    accelerator: MeasuredAccelerator
    libraries: dict[str, str]  # CUDA libraries as loaded


def measured(spec: ImageSpec, result: SmokeResult) -> Measured:
    """What the smoke tests found inside the image: framework versions, Python, CUDA/cuDNN/ROCm, libraries."""
    probe = result.probe
    found = {name: probe.frameworks.get(name) if probe else None for name in spec.versions}
    frameworks = {name: ((f.version if f else None) or spec.versions[name]).split("+")[0] for name, f in found.items()}
    libraries = {c.name: c.found for c in probe.cuda.checks if c.ok and c.found} if probe else {}
    cuda = libraries.get("cuda-runtime") or next((f.cuda_build for f in found.values() if f and f.cuda_build), None)
    built = [framework(name).built(f.build) for name, f in found.items() if f]  # what each build reports (torch's cuDNN, HIP)
    cudnn = libraries.get("cudnn") or next((b.cudnn for b in built if b.cudnn), None)
    rocm = next((b.rocm for b in built if b.rocm), None)
    accelerator = MeasuredAccelerator(spec.base.vendor, spec.accelerator.version, cuda, cudnn, rocm)
    if spec.base.vendor == "cpu":
        accelerator = MeasuredAccelerator("cpu", None)
    return Measured(frameworks, probe.host.python if probe and probe.host.python else spec.python, accelerator, libraries)


def base_identity(engine: Engine, spec: ImageSpec) -> BaseIdentity:
    info = engine.inspect_image(spec.base.from_ref)
    if info is None:
        raise RunFailure(f"its base image {spec.base.from_ref} is no longer in the engine, so the record cannot name it; build it again")
    digests = [d for d in info.repo_digests if "@sha256:" in d]
    return BaseIdentity(spec.base.name, spec.base.from_ref, info.id, digests[0] if digests else None)


def lock_sha256(spec: ImageSpec) -> str | None:
    return hashlib.sha256(spec.lock.text.encode()).hexdigest() if spec.lock else None


def read_manifest(engine: Engine, spec: ImageSpec, image: str, host: HostInfo) -> str:
    """pip freeze, the dpkg list and the key environment, read in a locked-down container of the
    approved image id (a tool-labelled container, so a killed run's one is swept later)."""
    output = run_script(engine, spec, image, host, MANIFEST_SCRIPT, f"the package manifest of {spec.id}")
    lines, section = [], ""
    for line in output.splitlines():
        section = line if line.startswith("## ") else section
        if section == "## environment" and not line.startswith("## ") and not MANIFEST_ENV.match(line):
            continue
        lines.append(line)
    return "\n".join(lines) + "\n"


class Unread(RunFailure):
    """A pushed tag the registry did not report back (it went away right after the push)."""


def registry_digest(engine: Engine, reference: str) -> str:
    """The manifest digest the registry reports for a tag (asked through the engine)."""
    try:
        return engine.registry_digest(reference)
    except EngineFault as exc:
        raise Unread(f"the registry did not report a digest for {reference}: {exc.message[:200]}") from None


@contextlib.contextmanager
def repository_turn(repository: str, log: Callable[[str], None]) -> Iterator[None]:
    """One publish at a time per repository on this host. The engine pushes names, not ids, so two
    publishes of one image (or of two images of one line) give the same local `repository:tag`
    names, and each would release or push the other's: the second waits for the first, then finds
    the registry and the catalog as the first left them. (Publishes from two hosts sharing one
    engine are not covered: the lock is a file of this host's lock folder.)"""
    folder = fsio.lock_dir()
    folder.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(repository.encode()).hexdigest()[:16]
    lock = filelock.FileLock(str(folder / f"builder-publish-{key}.lock"))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        log(f"waiting for another publish to {repository} on this host to finish")
        lock.acquire()  # polls: Ctrl-C and SIGTERM reach it
    try:
        yield
    finally:
        lock.release()


class PushNames:
    """The local names publish gives the approved image id to push it (the engine pushes names, not
    ids). They stay while the image is published: when a concurrent build has moved the build tag,
    they are what keeps the tested image in the engine. `release` (always, in a finally) gives each
    name back what it named before, nothing or another image, unless someone moved it meanwhile."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.made: list[tuple[str, str, str | None, str]] = []  # repository, tag, what it named before, our image

    def give(self, image: str, repository: str, tag: str) -> str:
        target = f"{repository}:{tag}"
        before = _image_id(self.engine, target)
        self.engine.tag(image, repository, tag)
        self.made.append((repository, tag, before, image))
        return target

    def release(self) -> None:
        for repository, tag, before, image in reversed(self.made):
            target = f"{repository}:{tag}"
            if before == image or _image_id(self.engine, target) != image:
                continue  # it was ours already, or someone moved it meanwhile: theirs
            if before is None:
                self.engine.remove_image(target)
            else:
                self.engine.tag(before, repository, tag)
        self.made.clear()


def _image_id(engine: Engine, ref: str) -> str | None:
    info = engine.inspect_image(ref)
    return None if info is None else info.id


def push_as(
    engine: Engine, names: PushNames, image: str, repository: str, tag: str, log: Callable[[str], None], deadline: float | None = None
) -> str:
    """Push the image id `image` as repository:tag (its local name is released by `names`)."""
    return push.push_image(engine, names.give(image, repository, tag), log=log, deadline=deadline)


def push_verified(
    engine: Engine,
    names: PushNames,
    image: str,
    repository: str,
    tag: str,
    log: Callable[[str], None],
    deadline: float | None,
    expected: str | None = None,
    landed: list[str] | None = None,
) -> str:
    """push_as, then proof that the registry's repository:tag is the approved image (and, for a
    floating tag, the immutable tag's digest). A name moved between our tag and the engine's push
    sent another image: pushed once more from the id; still wrong, RunFailure naming what is there.
    `landed` gets each digest the engine says it pushed of the approved image, before the registry
    is asked, so a caller stopped while the registry is read knows a tag of ours may be there."""
    found = ""
    for _ in range(2):
        pushed = push_as(engine, names, image, repository, tag, log, deadline)
        info = engine.inspect_image(image)
        ours = info is not None and f"{repository}@{pushed}" in info.repo_digests
        if ours and landed is not None:
            landed.append(pushed)
        found = registry_digest(engine, f"{repository}:{tag}")
        if found == pushed and ours and expected in (None, found):
            return found
    want = expected or f"the digest of the tested image {image[:19]}"
    raise RunFailure(
        f"{repository}:{tag} points at {found} in the registry, not {want}: its local name was moved during the push (a concurrent build or docker tag?); publish again"
    )


@dataclass(frozen=True)
class Local:
    """What the record needs from the engine, read before anything is pushed: after the immutable
    push only the catalog write remains, so a push is never left without its record by a manifest
    container or a base image that fails."""

    manifest: str  # pip freeze, dpkg list, environment (without the digest header)
    base: BaseIdentity
    size_mb: float
    inventory: Inventory  # the venv's distributions and dpkg's packages: the SBOM's content
    image_id: str = ""  # the tested image's ID and layer diff IDs, for the attestation (a rebuild compares them)
    diff_ids: tuple[str, ...] = ()
    layers: tuple[ImageLayer, ...] | None = None  # above the base, with their bytes (None: the engine's history did not say)


def read_local(engine: Engine, spec: ImageSpec, image: str, host: HostInfo) -> Local:
    info = engine.inspect_image(image)
    if info is None:
        raise RunFailure(f"the tested image {image[:19]} of {spec.id} is no longer in the engine; build and test it again")
    return Local(
        read_manifest(engine, spec, image, host),
        base_identity(engine, spec),
        round(info.size / 1e6, 1),
        read_inventory(engine, spec, image, host),
        info.id,
        info.diff_ids,
        _layers_above_base(engine, spec, image),
    )


def _layers_above_base(engine: Engine, spec: ImageSpec, image: str) -> tuple[ImageLayer, ...] | None:
    found = sizes.layers_of(engine, image, spec.base.from_ref)
    return above_base(found.sized, found.base) if found is not None else None


def build_record(spec: ImageSpec, local: Local, result: SmokeResult, repository: str, digest: str, accepted: bool) -> KnownGood:
    facts = measured(spec, result)
    return KnownGood(
        id=spec.id,
        tag=f"{repository}:{spec.id}",
        digest=f"{repository}@{digest}",
        floating=(),
        content_hash=spec.content_hash,
        stack=spec.stack,
        os=spec.base.os,
        base=local.base,
        lock_sha256=lock_sha256(spec),
        frameworks=facts.frameworks,
        accelerator=facts.accelerator,
        python=facts.python,
        libraries=facts.libraries,
        verdict=result.verdict,
        gpu_skipped_accepted=result.verdict == "gpu-skipped" and accepted,
        tests=result.tests.to_json(),
        host=result.host or TestedOn("unknown host"),
        tested=result.date,
        published=now(),
        builder_version=builder_version(),
        size_mb=local.size_mb,
        manifest=f"manifests/{spec.id}.txt",
        fit=result.fit,
        # a ROCm image's gfx targets: measured from its own binaries by the smoke test where it did, else from its locked wheels
        amd=result.amd_fit or (spec.locked_fit.amd if spec.locked_fit else None),
        variant_properties=variant_properties(result.fit.runs_on, spec.accelerator.require_cuda) if result.fit else (),
        platform=spec.platform,
        emulated=result.emulated,
        tag_line=spec.tag_line,
        layers=local.layers,
        notes=tuple(note for i in spec.installs for note in i.notes)
        + (("published without a GPU run: its verdict is gpu-skipped",) if result.verdict == "gpu-skipped" else ()),
    )


def immutable_record(
    spec: ImageSpec, local: Local, result: SmokeResult, repository: str, digest: str, accepted: bool
) -> tuple[KnownGood, str]:
    """The record of the approved image pushed as repository:<id> (no floating tags yet) and its manifest."""
    record = build_record(spec, local, result, repository, digest, accepted)
    return record, f"# {spec.id}\n# {record.digest}\n{local.manifest}"


def floating_to_move(record: KnownGood, known: Sequence[KnownGood]) -> tuple[str, ...]:
    """The floating tags (full names) this record is the newest of, given the other records."""
    others = [r for r in known if r.id != record.id]
    repository = record.repository
    return tuple(f"{repository}:{line}" for line in floating_tags(record.line) if newest_of_line(line, [*others, record]) is record)


def move_floating(
    engine: Engine,
    names: PushNames,
    image: str,
    record: KnownGood,
    tags: Sequence[str],
    log: Callable[[str], None],
    moved: list[str],
    deadline: float | None = None,
) -> None:
    """Push each floating tag from the approved id, each proven to be the record's digest; `moved`
    gets each one as it lands, so a caller that is interrupted knows what the registry holds."""
    digest = record.digest.split("@", 1)[1]
    for full in tags:
        repository, _, line = full.rpartition(":")
        push_verified(engine, names, image, repository, line, log, deadline, expected=digest)
        moved.append(full)
