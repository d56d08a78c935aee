"""One image through the engine: lock its tag, stage its context, build it (retrying only network
flakes), then remove the image it replaced.

- Two processes building the same tag take turns (a file lock per tag); the second re-checks
  the content hash and skips what the first just built, so no loser's image is left dangling.
- The context is staged from the rendered bytes, never from images/ (see staging.py).
- The build's settings (CA bundle, pip.conf or uv.toml, local.txt), the pinned local wheels and,
  for a locked image, the static uv it installs with (native_uv.py) are published on the secret
  server for this build only (never copied into the context: every Dockerfile is
  one stage, so what it copies is in the image).
- Afterwards the image the tag pointed to before is removed: forced rebuilds don't grow the disk.
  The Dockerfile has one stage, so a build leaves no build-stage image behind (older versions
  kept one per tag, labelled `io.builder.stage-of`; `builder clean` removes those).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol, TextIO

import filelock
from packaging.utils import parse_wheel_filename

from builder.engine import native_uv, reproducible, sizes, staging
from builder.engine.diagnose import diagnose_text
from builder.engine.failures import diagnose_build, is_network_build_failure, is_tls_failure
from builder.engine.line_config import line_splice
from builder.engine.ownership import Owner, owner_of
from builder.engine.port import BuildRequest, Engine, EngineFault, ImageInfo
from builder.engine.retry import GaveUp, retry_network
from builder.engine.secrets import SecretServer, redact, serving
from builder.engine.session import SESSION_ID
from builder.engine.settings import BuildSettings
from builder.lock.layer import NVIDIA_LAYER_NAME, LayerError, from_ref, is_nvidia, line_layer, source_date_epoch
from builder.model.plan import ImageSpec, Lock
from builder.render.labels import HASH_LABEL, build_labels

_STEP_ID = re.compile(r"^ ---> ([0-9a-f]{12})\s*$|^Successfully built ([0-9a-f]{12})\s*$")
_RUNNING_IN = re.compile(r"^ ---> Running in ([0-9a-f]{12,64})\s*$")  # the classic builder's container for a RUN step
ENGINE_FAILED = "engine connection failed"
Log = Callable[[str, str], None]  # (image id, line)


class LayerMaker(Protocol):
    """The layer tars of an image (builder/lock/layer.py) by name, not written: their bytes are made
    as the normalization copies them into the load's archive; raises LayerFailed. For a canonical
    image (`line` False): venv.tar, and nvidia.tar for a lock with NVIDIA library wheels on no CUDA
    line; for its CUDA line's image (`line` True): the line's nvidia.tar. The use-case supplies it:
    fetching the lock's wheels is the index's business, not the engine's."""

    def __call__(self, spec: ImageSpec, *, line: bool = False) -> Mapping[str, reproducible.LayerSource]: ...


class LayerFailed(Exception):
    """The venv layer could not be made from the lock (a wheel not fetched, not installable): one line."""


class NetworkFlake(Exception):
    """A build failed in a way a retry can fix (download errors)."""


