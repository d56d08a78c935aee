"""An in-memory engine and registry implementing the engine port (builder/engine/port.py), so every
use-case runs offline: images by id, names that point at ids, a registry of tag -> digest,
containers whose run prints scripted output, scripted builds, and hooks to plant what a hostile
user, a broken registry or a flaky network does mid-run:

- `before_push(name)`: runs when the engine starts reading a push (a concurrent `docker tag` goes here);
- `fail_push(name)`: an error line for the push's stream (a registry 500), or None;
- `flaky_pushes` / `flaky_pulls`: that many next pushes/pulls break with a connection reset first;
- `stall`: a push that goes silent until it is cancelled;
- `retrying_pushes`: that many next pushes report the engine's own retry of a failed layer upload
  ("Retrying in 5 seconds"), then go on waiting until they are cancelled;
- `pull_fault`, `registry_fault`: an exception every pull / digest query raises;
- `fail_pull(reference)`: an error line for the pull's stream, or None;
- `run_output(spec)`: a container's (exit code, stdout); `build_output(request)`: a build's lines,
  an error line makes it fail.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO

from builder.engine import session
from builder.engine.port import (
    BuildRequest,
    Connect,
    ContainerEntry,
    ContainerSpec,
    Engine,
    EngineFault,
    ExecResult,
    ImageInfo,
    Layer,
    NotFound,
    Progress,
)
from builder.lock import files as lockfiles
from builder.model.plan import Lock
from builder.publish.inventory import INVENTORY_SCRIPT

IMAGES = Path(__file__).resolve().parents[1] / "images"


def layer_tar(files: dict[str, bytes], mtime: int) -> bytes:
    """A layer's tar: these files, each with this mtime, owned by root with names (as an engine writes them)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.uname, info.gname = len(data), mtime, "root", "root"
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@dataclass
class BytesLayer:
    """A layer tar in memory as the engine's LayerSource (what the layer maker hands a build); `reads`
    counts the copies made of its bytes."""

    data: bytes
    reads: int = 0

    @property
    def size(self) -> int:
        return len(self.data)

    def members(self) -> list[tarfile.TarInfo]:
        with tarfile.open(fileobj=io.BytesIO(self.data), mode="r:") as tar:
            return tar.getmembers()

    def reader(self) -> BinaryIO:
        self.reads += 1
        return io.BytesIO(self.data)

    def write(self, out: Path) -> None:
        out.write_bytes(self.data)


BASE_LAYER = layer_tar({"usr/bin/python3": b"base"}, 1_600_000_000)


