"""Local base images bootstrapped from the Debian mirror (mmdebstrap), for machines that cannot pull
from a registry; reproducible: one recipe and one mirror state give one image ID, on any machine.

A base is identified by its recipe (release, variant, packages, mirror, arch). The recipe's hash is
stored as a label on the image, so a second `ensure_base` with the same recipe is a label lookup,
not a rebuild. The final tag appears only after a complete load (the load goes to a temporary tag
first), and the rootfs scratch directory is removed however the build ends.

Reproducible (issue 41; benchmarks/bench_base.py measures it): mmdebstrap runs with SOURCE_DATE_EPOCH
set to the mirror's own `Date:` (dists/<release>/InRelease), so the epoch names the mirror state, not
the moment, and mmdebstrap leaves out what debootstrap writes the clock into (dpkg and alternatives
logs, ldconfig's aux-cache). The tree is written as a tar sorted by name with mtimes clamped to the
epoch and numeric owners, and loaded with an image config of fixed content (`created` = the epoch,
the labels, PATH, CMD): its image ID is a function of the tree, and the tree of the recipe and the
mirror state. (debootstrap, which made the bases before, gave two different trees from one mirror
state: 4 files by content, 2,005 by mtime.)
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import io
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import filelock

from builder.engine.failures import any_network
from builder.engine.port import Engine, EngineFault
from builder.engine.retry import GaveUp, retry_network
from builder.engine.staging import sha256_of
from builder.lock.children import die_with_parent, left_by_dead_runs, run_mark
from builder.model import jsonfields as jf
from builder.model.plan import PLATFORM_ARCH, Base
from builder.util import fsio
from builder.util.errors import UserError
from builder.util.text import redact

Log = Callable[[str], None]

# os name in matrix.yaml -> the Debian release codename the mirror knows.
RELEASES: dict[str, str] = {
    "debian11": "bullseye",
    "debian12": "bookworm",
    "debian13": "trixie",
}
# What the image template relies on: a venv-capable python3, TLS roots for pip, and useradd for
# the non-root user (`passwd`; minbase has it as a Priority: required package, listed so the
# dependency is explicit rather than an accident of the variant).
PACKAGES: tuple[str, ...] = ("ca-certificates", "passwd", "python3", "python3-venv")
VARIANT = "minbase"
# Bump when the procedure below changes what ends up in the image (cleanup, config changes).
# 2: mmdebstrap with the mirror's date, a canonical tar, a config of fixed content (1: debootstrap, imported).
RECIPE_SCHEMA = 2
TOOL = "mmdebstrap"

HASH_LABEL = "io.builder.recipe-hash"
RECIPE_LABEL = "io.builder.recipe"
BASE_NAME_LABEL = "org.opencontainers.image.base.name"
BOOTSTRAP_LABEL = "io.builder.bootstrap"
MIRROR_DATE_LABEL = "io.builder.mirror-date"  # the mirror's InRelease Date: the SOURCE_DATE_EPOCH of the tree

SCRATCH_DIR = Path(os.environ.get("BUILDER_SCRATCH_DIR", "/var/tmp"))
SCRATCH_PREFIX = "builder-bootstrap-"  # then the run's pid and start time: sweep_scratch tells a dead run's folder
_SCRATCH_NAME = re.compile(rf"{SCRATCH_PREFIX}(\d+)-(\d+)-[a-z0-9_]{{8}}")
DEBOOTSTRAP_ATTEMPTS = 3
DEBOOTSTRAP_WAIT_MIN_S = 2.0
DEBOOTSTRAP_WAIT_MAX_S = 30.0
GROUP_EXIT_S = 5.0  # after the SIGKILL, how long a stopped bootstrap's children may take to be gone
RELEASE_FILE_TIMEOUT_S = 60.0

_DEB_TO_OCI = {"amd64": "amd64", "arm64": "arm64", "ppc64el": "ppc64le", "s390x": "s390x"}
_MACHINE_TO_DEB = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64el", "s390x": "s390x"}
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class BootstrapResult:
    tag: str
    built: bool  # False: an image with the same recipe hash was already there
    seconds: float
    recipe_hash: str


class DebootstrapFailed(Exception):
    """The bootstrap tool exited non-zero, or the mirror's release file could not be read;
    `network` says whether retrying could help."""

    def __init__(self, returncode: int, lines: Sequence[str]) -> None:
        self.returncode = returncode
        self.lines = list(lines)
        # the tool exits 1 for everything; apt's messages tell a flaky network from a bad recipe.
        self.network = any_network(self.lines)
        errors = [ln for ln in self.lines if ln.startswith("E:")] or self.lines[-1:] or ["no output"]
        super().__init__(f"{TOOL} exited {returncode}: {errors[-1].strip()}")


def release_for(base: Base) -> str:
    if base.bootstrap != "debootstrap":
        raise UserError(
            f"base '{base.name}' (line {base.line}): bootstrap '{base.bootstrap}' is not supported; supported: debootstrap",
            line=base.line,
        )
    try:
        return RELEASES[base.os]
    except KeyError:
        supported = ", ".join(f"{os_} ({rel})" for os_, rel in RELEASES.items())
        raise UserError(
            f"base '{base.name}' (line {base.line}): os '{base.os}' cannot be bootstrapped from the Debian mirror; supported: {supported}",
            line=base.line,
        ) from None


def host_arch() -> str:
    machine = platform.machine().lower()
    if machine in _MACHINE_TO_DEB:
        return _MACHINE_TO_DEB[machine]
    return subprocess.run(["dpkg", "--print-architecture"], check=True, capture_output=True, text=True).stdout.strip()


def lock_path(base: Base) -> Path:
    """One lock per base tag: two runs bootstrapping the same OS take turns."""
    return fsio.lock_dir() / f"builder-bootstrap-{_safe(base.local_tag)}.lock"


@dataclass(frozen=True)
class Recipe:
    """What a base is made from: its JSON form (the image's RECIPE_LABEL) is hashed into its name."""

    arch: str  # Debian's architecture name: amd64, arm64
    release: str  # the codename: bookworm
    mirror: str
    include: tuple[str, ...] = tuple(sorted(PACKAGES))
    variant: str = VARIANT
    schema: int = RECIPE_SCHEMA
    tool: str = TOOL

    @classmethod
    def from_label(cls, label: str) -> Recipe:
        """The recipe a base's RECIPE_LABEL holds: `canonical_json` read back, every field checked."""

        def fail(what: str) -> ValueError:
            return ValueError(f"the {RECIPE_LABEL} label is not a bootstrap recipe: {what}")

        try:
            data = jf.obj(json.loads(label), RECIPE_LABEL, fail)
        except json.JSONDecodeError as exc:
            raise fail(f"not JSON ({exc})") from None
        return cls(
            arch=jf.text(data.get("arch"), "arch", fail),
            release=jf.text(data.get("release"), "release", fail),
            mirror=jf.text(data.get("mirror"), "mirror", fail),
            include=jf.texts(data.get("include"), "include", fail),
            variant=jf.text(data.get("variant"), "variant", fail),
            schema=jf.whole(data.get("schema"), "schema", fail),
            tool=jf.text(data.get("tool"), "tool", fail),
        )

    def to_json(self) -> dict[str, str | int | list[str]]:
        return {**asdict(self), "include": list(self.include)}


def recipe_for(base: Base, mirror: str, arch: str | None = None) -> Recipe:
    """The base's platform decides the Debian architecture (amd64, arm64: the same names)."""
    return Recipe(
        arch=arch or PLATFORM_ARCH.get(base.platform) or host_arch(),
        release=release_for(base),
        mirror=mirror,
        include=tuple(sorted({*PACKAGES, *base.packages})),
    )


def canonical_json(recipe: Recipe) -> str:
    return json.dumps(recipe.to_json(), sort_keys=True, separators=(",", ":"))


def recipe_hash(recipe: Recipe) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(recipe).encode()).hexdigest()