class BuildFailed(Exception):
    def __init__(self, message: str, blocked_by: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.blocked_by = blocked_by  # see BuildResult.blocked_by


@dataclass(frozen=True)
class BuildResult:
    id: str
    status: str  # built | up-to-date | failed | interrupted | not-built
    seconds: float = 0.0
    sizes: dict[str, float] | None = None  # image_mb, venv_mb, base_mb, ratio (engine/sizes.py)
    attempts: int = 0
    log: str | None = None
    error: str | None = None
    cause: str | None = None
    fix: str | None = None
    # Set when the build could not run for reasons outside the image: "network" (download errors in
    # every attempt), "tls" (a certificate the build does not trust), "engine" (the engine went away).
    # Such a failure says nothing about the image; the nightly reports it as a failed stage.
    blocked_by: str | None = None
    image_id: str | None = None  # a canonical image's: the same lock on the same base gives the same ID
    base_id: str | None = None  # the base image a canonical image was built on (its FROM names it by tag)


@dataclass
class Run:
    """What every image build of one run shares."""

    settings: BuildSettings
    build_dir: Path
    lock_dir: Path
    revision: str = "unknown"
    retries: int = 3
    backoff_s: float = 5.0
    no_cache: bool = False
    on_line: Log | None = None
    owner: Owner | None = None  # the workspace building: its label on each image, its ledger of step images (ownership.py)
    secrets: SecretServer | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    # image id -> the container of the build step running now, so an interrupt can remove it
    step_containers: dict[str, str] = field(default_factory=dict)
    # image id -> the newest step image its build committed (12 hex): a canonical build's own (it
    # builds without the cache), removed with its parents when the build ends unfinished
    steps: dict[str, str] = field(default_factory=dict)
    # those an unfinished canonical build could not remove (the interrupt cut its connection): the
    # interrupt removes them through a fresh one (engine/build.py)
    unfinished_steps: list[str] = field(default_factory=list)
    layers: LayerMaker | None = None  # makes a canonical image's venv layer (matrix.yaml canonical_layers)
    # the workspace label to write instead of the owner's identity ("": none), for `builder reproduce`,
    # which rebuilds a published image with the labels its config carries (usecases/reproduce.py)
    workspace: str | None = None

    @property
    def log_dir(self) -> Path:
        return self.build_dir / "logs"

    @property
    def tools_dir(self) -> Path:
        """build/tools/: the static uv the builds are served (engine/native_uv.py), unpacked once."""
        return self.build_dir / "tools"

    @property
    def staging_root(self) -> Path:
        """build/contexts/<session>/: a killed run's folder is recognised and swept by the next run."""
        return self.build_dir / "contexts" / SESSION_ID.replace(":", "_")


@contextlib.contextmanager
def tag_lock(lock_dir: Path, tag: str, stop: threading.Event | None = None) -> Iterator[None]:
    """Take turns on one tag; waiting gives up as soon as `stop` is set (an interrupt)."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(tag.encode()).hexdigest()[:16]
    lock = filelock.FileLock(str(lock_dir / f"builder-build-{key}.lock"))
    while True:
        if stop is not None and stop.is_set():
            raise BuildFailed("interrupted while waiting for another build of this tag")
        try:
            lock.acquire(timeout=0.2)
            break
        except filelock.Timeout:
            continue
    try:
        yield
    finally:
        lock.release()


def build_image(run: Run, engine: Engine, spec: ImageSpec, files: Mapping[str, bytes], *, force: bool) -> BuildResult:
    """Build one image from its rendered context `files`; never raises for a failed build."""
    if run.secrets is None:  # a build outside a BuildRun's pool (a team environment's): a server of its own
        with serving() as server:
            return build_image(replace(run, secrets=server), engine, spec, files, force=force)
    started = time.monotonic()
    with tag_lock(run.lock_dir, spec.tag, run.stop):
        current = engine.inspect_image(spec.tag)
        if not force and current is not None and current.labels.get(HASH_LABEL) == spec.content_hash:
            return up_to_date(engine, spec, time.monotonic() - started)  # built by another run while we waited
        # the image the tag named: removed once replaced, unless another workspace built it (its clean removes it)
        replaced = None if current is None or not replaceable(current, run.owner) else current.id
        return _build_locked(run, engine, spec, files, started, replaced)


def replaceable(image: ImageInfo, owner: Owner | None) -> bool:
    """Whether a build may remove the image its tag named: built by this workspace, or by none that
    says so (older versions); never another workspace's."""
    built_by = owner_of(image.labels)
    return built_by is None or (owner is not None and built_by == owner.identity)


def _build_locked(
    run: Run, engine: Engine, spec: ImageSpec, files: Mapping[str, bytes], started: float, replaced: str | None
) -> BuildResult:
    run.log_dir.mkdir(parents=True, exist_ok=True)
    log_path = run.log_dir / f"{spec.id}.log"
    secrets = run.secrets
    if secrets is None:
        raise RuntimeError("build settings to serve but no secret server")
    staged = staging.stage(spec, files, run.staging_root, run.settings)
    base_before = engine.inspect_image(from_ref(spec)) if spec.canonical else None  # the FROM image the build asserts
    from_base = _base_below(engine, spec, base_before)  # a canonical line member: built FROM the base, its line's layer spliced in
    if line_layer(spec):  # its FROM holds the NVIDIA wheels: nothing serves them to the install
        staged = _without_nvidia(staged)
    layers: Mapping[str, reproducible.LayerSource] = {}  # a canonical image's layer tars (venv.tar, nvidia.tar), made on the host
    if spec.canonical:
        try:
            staged, layers = _with_layer(run, spec, staged, from_base)
        except BuildFailed as exc:
            shutil.rmtree(staged.path, ignore_errors=True)
            return _failed(run, spec, started, 0, log_path, exc.message)
    done: BuildResult | None = None
    try:
        done = _build_staged(run, engine, secrets, spec, staged, layers, started, replaced, (base_before, from_base), log_path)
        return done
    finally:
        step = run.steps.pop(spec.id, None)
        if spec.canonical and (done is None or done.status != "built"):
            # a build the engine finished as this run was stopped (or whose normalization failed) tagged its
            # unnormalized image: that tag is only ever this build's, never the image's (build_tag); an
            # unfinished one leaves its step images, which (no cache) no other build shares: the newest
            # goes with the parents only it has (one committed after it was read stays for `builder clean`)
            with contextlib.suppress(EngineFault):
                engine.remove_image(build_tag(spec))
            if step is not None and not _removed(engine, step):
                run.unfinished_steps.append(step)


def _removed(engine: Engine, image: str) -> bool:
    try:
        return engine.remove_image(image)
    except EngineFault:
        return False


def _build_staged(
    run: Run,
    engine: Engine,
    secrets: SecretServer,
    spec: ImageSpec,
    staged: staging.Staged,
    layers: Mapping[str, reproducible.LayerSource],
    started: float,
    replaced: str | None,
    below: tuple[ImageInfo | None, ImageInfo | None],
    log_path: Path,
) -> BuildResult:
    """`below`: a canonical image's FROM image as the build began, and the base it was built FROM
    instead where that is not its FROM (`_base_below`)."""
    base_before, from_base = below
    uv, no_uv = None, None
    try:
        uv = native_uv.binary(run.settings, run.tools_dir) if staged.uv else None
    except native_uv.Unavailable as exc:  # the Dockerfile installs with pip when no uv is served (offline, no uv wheel)
        staged, no_uv = replace(staged, uv=False), exc.message
    wheels = {path.name: path for path in staged.wheel_files}
    # each link names its sha256: uv takes a find-links file for a hash-pinned requirement only then
    # (sha256_of read each file once this run, when the lock's hashes were checked)
    hashes = {name: staging.sha256_of(path) for name, path in wheels.items()}
    wheels_url = secrets.publish_files(wheels, hashes) if wheels else None
    uv_folder = secrets.publish_files({"uv": uv}) if uv is not None else None

    def publish(data: bytes | None) -> str | None:  # read once by each attempt of this build
        return None if data is None else secrets.publish(data, uses=run.retries)

    served = Served(
        pip_conf=None if staged.uv else publish(staged.served_pip_conf(wheels_url)),  # uv reads its uv.toml
        ca=publish(staged.served_ca),
        local=publish(staged.served_local),
        uv=None if uv_folder is None else uv_folder + "uv",
        uv_conf=publish(staged.served_uv_conf(wheels_url)),
        no_uv=no_uv,
    )
    attempts = 0

    def attempt(number: int) -> None:
        nonlocal attempts
        attempts = number
        _attempt(run, engine, spec, staged, served, log_path, number)

    try:
        retry_network(attempt, flake=lambda exc: isinstance(exc, NetworkFlake), attempts=run.retries, wait_s=run.backoff_s, max_wait_s=60)
    except GaveUp as exc:
        error = f"network errors in all {attempts} attempts: {exc.reason}"
        return _failed(run, spec, started, attempts, log_path, error, blocked_by="network")
    except BuildFailed as exc:
        return _failed(
            run, spec, started, attempts, log_path, exc.message, "interrupted" if run.stop.is_set() else "failed", exc.blocked_by
        )
    finally:
        run.step_containers.pop(spec.id, None)
        for url in (served.pip_conf, served.ca, served.local, served.uv_conf, wheels_url, uv_folder):
            if url is not None:
                secrets.revoke(url)
        shutil.rmtree(staged.path, ignore_errors=True)
    built = engine.inspect_image(build_tag(spec))
    if built is None:
        return _failed(run, spec, started, attempts, log_path, f"the build finished but the engine has no image {build_tag(spec)}")
    if spec.canonical:
        try:
            built = reproducible_image(run, engine, spec, built, base_before.id if base_before else None, layers, from_base)
        except BuildFailed as exc:
            return _failed(run, spec, started, attempts, log_path, exc.message)
    if replaced and replaced != built.id:  # the old image is garbage now; nightly rebuilds would fill the disk
        engine.remove_image(replaced)
    image_id, base_id = (built.id, base_before.id if base_before else None) if spec.canonical else (None, None)
    seconds = time.monotonic() - started
    return BuildResult(spec.id, "built", seconds, measured(engine, spec), attempts, str(log_path), image_id=image_id, base_id=base_id)


def build_tag(spec: ImageSpec) -> str:
    """What the engine tags the build with: a canonical image's tag moves only once the normalized
    image is loaded (reproducible_image), so an interrupt never leaves the tag on the unnormalized one."""
    return f"{spec.tag}-unnormalized" if spec.canonical else spec.tag


def _without_nvidia(staged: staging.Staged) -> staging.Staged:
    """A CUDA line's member: its line's image has the NVIDIA wheels installed (engine/line_image.py),
    so the local wheel files served to its install leave them out (GBs nothing would read)."""
    rest = tuple(path for path in staged.wheel_files if not is_nvidia(str(parse_wheel_filename(path.name)[0])))
    return replace(staged, wheels=tuple(path.name for path in rest), wheel_files=rest)


def _base_below(engine: Engine, spec: ImageSpec, line: ImageInfo | None) -> ImageInfo | None:
    """The base a canonical member of a CUDA line is built FROM instead of its line's image `line`,
    when that image is the base plus one layer (the line's NVIDIA layer, as engine/line_image.py makes
    it): the normalization splices that layer back in (`_line_splice`), so `docker save` streams the
    base and the small steps, not the line's gigabytes too. None where the build is FROM its FROM."""
    if line is None or not spec.canonical or not line_layer(spec):
        return None
    base = engine.inspect_image(spec.base.from_ref)
    if base is None or not base.diff_ids or line.diff_ids[:-1] != base.diff_ids:
        return None
    return base


def _with_layer(
    run: Run, spec: ImageSpec, staged: staging.Staged, from_base: ImageInfo | None = None
) -> tuple[staging.Staged, Mapping[str, reproducible.LayerSource]]:
    """The layer tars of the lock (venv.tar, and nvidia.tar where the lock pins NVIDIA wheels and is
    on no CUDA line: their entries, their bytes made when the normalization copies them), the
    context's Dockerfile with each `ADD <tar> /` step marked instead (engine/reproducible.py `marked`:
    the build commits only the small steps, the normalization puts the tars in their places) and FROM
    the base where `from_base` says so, and nothing to serve: the Dockerfile fetches nothing (it is
    built with the network off)."""
    if run.layers is None:
        raise BuildFailed(f"{spec.id} is a canonical image but this build cannot make its venv layer")
    try:
        made = dict(sorted(run.layers(spec).items()))
    except LayerFailed as exc:
        raise BuildFailed(f"its venv layer: {exc}") from None
    dockerfile = staged.path / "Dockerfile"
    try:
        text = reproducible.marked(dockerfile.read_text(encoding="utf-8"), made)
        if from_base is not None:
            text = reproducible.from_base(text, from_ref(spec), spec.base.from_ref)
        dockerfile.write_text(text, encoding="utf-8")
    except reproducible.NotAnArchive as exc:
        raise BuildFailed(f"its Dockerfile does not add the layers made from its lock: {exc}") from None
    served = replace(
        staged, wheels=(), wheel_files=(), extra_index_urls=(), pip_conf_to_serve=None, served_ca=None, served_local=None, uv=False
    )
    return served, made


def reproducible_image(
    run: Run,
    engine: Engine,
    spec: ImageSpec,
    built: ImageInfo,
    base_id: str | None,
    layers: Mapping[str, reproducible.LayerSource],
    from_base: ImageInfo | None = None,
) -> ImageInfo:
    """The built image saved, its timestamps and build-only fields normalized to the lock's epoch,
    each of `layers` (the tars made from the lock) put in the place of the step that stands for it,
    loaded back under its tag (engine/reproducible.py); the intermediate image this build made is
    removed. Refused when the base is not `base_id` (the one the build started from) or the image is
    not on its layers: the FROM line names the base by tag, so the build asserts its ID. `from_base`:
    the base a line member was built FROM instead of its line's image (`_base_below`)."""
    assert spec.lock is not None
    try:
        image_id = _normalized(run, engine, spec, built, spec.lock, (base_id, from_base), layers)
    finally:
        engine.remove_image(build_tag(spec))  # the tag only: the image goes with it unless the load made it the final one
    loaded = engine.inspect_image(spec.tag)
    if loaded is None or loaded.id != image_id:
        raise BuildFailed(f"the engine did not load the normalized image {image_id} as {spec.tag}")
    if built.id != image_id:
        engine.remove_image(built.id)  # the build's own image, untagged now: only this build made it
    return loaded


def _normalized(
    run: Run,
    engine: Engine,
    spec: ImageSpec,
    built: ImageInfo,
    lock: Lock,
    below: tuple[str | None, ImageInfo | None],
    layers: Mapping[str, reproducible.LayerSource],
) -> str:
    base_id, from_base = below
    ref = from_ref(spec)  # its base, or its CUDA line's image: kept as they are, shared
    base = engine.inspect_image(ref)
    if base is None or base.id != base_id:
        raise BuildFailed(f"the base {ref} is not the image the build started from ({base_id}); build again")
    splice = None
    if from_base is not None:  # built FROM the base: the line's layer goes back in above it
        line, ref = base, spec.base.from_ref
        base = engine.inspect_image(ref)
        if base is None or base.id != from_base.id or line.diff_ids[:-1] != base.diff_ids:
            raise BuildFailed(f"the base {ref} is not the image the build started from ({from_base.id}); build again")
        splice = _line_splice(run, engine, spec, line, base)
    keep = len(base.diff_ids)
    if not keep or built.diff_ids[:keep] != base.diff_ids:
        raise BuildFailed(f"the built image is not on the layers of its base {ref}; build again")
    run.staging_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="reproducible-", dir=run.staging_root) as tmp:
        saved = Path(tmp) / "saved.tar"
        made: list[str] = []
        try:
            engine.save_image(build_tag(spec), saved)
            # loaded back into the engine that built it (streamed: the archive is never a file): the
            # FROM image's layers are there (it is `built`'s), and the line's where it was spliced
            epoch = source_date_epoch(lock)
            engine.load_stream(
                lambda out: made.append(
                    reproducible.normalize_archive(saved, out, epoch, keep, [spec.tag], kept_files=False, files=layers, splice=splice)
                )
            )
        except (EngineFault, reproducible.NotAnArchive, LayerFailed, LayerError) as exc:
            raise BuildFailed(f"cannot make the image reproducible: {exc}") from None
    (image_id,) = made
    return image_id


