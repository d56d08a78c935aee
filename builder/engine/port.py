"""The engine port: what the tool needs from a container engine, as a Protocol over small frozen records.

The use-cases, the publisher and the smoke runner depend on this, never on the docker SDK: the
docker adapter (engine/client.py, `DockerEngine`) is the only implementation that talks to an engine,
and tests/fake_engine.py is an in-memory one, so every use-case runs offline against it (the
pattern of cog's docker `Command` interface and its test double). Nothing here imports docker.

Errors cross the port as two types: `NotFound` (no such image, container or manifest) and
`EngineFault` (the engine or the registry behind it failed: unreachable, timed out, a broken
stream, an API error), each with a one-line message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol


class EngineFault(Exception):
    """The engine (or the registry it talks to) failed; `status` is the HTTP status when it answered one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class NotFound(EngineFault):
    """No such image, container or registry manifest (the engine's 404)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, 404)


@dataclass(frozen=True)
class ImageInfo:
    """A local image as the engine describes it (inspect, or one entry of a listing)."""

    id: str
    labels: Mapping[str, str] = field(default_factory=dict)
    repo_tags: tuple[str, ...] = ()
    repo_digests: tuple[str, ...] = ()  # repository@sha256:... of each registry the image was pushed to or pulled from
    size: int = 0  # bytes
    architecture: str = ""  # the image config's (amd64, arm64); "" when the engine did not say (a listing)
    diff_ids: tuple[str, ...] = ()  # its layers' diff IDs, base first (inspect only; a listing says none)


@dataclass(frozen=True)
class Layer:
    """One entry of an image's history, newest first."""

    created_by: str
    size: int


@dataclass(frozen=True)
class Progress:
    """One event of a build, push or pull stream: a line of text, an error, or the pushed digest."""

    text: str = ""  # a build's output line, or a push/pull status
    layer: str | None = None  # the layer a status is about; None for a line about the whole operation
    error: str = ""
    digest: str = ""  # a push's final digest (sha256:...)


@dataclass(frozen=True)
class BuildRequest:
    """A classic-builder build of a staged context: intermediate containers always removed, the
    FROM image never pulled (bases are local or bootstrapped)."""

    path: Path
    tag: str
    buildargs: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    no_cache: bool = False
    network_mode: str = "host"
    platform: str | None = None  # linux/arm64: RUN steps of another architecture's image run emulated; None: the engine's own


@dataclass(frozen=True)
class ContainerSpec:
    """A locked-down container: no network, no capabilities, read-only root, bounded memory and pids.
    The adapter adds the owner and session labels (engine/session.py) to `labels`."""

    image: str
    command: tuple[str, ...]
    environment: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    tmpfs: Mapping[str, str] = field(default_factory=dict)
    mem_limit: str | None = None
    pids_limit: int | None = None
    gpus: bool = False  # every NVIDIA GPU (`--gpus all`)
    devices: tuple[str, ...] = ()  # host:container:permissions, e.g. /dev/kfd:/dev/kfd:rwm
    group_add: tuple[str, ...] = ()
    platform: str | None = None  # the image's platform (linux/arm64 on an amd64 host: it runs emulated); None: the engine's own
    user: str | None = None  # uid:gid to run as; None: the image's USER (a bootstrapped base has none: it would be root)


@dataclass(frozen=True)
class ExecResult:
    returncode: int
    stdout: bytes
    stderr: bytes


@dataclass(frozen=True)
class ContainerEntry:
    """A container this tool created (it carries the owner label), from any run."""

    id: str
    labels: Mapping[str, str] = field(default_factory=dict)


class Container(Protocol):
    """A created container; `Engine.container` removes it however its block ends."""

    @property
    def id(self) -> str: ...
    def start(self) -> None: ...
    def wait(self, timeout: float) -> int:
        """Its exit code, once it has exited (EngineFault when it does not within `timeout` seconds)."""
        ...

    def logs(self) -> bytes:
        """Its standard output so far."""
        ...

    def exec(self, command: Sequence[str]) -> ExecResult: ...


class Stream(Protocol):
    """The events of a long engine operation (build, push, pull), read as they come. `cancel` shuts
    the connection under it, from any thread: the engine then drops the operation, and a reader
    blocked on it wakes with an EngineFault."""

    def __iter__(self) -> Iterator[Progress]: ...
    def cancel(self) -> None: ...


class Engine(Protocol):
    """The operations the tool needs from a container engine and the registries behind it."""

    def version(self) -> str: ...
    def gpu_runtimes(self) -> tuple[str, ...]:
        """Names of the engine's GPU-capable runtimes (e.g. ('nvidia',)); () on a plain engine."""
        ...

    def checks_blocked(self) -> str | None:
        """Why the smoke checks, a pytest in another process (pytest-testinfra), cannot run commands
        in this engine's containers, as one line with its fix; None when they can."""
        ...

    # -- local images
    def inspect_image(self, ref: str) -> ImageInfo | None:
        """The image a name, id or repository@digest points to; None when there is none."""
        ...

    def images(self, label: str, *, dangling: bool = False, intermediate: bool = False) -> list[ImageInfo]:
        """Images carrying `label` (`key` or `key=value`); `dangling`: untagged ones only;
        `intermediate`: build-step images too."""
        ...

    def history(self, ref: str) -> list[Layer]:
        """The image's layers, newest first; NotFound when it is gone."""
        ...

    def tag(self, image: str, repository: str, tag: str) -> None: ...
    def remove_image(self, ref: str) -> bool:
        """Drop a tag or an unused image; False when it is gone already or still in use (it stays)."""
        ...

    def build(self, request: BuildRequest) -> Stream: ...
    def save_image(self, ref: str, out: Path) -> None:
        """The image as a docker-archive file (`docker save`); EngineFault on an error."""
        ...

    def load_image(self, archive: Path) -> None:
        """A docker-archive loaded (`docker load`), tagged as its manifest says; EngineFault on an error."""
        ...

    def load_stream(self, write: Callable[[IO[bytes]], None]) -> None:
        """The docker-archive `write` writes into the stream it is given loaded as `load_image` loads
        a file, without the archive being a file: written in order (a pipe: no seek, no tell). What
        `write` raises is raised here (the engine loads nothing of a cut archive)."""
        ...

    # -- registries
    def push(self, repository: str, tag: str) -> Stream: ...
    def pull(self, reference: str) -> Stream: ...
    def registry_digest(self, reference: str) -> str:
        """The manifest digest (sha256:...) the registry reports for a tag or digest; NotFound when it has none."""
        ...

    # -- containers
    def container(self, spec: ContainerSpec) -> AbstractContextManager[Container]:
        """Create a container (not started), labelled as this run's, and remove it however the block
        ends, also on Ctrl-C, SIGTERM or exit."""
        ...

    def owned_containers(self) -> list[ContainerEntry]:
        """Every container (any state) this tool created on the engine, from any run."""
        ...

    def remove_container(self, container_id: str) -> bool:
        """Force-remove a container; False when it was gone already or the engine did not answer."""
        ...

    # -- the connection
    def cut_streams(self) -> int:
        """Cancel every open stream now, and any opened later; how many were cut (an interrupt)."""
        ...

    def close(self) -> None: ...


class Connect(Protocol):
    """How a use-case reaches an engine: the docker adapter's `open_engine`, or a test's fake.
    `timeout` bounds each later engine call (builds can be slow)."""

    def __call__(self, timeout: int = 600) -> Engine: ...