def ensure_base(
    engine: Engine,
    base: Base,
    *,
    mirror: str = "http://deb.debian.org/debian",
    force: bool = False,
    log: Log,
) -> BootstrapResult:
    """Make sure `base.local_tag` holds an image built from this recipe; build it if not."""
    start = time.monotonic()
    recipe = recipe_for(base, mirror)
    digest = recipe_hash(recipe)
    tag = base.local_tag

    def current() -> bool:
        info = engine.inspect_image(tag)
        arch_ok = info is not None and info.architecture in ("", recipe.arch)  # "": an engine that does not say
        return not force and info is not None and info.labels.get(HASH_LABEL) == digest and arch_ok

    if current():
        return BootstrapResult(tag, built=False, seconds=time.monotonic() - start, recipe_hash=digest)

    fsio.lock_dir().mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(lock_path(base)))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        log(f"waiting for another process that is bootstrapping {tag}")
        lock.acquire()
    try:
        if current():  # the other process built the same recipe while we waited
            return BootstrapResult(tag, built=False, seconds=time.monotonic() - start, recipe_hash=digest)
        _check_tools()
        log(f"bootstrapping {tag}: debian {recipe.release} ({recipe.variant}) from {mirror}")
        _build(engine, tag, recipe, digest, log)
    finally:
        lock.release()
    seconds = time.monotonic() - start
    log(f"built {tag} in {seconds:.0f}s")
    return BootstrapResult(tag, built=True, seconds=seconds, recipe_hash=digest)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _tool_binary() -> str | None:
    return shutil.which(TOOL) or next((p for p in (f"/usr/bin/{TOOL}", f"/usr/sbin/{TOOL}") if os.access(p, os.X_OK)), None)