def _line_splice(run: Run, engine: Engine, spec: ImageSpec, line: ImageInfo, base: ImageInfo) -> reproducible.Splice:
    """The line's NVIDIA layer as its image has it on `base` (engine/line_config.py), for a member
    built FROM the base; its entries are the line's layer's (from its wheels' lists: no byte of it is
    read) if the normalization needs to know a directory beneath."""
    assert spec.line is not None and spec.line_image is not None and run.layers is not None  # line_layer(spec) and canonical
    history = len(engine.history(base.id))
    if len(engine.history(line.id)) != history + 1:
        raise BuildFailed(
            f"the line image {spec.line_image} is not its base and one layer; remove it (`builder clean --stale`) and build again"
        )
    maker = run.layers

    def members() -> list[tarfile.TarInfo]:
        return maker(spec, line=True)[NVIDIA_LAYER_NAME].members()  # LayerFailed: the normalization's failure

    return line_splice(spec.line, line.diff_ids[-1], len(base.diff_ids), history, members)


def measured(engine: Engine, spec: ImageSpec) -> dict[str, float] | None:
    found = sizes.measure(engine, spec.tag, spec.base.from_ref)
    return found.to_json() if found else None


def up_to_date(engine: Engine, spec: ImageSpec, seconds: float = 0.0) -> BuildResult:
    return BuildResult(spec.id, "up-to-date", seconds, measured(engine, spec))