def write_archive(
    out: Path, image: str, tags: list[str], labels: dict[str, str], layers: list[bytes], now: int, body: bytes | None = None
) -> None:
    """`docker save`'s docker-archive of a fake image: its config `body` (a loaded image's, as loaded), else one that
    carries the save's clock and a container ID, as a build's does."""
    stamp = f"2023-11-{now % 28 + 1:02d}T00:00:00.{now}Z"
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Labels": labels, "Image": hashlib.sha256(str(now + 1).encode()).hexdigest()},
        "container": hashlib.sha256(str(now).encode()).hexdigest(),
        "container_config": {"Hostname": str(now)},
        "created": stamp,
        "docker_version": "20.10.24",
        "history": [{"created": stamp, "created_by": f"step {i}"} for i in range(len(layers))],
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest() for layer in layers]},
    }
    body = json.dumps(config).encode() if body is None else body
    names = [f"{hashlib.sha256(layer).hexdigest()}/layer.tar" for layer in layers]
    manifest = json.dumps([{"Config": image.removeprefix("sha256:") + ".json", "RepoTags": tags, "Layers": names}]).encode()
    with tarfile.open(out, "w") as tar:
        for name, data in [*zip(names, layers, strict=True), (image.removeprefix("sha256:") + ".json", body), ("manifest.json", manifest)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _read(tar: tarfile.TarFile, name: str) -> bytes:
    handle = tar.extractfile(name)
    assert handle is not None, name
    return handle.read()


def digest_of(image: str) -> str:
    return "sha256:" + hashlib.sha256(image.encode()).hexdigest()


def image_id_of(tag: str, labels: dict[str, str]) -> str:
    """The id a fake build gives: a function of what was built, like the engine's content address."""
    return digest_of(tag + repr(sorted(labels.items())))


class FakeStream:
    """A stream of progress events that can be cancelled from any thread, like the adapter's."""

    def __init__(self, events: Callable[[FakeStream], Iterator[Progress]]) -> None:
        self.closed = threading.Event()
        self._events = events

    def __iter__(self) -> Iterator[Progress]:
        for event in self._events(self):
            if self.closed.is_set():
                raise EngineFault("Connection aborted: the stream was cut")
            yield event

    def cancel(self) -> None:
        self.closed.set()


@dataclass
class FakeContainer:
    engine: FakeEngine
    spec: ContainerSpec
    labels: dict[str, str]
    id: str = ""
    started: bool = False
    execs: list[tuple[str, ...]] = field(default_factory=list)

    def start(self) -> None:
        self.started = True

    def wait(self, timeout: float) -> int:
        return self.engine.run_output(self)[0]

    def logs(self) -> bytes:
        return self.engine.run_output(self)[1]

    def exec(self, command: Sequence[str]) -> ExecResult:
        self.execs.append(tuple(command))
        return self.engine.exec_result(self, tuple(command))


def manifest_output(container: FakeContainer) -> tuple[int, bytes]:
    """What a manifest container prints: the package lists of the image it runs (the SBOM's
    inventory container: the lock's pins of `engine.lock_for(image id)`, pip, and two dpkg packages)."""
    image = container.engine.resolve(container.spec.image)
    if container.spec.command[-1] == INVENTORY_SCRIPT:
        return container.engine.manifest_status, container.engine.inventory(container).encode()
    text = f"## pip freeze\nbuilt-from=={image}\n## dpkg\npython3.11 3.11.2\n## environment\nPATH=/opt/venv/bin\nSECRET=x\n"
    return container.engine.manifest_status, text.encode()


def lock_inventory(container: FakeContainer) -> str:
    lock = container.engine.lock_for(container.spec.labels.get("io.builder.image-id", ""))
    pins = "".join(f"{name}\t{version}\n" for name, version in (lock.pins if lock else ()))
    return f"## python\npip\t24.0\n{pins}## dpkg\nlibc6\t2.36-9\tamd64\npython3.11\t3.11.2-6\tamd64\n"


def built(request: BuildRequest) -> list[Progress]:
    """A build that works: a step and the engine's closing line."""
    return [
        Progress(text="Step 1/1 : FROM base\n"),
        Progress(text=" ---> 0123456789ab\n"),
        Progress(text="Successfully built 0123456789ab\n"),
    ]


class FakeEngine:
    """The fake engine; its public attributes are the state tests arrange and assert."""

    def __init__(self) -> None:
        self.image_ids: set[str] = set()
        self.labels: dict[str, dict[str, str]] = {}  # image id -> its labels (none when absent)
        self.sizes: dict[str, int] = {}
        self.names: dict[str, str] = {}
        self.repo_digests: dict[str, list[str]] = {}
        self.registry: dict[str, str] = {}
        self.by_digest: dict[str, str] = {}
        self.pushes: list[str] = []
        self.pulls: list[str] = []
        self.builds: list[BuildRequest] = []
        self.responses: list[FakeStream] = []  # every stream the engine opened, in order
        self.created: list[FakeContainer] = []
        self.live: dict[str, FakeContainer] = {}
        self.leftovers: list[ContainerEntry] = []
        self.removed: list[str] = []
        self.tags: list[tuple[str, str]] = []  # (image, name) of every tag call
        self.removed_images: list[str] = []  # every ref remove_image removed
        self.listings: list[tuple[str, bool, bool]] = []  # (label, dangling, intermediate) of every images() call
        self.histories: dict[str, list[Layer]] = {}  # image id -> its history, when a test scripts one
        self.architectures: dict[str, str] = {}  # image id -> its config's architecture (a build's or an import's platform)
        # image id -> its layers' tar bytes, base first: every image is on BASE_LAYER, a build adds one
        # layer whose file mtime is the engine's clock at build time (as a real build's is)
        self.layers: dict[str, list[bytes]] = {}
        self.clock = 1_700_000_000
        self.saves: list[str] = []  # every ref save_image saved
        self.loads: list[str] = []  # the image id of every load
        self.configs: dict[str, bytes] = {}  # image id -> the config bytes it was loaded with (a save gives them back)
        self.before_push: Callable[[str], None] = lambda name: None
        self.fail_push: Callable[[str], str | None] = lambda name: None
        self.fail_pull: Callable[[str], str | None] = lambda reference: None
        self.flaky_pushes = 0
        self.flaky_pulls = 0
        self.stall = False
        self.retrying_pushes = 0
        self.manifest_status = 0  # the exit code of a manifest container
        self.pull_fault: Exception | None = None
        self.registry_fault: BaseException | None = None  # also an interrupt, landing while the registry is read
        self.run_output: Callable[[FakeContainer], tuple[int, bytes]] = manifest_output
        self.lock_dirs: list[Path] = [IMAGES]  # where lock_for finds <id>/requirements.lock (a test's workspace adds its images/)
        self.lock_for: Callable[[str], Lock | None] = self._lock_in_dirs  # what an image's venv holds (the SBOM's inventory)
        self.inventory: Callable[[FakeContainer], str] = lock_inventory
        self.exec_result: Callable[[FakeContainer, tuple[str, ...]], ExecResult] = lambda c, cmd: ExecResult(0, b"", b"")
        self.build_output: Callable[[BuildRequest], list[Progress]] = built
        self.runtimes: tuple[str, ...] = ()
        self.blocked_checks: str | None = None  # why the smoke checks could not reach a container (no docker CLI)
        self.cut = 0
        self.closed = False

    def _lock_in_dirs(self, image_id: str) -> Lock | None:
        for folder in reversed(self.lock_dirs):
            path = folder / image_id / "requirements.lock"
            if image_id and path.is_file():
                return lockfiles.parse(path.read_text(encoding="utf-8"))
        return None

    # -- arranging
    def add_image(self, image: str, *names: str, labels: dict[str, str] | None = None, size: int = 5_000_000) -> str:
        self.image_ids.add(image)
        self.labels[image] = dict(labels or {})
        self.sizes[image] = size
        for name in names:
            self.names[name] = image
        return image

    def resolve(self, ref: str) -> str:
        if ref in self.image_ids:
            return ref
        if ref in self.names:
            return self.names[ref]
        if ref in self.by_digest:
            return self.by_digest[ref]
        raise NotFound(f"No such image: {ref}")

    def _info(self, image: str) -> ImageInfo:
        return ImageInfo(
            id=image,
            labels=dict(self.labels.get(image, {})),
            repo_tags=tuple(n for n, i in self.names.items() if i == image),
            repo_digests=tuple(self.repo_digests.get(image, [])),
            size=self.sizes.get(image, 5_000_000),
            architecture=self.architectures.get(image, ""),
            diff_ids=tuple("sha256:" + hashlib.sha256(layer).hexdigest() for layer in self._layers(image)),
        )

    # -- the port
    def version(self) -> str:
        return "20.10.24"

    def gpu_runtimes(self) -> tuple[str, ...]:
        return self.runtimes

    def checks_blocked(self) -> str | None:
        return self.blocked_checks

    def inspect_image(self, ref: str) -> ImageInfo | None:
        try:
            return self._info(self.resolve(ref))
        except NotFound:
            return None

    def images(self, label: str, *, dangling: bool = False, intermediate: bool = False) -> list[ImageInfo]:
        self.listings.append((label, dangling, intermediate))
        key, _, value = label.partition("=")
        found = [
            self._info(i) for i in sorted(self.image_ids) if key in self.labels.get(i, {}) and (not value or self.labels[i][key] == value)
        ]
        return [i for i in found if not i.repo_tags] if dangling else found

    def history(self, ref: str) -> list[Layer]:
        image = self.resolve(ref)
        if image in self.histories:
            return list(self.histories[image])
        config = json.loads(self.configs[image]) if image in self.configs else {}
        if config.get("history"):  # newest first, as the engine lists them
            return [Layer(str(h.get("created_by") or ""), 0 if h.get("empty_layer") else 1) for h in reversed(config["history"])]
        labels = " ".join(f"{k}={v}" for k, v in sorted(self.labels.get(image, {}).items()))
        return [
            Layer(f"LABEL {labels}", 0),
            Layer("RUN /bin/sh -c set -eu; python3 -m venv /opt/venv; pip install -r /tmp/builder/requirements.lock # buildkit", 1_000_000),
        ]

    def tag(self, image: str, repository: str, tag: str) -> None:
        self.names[f"{repository}:{tag}"] = self.resolve(image)
        self.tags.append((image, f"{repository}:{tag}"))

    def remove_image(self, ref: str) -> bool:
        short = [
            i for i in self.image_ids if len(ref) == 12 and i.startswith(f"sha256:{ref}")
        ]  # an ID's first 12 hex, as the engine takes it
        ref = short[0] if len(short) == 1 else ref
        if ref in self.names:
            image = self.names.pop(ref)
        elif ref in self.image_ids and ref not in self.names.values():
            image = ref
        else:
            return False
        if image not in self.names.values():
            self.image_ids.discard(image)  # like the engine: its last name gone, an unused image goes too
        self.removed_images.append(ref)
        return True

    def build(self, request: BuildRequest) -> FakeStream:
        self.builds.append(request)

        def events(stream: FakeStream) -> Iterator[Progress]:
            failed = False
            for event in self.build_output(request):
                failed |= bool(event.error)
                yield event
            if not failed:
                made = self.add_image(image_id_of(request.tag, dict(request.labels)), request.tag, labels=dict(request.labels))
                self.architectures[made] = architecture_of(request.platform)
                self.clock += 1
                self.layers[made] = [BASE_LAYER, layer_tar({"etc/passwd": request.tag.encode()}, self.clock)]
                dockerfile = request.path / "Dockerfile"
                if dockerfile.is_file() and "LABEL io.builder.layer=" in dockerfile.read_text(encoding="utf-8"):
                    self._stepwise(made, dockerfile.read_text(encoding="utf-8"), dict(request.labels))

        return self._opened(FakeStream(events))

    def _stepwise(self, image: str, dockerfile: str, labels: dict[str, str]) -> None:
        """A build of a Dockerfile whose layer tars are marked (engine/reproducible.py `marked`), as the
        classic builder commits it: the FROM image's layers, a layer per RUN or COPY step (each with the
        build's clock), an empty history entry per other step, the marker LABELs among them."""
        layers: list[bytes] = []
        history: list[dict[str, Any]] = []
        inherited = 0  # the FROM image's history entries
        stamp = f"2023-11-{self.clock % 28 + 1:02d}T00:00:00.{self.clock}Z"
        for line in (line.strip() for line in dockerfile.splitlines()):
            word = line.split(" ", 1)[0].upper()
            if word == "FROM":
                below = line.split()[-1]
                layers = list(self._layers(self.names[below])) if below in self.names else [BASE_LAYER]
                history = [{"created": stamp, "created_by": f"base layer {i}"} for i in range(len(layers))]
                config: dict[str, Any] = json.loads(self.configs.get(self.names.get(below, ""), b"{}"))
                if config.get("history"):  # the FROM image's own history and labels, as the engine inherits them
                    history, inherited = list(config["history"]), len(config["history"])
                    labels = {**(config.get("config", {}).get("Labels") or {}), **labels}
            elif word in ("RUN", "COPY", "ADD"):
                steps = sum(1 for h in history[inherited:] if not h.get("empty_layer"))
                layers.append(layer_tar({f"step/{steps}": line.encode()}, self.clock))  # what a step writes, not where it lands
                history.append({"created": stamp, "created_by": f"/bin/sh -c {line}"})
            elif word and not line.startswith("#"):
                history.append({"created": stamp, "created_by": f"/bin/sh -c #(nop)  {line}", "empty_layer": True})
        self.layers[image] = layers
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Labels": {**labels, "io.builder.layer": "venv.tar"}, "Image": "sha256:" + "9" * 64},
            "container": hashlib.sha256(stamp.encode()).hexdigest(),
            "created": stamp,
            "history": history,
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest() for layer in layers]},
        }
        self.configs[image] = json.dumps(config).encode()

    def save_image(self, ref: str, out: Path) -> None:
        image = self.resolve(ref)
        self.saves.append(ref)
        self.clock += 1
        tags = [n for n, i in self.names.items() if i == image]
        write_archive(out, image, tags, self.labels.get(image, {}), self._layers(image), self.clock, self.configs.get(image))

    def load_image(self, archive: Path) -> None:
        with tarfile.open(archive) as tar:
            entry = json.loads(_read(tar, "manifest.json"))[0]
            body = _read(tar, entry["Config"])
            config = json.loads(body)
            names = set(tar.getnames())
            diff_ids = list(config["rootfs"]["diff_ids"])
            # as Docker's load does: a layer's file is read only when no image has that chain of layers
            layers = [
                _read(tar, name) if name in names else self._chain(diff_ids[: index + 1], name)
                for index, name in enumerate(entry["Layers"])
            ]
        if ["sha256:" + hashlib.sha256(layer).hexdigest() for layer in layers] != diff_ids:
            raise EngineFault("the layers' diff IDs are not the config's")
        image = "sha256:" + hashlib.sha256(body).hexdigest()
        for name in entry.get("RepoTags") or ():
            self.names.pop(name, None)
        self.add_image(image, *(entry.get("RepoTags") or ()), labels=dict(config["config"].get("Labels") or {}))
        if config.get("architecture"):
            self.architectures[image] = config["architecture"]
        self.layers[image] = layers
        self.configs[image] = body
        self.loads.append(image)

    def load_stream(self, write: Callable[[IO[bytes]], None]) -> None:
        with tempfile.TemporaryDirectory(prefix="fake-load-") as tmp:
            archive = Path(tmp) / "archive.tar"
            with archive.open("wb") as out, io.BufferedWriter(_Unseekable(out)) as stream:
                write(stream)
            self.load_image(archive)

    def _chain(self, diff_ids: list[str], name: str) -> bytes:
        """The last layer of an image whose layers start with `diff_ids`; a load's missing file else."""
        for layers in [*self.layers.values(), [BASE_LAYER]]:
            ids = ["sha256:" + hashlib.sha256(layer).hexdigest() for layer in layers[: len(diff_ids)]]
            if ids == diff_ids:
                return layers[len(diff_ids) - 1]
        raise EngineFault(f"open {name}: no such file or directory")

    def _layers(self, image: str) -> list[bytes]:
        return self.layers.get(image, [BASE_LAYER])

    def push(self, repository: str, tag: str) -> FakeStream:
        name = f"{repository}:{tag}"
        self.pushes.append(name)
        return self._opened(FakeStream(lambda stream: self._push_events(name, repository, tag, stream)))

    def _push_events(self, name: str, repository: str, tag: str, stream: FakeStream) -> Iterator[Progress]:
        yield Progress(text=f"The push refers to repository [{repository}]")
        self.before_push(name)
        if self.flaky_pushes:
            self.flaky_pushes -= 1
            raise EngineFault("('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))")
        if self.stall:
            stream.closed.wait(30)  # a registry that stops reading: silence until the client goes
            raise EngineFault("Connection aborted.")
        if self.retrying_pushes:
            self.retrying_pushes -= 1
            yield Progress(text="Preparing", layer="8c9e3cdef517")
            yield Progress(text="Retrying in 5 seconds", layer="8c9e3cdef517")
            stream.closed.wait(30)  # the engine's backoff, until the client goes
            raise EngineFault("Connection aborted.")
        message = self.fail_push(name)
        if message:
            yield Progress(error=message)
            return
        image = self.resolve(name)  # what the name points at when the engine reads it
        digest = digest_of(image)
        self.registry[name] = digest
        entry = f"{repository}@{digest}"
        if entry not in self.repo_digests.setdefault(image, []):
            self.repo_digests[image].append(entry)
        yield Progress(text=f"{tag}: digest: {digest} size: 1234")
        yield Progress(digest=digest)

    def pull(self, reference: str) -> FakeStream:
        self.pulls.append(reference)
        if self.pull_fault is not None:
            raise self.pull_fault
        return self._opened(FakeStream(lambda stream: self._pull_events(reference)))

    def _pull_events(self, reference: str) -> Iterator[Progress]:
        if self.flaky_pulls:
            self.flaky_pulls -= 1
            raise EngineFault("('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))")
        message = self.fail_pull(reference)
        if message:
            yield Progress(error=message)
            return
        _, _, digest = reference.partition("@")
        image = f"sha256:pulled-{digest[-8:]}"
        self.add_image(image)
        self.repo_digests.setdefault(image, []).append(reference)
        self.by_digest[reference] = image
        yield Progress(text=f"Digest: {digest}")

    def registry_digest(self, reference: str) -> str:
        if self.registry_fault is not None:
            raise self.registry_fault
        if reference in self.registry:
            return self.registry[reference]
        repository, at, digest = reference.partition("@")
        if at and f"{repository}@{digest}" in {f"{n.rpartition(':')[0]}@{d}" for n, d in self.registry.items()}:
            return digest
        raise NotFound(f"manifest unknown: {reference}")

    @contextlib.contextmanager
    def container(self, spec: ContainerSpec) -> Iterator[FakeContainer]:
        made = FakeContainer(self, spec, session.owner_labels(spec.labels), id=f"c{len(self.created)}")
        image = self.resolve(spec.image)  # the engine refuses a container of an image it does not have
        have = self.architectures.get(image)
        if spec.platform is not None and have and have != architecture_of(spec.platform):  # and one of another platform (API 1.41)
            raise EngineFault(
                f"image with reference {spec.image} was found but does not match the specified platform: wanted {spec.platform}"
            )
        self.created.append(made)
        self.live[made.id] = made
        try:
            yield made
        finally:
            del self.live[made.id]
            self.removed.append(made.id)

    def owned_containers(self) -> list[ContainerEntry]:
        return [*self.leftovers, *(ContainerEntry(c.id, c.labels) for c in self.live.values())]

    def remove_container(self, container_id: str) -> bool:
        self.removed.append(container_id)
        before = len(self.leftovers)
        self.leftovers = [c for c in self.leftovers if c.id != container_id]
        return len(self.leftovers) < before

    def cut_streams(self) -> int:
        open_streams = [s for s in self.responses if not s.closed.is_set()]
        for stream in open_streams:
            stream.cancel()
        self.cut += 1
        return len(open_streams)

    def close(self) -> None:
        self.closed = True

    def _opened(self, stream: FakeStream) -> FakeStream:
        self.responses.append(stream)
        return stream


def architecture_of(platform: str | None) -> str:
    """The architecture an engine on an amd64 host stamps on what it builds or imports for `platform`."""
    return (platform or "linux/amd64").split("/")[1]


def connect_to(engine: FakeEngine) -> Connect:
    """A use-case's `connect` that hands out this fake (mypy checks here that the fake is an Engine)."""

    def connect(timeout: int = 600) -> Engine:
        return engine

    return connect


class _Unseekable(io.RawIOBase):
    """A file written in order only, as a pipe is: a writer that seeks or asks where it is fails."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return self._out.write(bytes(data))