def _check_tools() -> None:
    if _tool_binary() is None:
        raise UserError(f"{TOOL} is not installed: apt-get install {TOOL} (bash .ci/docker-up.sh does)")
    if os.geteuid() != 0:
        raise UserError(f"bootstrapping a base needs root ({TOOL} creates device nodes): run as root, or pull a prebuilt base instead")


def _image_id(engine: Engine, ref: str) -> str | None:
    info = engine.inspect_image(ref)
    return None if info is None else info.id


def _build(engine: Engine, tag: str, recipe: Recipe, digest: str, log: Log) -> None:
    SCRATCH_DIR.mkdir(parents=True, exist_ok=True)
    for left in sweep_scratch(SCRATCH_DIR):
        log(f"removed {left}: the scratch folder of a bootstrap whose run was killed")
    scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX + run_mark(), dir=SCRATCH_DIR))
    repository = tag.rsplit(":", 1)[0]
    temp_ref = f"{repository}:tmp-{uuid.uuid4().hex[:12]}"
    try:
        rootfs = scratch / "rootfs"
        epoch = _bootstrap_with_retries(recipe, rootfs, log)
        _tidy_rootfs(rootfs)
        tarball = scratch / "rootfs.tar"
        canonical_tar(rootfs, tarball, epoch)
        _remove_tree(rootfs)  # free the disk before the engine copies the tarball
        archive = scratch / "image.tar"
        expected = image_archive(tarball, archive, temp_ref, base_config(recipe, digest, epoch, f"sha256:{sha256_of(tarball)}"))
        tarball.unlink()
        log(f"loading {archive.stat().st_size / 1e6:.0f} MB into the engine as {temp_ref} (image {expected[:19]})")
        old = _image_id(engine, tag)
        _load(engine, archive, temp_ref, digest, expected)
        engine.tag(temp_ref, repository, tag.rsplit(":", 1)[1])
        if old and old != _image_id(engine, tag):
            engine.remove_image(old)
    finally:
        engine.remove_image(temp_ref)
        _remove_tree(scratch)


def _bootstrap_with_retries(recipe: Recipe, rootfs: Path, log: Log) -> int:
    """The tree of `recipe` in `rootfs`; returns its SOURCE_DATE_EPOCH (the mirror's date)."""
    epochs: list[int] = []

    def one_try(attempt: int) -> None:
        if rootfs.exists():  # a half-made tree from the failed attempt
            _remove_tree(rootfs)
        rootfs.mkdir()
        epochs.append(mirror_epoch(recipe))
        run_bootstrap(recipe, rootfs, epochs[-1], log)

    def fail(what: str, reason: str) -> UserError:
        return UserError(
            f"bootstrapping debian {recipe.release} from {recipe.mirror} failed ({what}): "
            f"{reason}; check the mirror (and HTTP proxy settings), the output above has details"
        )

    try:
        retry_network(
            one_try,
            flake=lambda exc: isinstance(exc, DebootstrapFailed) and exc.network,
            attempts=DEBOOTSTRAP_ATTEMPTS,
            wait_s=DEBOOTSTRAP_WAIT_MIN_S,
            min_wait_s=DEBOOTSTRAP_WAIT_MIN_S,
            max_wait_s=DEBOOTSTRAP_WAIT_MAX_S,
            on_retry=lambda attempt, reason: log(
                f"{TOOL} failed on the network ({reason}); retrying (attempt {attempt} of {DEBOOTSTRAP_ATTEMPTS})"
            ),
        )
    except GaveUp as exc:
        raise fail("the mirror could not be reached", exc.reason) from None
    except DebootstrapFailed as exc:
        raise fail("the recipe failed", redact(str(exc))) from None
    return epochs[-1]