@dataclass(frozen=True)
class Served:
    """The one-time URLs a build reads its settings from (None: nothing of that kind to serve)."""

    pip_conf: str | None = None
    ca: str | None = None
    local: str | None = None
    uv: str | None = None  # the static uv binary (engine/native_uv.py), for a Dockerfile that installs with it
    uv_conf: str | None = None  # its uv.toml: the pip.conf's sources in uv's words
    no_uv: str | None = None  # why a Dockerfile that installs with uv is served none (it installs with pip)


def _failed(
    run: Run,
    spec: ImageSpec,
    started: float,
    attempts: int,
    log_path: Path,
    error: str,
    status: str = "failed",
    blocked_by: str | None = None,
) -> BuildResult:
    text = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else ""
    evidence = text + "\n" + error
    build = diagnose_build(evidence, str(run.settings.ca_bundle or "no CA bundle (none was given and the host has none)"))
    probe = None if build else diagnose_text(evidence)
    cause, fix = build if build else ((probe.cause, probe.fix) if probe else (None, None))
    return BuildResult(
        spec.id,
        status,
        time.monotonic() - started,
        attempts=attempts,
        log=str(log_path),
        error=redact(error),
        cause=cause,
        fix=fix,
        blocked_by=blocked_by if status == "failed" else None,
    )