def mirror_epoch(recipe: Recipe) -> int:
    """The `Date:` of the mirror's dists/<release>/InRelease, as seconds: the mirror state the tree
    comes from (a read that fails is a network DebootstrapFailed: retried)."""
    url = f"{recipe.mirror.rstrip('/')}/dists/{recipe.release}/InRelease"
    try:
        with urllib.request.urlopen(url, timeout=RELEASE_FILE_TIMEOUT_S) as response:  # noqa: S310 - the recipe's mirror
            for raw in response:
                line = raw.decode("utf-8", "replace")
                if line.startswith("Date:"):
                    return int(email.utils.parsedate_to_datetime(line[5:].strip()).timestamp())
                if line.startswith(("MD5Sum:", "SHA256:", "-----BEGIN PGP SIGNATURE")):  # past the release fields
                    break
    except (OSError, ValueError) as exc:
        raise DebootstrapFailed(1, [f"E: Failed getting release file {url}: {exc}"]) from None
    raise DebootstrapFailed(1, [f"E: {url} has no Date: field"])


def run_bootstrap(recipe: Recipe, rootfs: Path, epoch: int, log: Log) -> None:
    """One mmdebstrap run into `rootfs`, output streamed to `log`; raises DebootstrapFailed on a
    non-zero exit."""
    argv = [
        _tool_binary() or TOOL,
        f"--variant={recipe.variant}",
        f"--architectures={recipe.arch}",
        f"--include={','.join(recipe.include)}",
        recipe.release,
        str(rootfs),
        recipe.mirror,
    ]
    env = {
        **os.environ,
        "DEBIAN_FRONTEND": "noninteractive",
        "LC_ALL": "C",
        "SOURCE_DATE_EPOCH": str(epoch),
        "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin",
    }
    lines: list[str] = []
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        env=env,
        start_new_session=True,  # its own process group: _stop ends the tool's children (apt, dpkg) too
        # a SIGKILLed run cannot _stop it: the kernel sends it SIGTERM, on which mmdebstrap cleans up
        # (unmounts, ends its children) and exits; sweep_scratch then removes the folder
        preexec_fn=die_with_parent(signal.SIGTERM),
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            log(lines[-1])
        returncode = proc.wait()
    except BaseException:
        # Ctrl-C reaches the tool too; give it time to unmount /proc and /sys in the target.
        _stop(proc)
        raise
    if returncode != 0:
        raise DebootstrapFailed(returncode, lines)


def _stop(proc: subprocess.Popen[str]) -> None:
    """End the tool and everything it started (a SIGTERM to this process alone reaches none of
    them): a child still writing into the target would race the scratch dir's removal."""
    _signal_group(proc, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    _signal_group(proc, signal.SIGKILL)  # what ignored the SIGTERM, the tool itself included
    proc.wait()
    deadline = time.monotonic() + GROUP_EXIT_S
    while _signal_group(proc, 0) and time.monotonic() < deadline:  # a killed child may still be closing a file in the target
        time.sleep(0.05)


def _signal_group(proc: subprocess.Popen[str], sig: int) -> bool:
    """Send `sig` to the tool's process group (0: only ask); False when nothing of it is left."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _tidy_rootfs(rootfs: Path) -> None:
    """Drop what makes the image bigger without making it more useful, and host leftovers."""
    for pattern in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*"):
        for path in rootfs.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    # the tool copies the host's resolver config and name in; the engine supplies its own.
    for name, content in (("etc/resolv.conf", ""), ("etc/hostname", "localhost\n")):
        target = rootfs / name
        if target.is_file() and not target.is_symlink():
            target.write_text(content)


def canonical_tar(rootfs: Path, out: Path, epoch: int) -> None:
    """The tree as a tar of fixed bytes: entries sorted by name, mtimes clamped to `epoch`, numeric
    owners (GNU tar's own options, as the Reproducible Builds project writes them)."""
    subprocess.run(
        [
            "tar",
            "--sort=name",
            f"--mtime=@{epoch}",
            "--clamp-mtime",
            "--numeric-owner",
            "--format=gnu",
            "-C",
            str(rootfs),
            "-cf",
            str(out),
            ".",
        ],
        check=True,
    )


def base_config(recipe: Recipe, digest: str, epoch: int, diff_id: str) -> dict[str, object]:
    """The base image's config: nothing in it but the recipe, the mirror's date and the layer."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    labels = {
        HASH_LABEL: digest,
        RECIPE_LABEL: canonical_json(recipe),
        BASE_NAME_LABEL: f"debian:{recipe.release}",
        BOOTSTRAP_LABEL: f"{TOOL} {recipe.variant} from {recipe.mirror}",
        MIRROR_DATE_LABEL: stamp,
    }
    return {
        "architecture": _DEB_TO_OCI.get(recipe.arch, recipe.arch),
        "os": "linux",
        "created": stamp,
        "config": {"Env": [f"PATH={_PATH}"], "Cmd": ["/bin/bash"], "Labels": labels},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": stamp, "created_by": f"{TOOL} --variant={recipe.variant} {recipe.release} (builder)"}],
    }


def image_archive(layer: Path, out: Path, ref: str, config: dict[str, object]) -> str:
    """A `docker load` archive of one layer and `config` (sorted, compact JSON), tagged `ref`; returns
    the image ID it loads as: the sha256 of those config bytes."""
    body = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    image_id = hashlib.sha256(body).hexdigest()
    manifest = json.dumps([{"Config": f"{image_id}.json", "RepoTags": [ref], "Layers": ["layer.tar"]}]).encode()
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as archive:
        for name, data in ((f"{image_id}.json", body), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        archive.add(layer, arcname="layer.tar")
    return f"sha256:{image_id}"


def _load(engine: Engine, archive: Path, ref: str, digest: str, expected: str) -> None:
    try:
        engine.load_image(archive)  # the config names the architecture: an arm64 tree is an arm64 image
    except EngineFault as exc:
        raise UserError(f"loading the base into the engine failed: {exc.message}") from None
    info = engine.inspect_image(ref)
    if info is None or info.labels.get(HASH_LABEL) != digest:
        raise UserError(f"loading the base into the engine produced no image {ref} with its labels")
    if info.id != expected:
        raise UserError(f"the engine loaded the base as {info.id}, not the {expected} its config names: the engine rewrote it")


def sweep_scratch(root: Path) -> list[Path]:
    """Remove the scratch folders under `root` of bootstraps whose run is gone (a SIGKILL leaves the
    rootfs, GBs for a ROCm base; children.left_by_dead_runs) and that no process still works in: a
    folder that a process names on its command line (a killed run's mmdebstrap on its way out), or
    has as its root (dpkg chrooted into it) or working folder, is left for a later run. Mounts under
    it are unmounted first (_remove_tree). Returns what was removed."""
    removed: list[Path] = []
    if not os.path.isdir("/proc/self"):
        return removed  # no telling a dead run from a live one: nothing is removed
    for path in left_by_dead_runs(root, _SCRATCH_NAME):
        if _in_use(path):
            continue
        try:
            _remove_tree(path)
        except (OSError, RuntimeError):
            continue  # a mount that would not go: left as it is, named again by the next run
        removed.append(path)
    return removed


def _in_use(path: Path) -> bool:
    """Whether a process names `path` on its command line, or has its root or working folder in it."""
    inside = str(path.resolve())
    marks = (inside.encode() + b"\0", inside.encode() + b"/")
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read() + b"\0"
            if any(mark in argv for mark in marks):
                return True
            for link in ("root", "cwd"):
                target = os.readlink(f"/proc/{pid}/{link}")
                if target == inside or target.startswith(inside + "/"):
                    return True
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return False


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve())
    found = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            point = line.split()[4].encode().decode("unicode_escape")
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return sorted(found, key=len, reverse=True)


def _remove_tree(path: Path) -> None:
    """rmtree that never descends into a mount (an interrupted bootstrap can leave /proc or a
    bind-mounted /dev inside the target): unmount first, and leave the tree if that fails."""
    if not path.exists():
        return
    for point in _mounts_under(path):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
    if _mounts_under(path):
        raise RuntimeError(f"not removing {path}: something is still mounted under it")
    shutil.rmtree(path)