def _attempt(
    run: Run,
    engine: Engine,
    spec: ImageSpec,
    staged: staging.Staged,
    served: Served,
    log_path: Path,
    attempt: int,
) -> None:
    if run.stop.is_set():
        raise BuildFailed("interrupted before the build started")
    # Docker's predefined proxy args, kept out of the history but not out of the ID: with any build arg the
    # classic builder writes `|0 ` before each RUN's history entry. A canonical build fetches nothing (its
    # network is off) and takes none, so a proxy on the building host cannot change its image ID.
    buildargs = {} if spec.canonical else dict(run.settings.build_args)
    for name, url in (
        ("BUILDER_PIP_CONF_URL", served.pip_conf),
        ("BUILDER_CA_URL", served.ca),
        ("BUILDER_LOCAL_URL", served.local),
        ("BUILDER_UV_URL", served.uv),
        ("BUILDER_UV_CONF_URL", served.uv_conf),
    ):
        if url is not None:
            buildargs[name] = url
    workspace = run.workspace if run.workspace is not None else (run.owner.identity if run.owner else "")
    labels = build_labels(spec, run.revision, workspace)
    with log_path.open("w" if attempt == 1 else "a", encoding="utf-8", buffering=1) as log:  # line-buffered: `tail -f` works
        log.write(f"# build {spec.id} attempt {attempt} -> {spec.tag}\n")
        log.write(f"# local wheels: {', '.join(staged.wheels) or 'none'}\n")
        log.write(f"# extra indexes: {redact(' '.join(staged.extra_index_urls)) or 'none'}\n")
        installer = f"uv {native_uv.VERSION} (served)" if served.uv else "pip"
        log.write(f"# installer: {installer}{f' ({served.no_uv})' if served.no_uv else ''}\n")
        error = stream_into(
            run,
            engine,
            # a canonical image fetches nothing: the network off proves it; and it builds without the
            # engine's cache: its build image is removed once normalized, and with it each step image
            # no other image has as a parent, which another build of the run may be using as its cache
            # that moment (seen: the cuda13 members' common steps, "failed to get digest"); its steps
            # are the small ones (useradd, the probe's COPY and chmod)
            BuildRequest(
                staged.path,
                build_tag(spec),
                buildargs,
                labels,
                run.no_cache or bool(spec.canonical),
                "none" if spec.canonical else "host",
                spec.platform,
            ),
            spec.id,
            log,
        )
    if error is None:
        return
    tail = log_path.read_text(encoding="utf-8", errors="replace")
    if is_tls_failure(error + "\n" + tail):
        raise BuildFailed(error, "tls")  # the same certificate fails the same way: diagnosed once, not retried
    if is_network_build_failure(error, tail):
        raise NetworkFlake(error)
    raise BuildFailed(error, "engine" if error.startswith(ENGINE_FAILED) else None)


def stream_into(run: Run, engine: Engine, request: BuildRequest, image: str, log: TextIO) -> str | None:
    """Run the build, writing its output to `log` (redacted) and following its step containers; the error, if any."""
    error = None
    try:
        for event in engine.build(request):
            text = event.text
            if text:
                log.write(redact(text))
                step = _STEP_ID.match(text.rstrip("\n"))
                if step:
                    run.step_containers.pop(image, None)  # the step is done; the engine removed its container
                    run.steps[image] = step.group(1) or step.group(2)
                    if run.owner is not None:
                        run.owner.note_step(run.steps[image])  # this workspace's, should the build stop here
                running = _RUNNING_IN.match(text.rstrip("\n"))
                if running:
                    run.step_containers[image] = running.group(1)
                if run.on_line:
                    run.on_line(image, text)
            if event.error:
                error = redact(event.error.strip())
                log.write(f"ERROR: {error}\n")
            if run.stop.is_set():
                raise BuildFailed("interrupted")
    except BuildFailed:
        raise
    except Exception as exc:  # noqa: BLE001 - the engine or the connection broke mid-build (or an interrupt cut it)
        if run.stop.is_set():
            raise BuildFailed("interrupted") from None
        error = redact(f"{ENGINE_FAILED}: {exc}")
        log.write(f"ERROR: {error}\n")
    return error
