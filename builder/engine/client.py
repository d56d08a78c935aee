"""The docker adapter: the engine port (engine/port.py) over the docker SDK, and the only module
that imports docker.

`open_engine()` gives a `DockerEngine`, proven by a ping; everything else takes an `Engine`, so
commands that build nothing never need an engine and tests hand in tests/fake_engine.py. Docker's
errors are translated here into the port's two (`NotFound`, `EngineFault`). Containers the tool
creates go through `tracked_container`, which labels them `io.builder.owner=builder` plus this run's
session and always removes them, so an interrupted run leaves nothing behind (and tests can assert
exactly that). The module-level helpers over a raw `docker.DockerClient` (`connect`, `image_id`,
`owned_containers`...) serve the adapter and the Docker tests, which inspect the real engine.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, Any, cast

import docker
from docker.context import ContextAPI
from docker.context.config import get_current_context_name
from docker.errors import APIError, DockerException, NotFound
from docker.models.containers import Container
from docker.utils.config import find_config_file

from builder.engine import port

# Re-exported: the Docker tests and older callers read the labels and the session from here.
from builder.engine.session import HOST as HOST
from builder.engine.session import OWNER_FILTER as OWNER_FILTER
from builder.engine.session import OWNER_LABEL as OWNER_LABEL
from builder.engine.session import OWNER_VALUE as OWNER_VALUE
from builder.engine.session import SESSION_ID as SESSION_ID
from builder.engine.session import SESSION_LABEL as SESSION_LABEL
from builder.engine.session import owner_labels
from builder.engine.session import process_start as process_start
from builder.engine.session import session_alive as session_alive
from builder.util.errors import UserError
from builder.util.text import printable, redact

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
# pytest-testinfra's docker:// backend runs `docker exec` (smoke/checks/conftest.py): without the CLI
# every check failed on "docker: not found" and a good image was recorded "failed".
DOCKER_CLI_MISSING = (
    "the smoke checks run their commands in the test container with the docker CLI (pytest-testinfra's "
    "docker backend), and no `docker` is on PATH: install it (Debian/Ubuntu: apt-get install docker.io, "
    "or Docker's docker-ce-cli) or add its folder to PATH"
)
START_ENGINE_HINT = "start one: bash .ci/docker-up.sh, or sudo systemctl start docker"
PING_TIMEOUT_S = 10

# Runtimes that give containers a GPU, by name prefix (nvidia, nvidia-cdi, nvidia-legacy, amd...).
GPU_RUNTIME_PREFIXES = ("nvidia", "amd", "rocm")

# id -> client that created it; plain dict operations are atomic under the GIL, so cleanup_all
# may run from a signal handler or atexit while the main code is between statements.
_live: dict[str, docker.DockerClient] = {}
_clients: dict[int, docker.DockerClient] = {}
_hooks_installed = False
_hooks_lock = threading.Lock()


def engine_endpoint() -> tuple[str, str]:
    """The engine `connect` talks to, and what named it: DOCKER_HOST, else the docker CLI's current
    context (DOCKER_CONTEXT, else ~/.docker/config.json's; Docker Desktop sets one), else the default
    socket: the order the SDK and the docker CLI resolve them in. A context that does not exist is
    refused (the SDK would quietly use the default socket, where the docker CLI refuses it)."""
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"], ""
    name = os.environ.get("DOCKER_CONTEXT") or get_current_context_name()
    if name == "default":
        return DEFAULT_SOCKET, "DOCKER_HOST is not set"
    config = find_config_file()  # honours DOCKER_CONFIG
    named_by = (
        "DOCKER_CONTEXT"
        if os.environ.get("DOCKER_CONTEXT")
        else f"currentContext in {config if isinstance(config, str) else 'the docker config'}"
    )
    try:
        context = ContextAPI.get_context(name)
    except Exception as exc:  # noqa: BLE001 - the SDK raises a bare Exception for a meta.json it cannot parse
        raise UserError(
            f"the docker context {printable(name, 80)!r} ({named_by}) cannot be read: {printable(str(exc), 200)}; fix it or set DOCKER_HOST"
        ) from None
    if context is None:
        raise UserError(
            f"the docker context {printable(name, 80)!r} ({named_by}) does not exist: `docker context ls` lists them; "
            "name one of those, or `docker context use default`, or set DOCKER_HOST"
        )
    if not context.Host:
        return DEFAULT_SOCKET, f"the docker context {printable(name, 80)!r} names no engine"
    return context.Host, f"the docker context {printable(name, 80)!r}; DOCKER_HOST is not set"


def engine_address() -> str:
    """`engine_endpoint` said so a user can check it: the address, and what named it."""
    url, named_by = engine_endpoint()
    return f"{url} ({named_by})" if named_by else url


def connect(timeout: int = 600) -> docker.DockerClient:
    """A client for the engine DOCKER_HOST names (else the docker context's, else the default
    socket: `engine_address`), proven by a ping.

    `timeout` bounds every later API call (builds can be slow); the ping itself uses a short one
    so a wedged engine is reported in seconds, not minutes.
    """
    where = engine_address()
    try:
        client = docker.from_env(timeout=min(timeout, PING_TIMEOUT_S))
        client.ping()
    except (DockerException, OSError, ValueError) as exc:  # ValueError: a $DOCKER_HOST urllib cannot parse
        reason = printable(" ".join(str(exc).split()), 200)
        raise UserError(f"no Docker engine answers at {printable(where, 200)}: {reason}; {START_ENGINE_HINT}") from None
    client.api.timeout = timeout
    _track_streams(client)
    return client


_STREAMS = "_builder_streams"  # attribute on a client: [cut (bool), its streaming responses]


def _track_streams(client: docker.DockerClient) -> None:
    """Remember every streaming response (build, pull, push) the client receives, so `cut_streams`
    can end them from another thread. A stream that arrives after the cut is cut on arrival."""
    state: list[Any] = [False]

    def remember(response: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("stream"):
            state[1:] = [r for r in state[1:] if not getattr(r.raw, "closed", True)]
            state.append(response)
            if state[0]:
                _shutdown(response)
        return response

    client.api.hooks["response"].append(remember)
    setattr(client, _STREAMS, state)


def _socket_of(response: Any) -> socket.socket | None:
    """The socket under a streaming response (urllib3 keeps its connection while it streams)."""
    connection = getattr(response.raw, "_connection", None)
    sock = getattr(connection, "sock", None)
    if sock is None:  # fall back to http.client's reader: fp (BufferedReader) -> raw (SocketIO) -> _sock
        sock = getattr(getattr(getattr(getattr(response.raw, "_fp", None), "fp", None), "raw", None), "_sock", None)
    return sock if isinstance(sock, socket.socket) else None


def _shutdown(response: Any) -> None:
    sock = _socket_of(response)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def cut_streams(client: docker.DockerClient) -> int:
    """End the client's open streams now (and any it receives later); the number cut.

    Closing a client does not wake a thread blocked reading a stream (a build step that prints
    nothing for minutes): shutting the socket down does, at once, with an error. The engine sees its
    client gone and cancels the work: the classic builder kills and removes the step's container.
    """
    state = getattr(client, _STREAMS, None)
    if state is None:
        return 0
    state[0] = True
    responses = list(state[1:])
    for response in responses:
        _shutdown(response)
    return len(responses)


def remove_container_quietly(client: docker.DockerClient, container_id: str) -> bool:
    """Force-remove a container; False when it was gone already or the engine did not answer."""
    try:
        client.api.remove_container(container_id, force=True, v=True)
    except (DockerException, OSError):
        return False
    return True


def image_labels(client: docker.DockerClient, ref: str) -> dict[str, str] | None:
    """Labels of a local image, `{}` when it has none, None when no such image exists."""
    try:
        attrs = client.api.inspect_image(ref)
    except NotFound:
        return None
    return _labels((attrs.get("Config") or {}).get("Labels"))


def _labels(found: Mapping[str, Any] | None) -> dict[str, str]:
    """Labels as the engine answers them (absent or null when there are none), as text."""
    return {str(k): str(v) for k, v in (found or {}).items()}


def image_id(client: docker.DockerClient, ref: str) -> str | None:
    """The local image id a reference points to, None when there is none."""
    try:
        return str(client.api.inspect_image(ref)["Id"])
    except NotFound:
        return None


def remove_image_quietly(client: docker.DockerClient, ref: str) -> None:
    """Drop a tag or an unused image; one that a tag, a container or a child image still uses stays (409)."""
    with contextlib.suppress(NotFound, APIError):
        client.api.remove_image(ref)


def engine_version(client: docker.DockerClient) -> str:
    return str(client.version().get("Version", "unknown"))


def gpu_runtimes(info: Mapping[str, Any]) -> list[str]:
    """Names of the GPU-capable runtimes in an engine's `info()` (e.g. ['nvidia']); [] on a plain engine."""
    runtimes = info.get("Runtimes") or {}
    return sorted(name for name in runtimes if name.lower().startswith(GPU_RUNTIME_PREFIXES))


def owned_containers(client: docker.DockerClient, label: str = OWNER_FILTER) -> list[port.ContainerEntry]:
    """Every container (any state) carrying `label` (by default: every one this tool created, from any process).

    One listing call and nothing more: the SDK's `containers.list` inspects each listed container
    again, which fails with NotFound when another process removes one in between.
    """
    entries = client.api.containers(all=True, filters={"label": label})
    return [port.ContainerEntry(str(e["Id"]), _labels(e.get("Labels"))) for e in entries]


def is_engine_fault(exc: BaseException) -> bool:
    """An error from talking to the engine (it went away, timed out, broke a stream, answered an error)."""
    import requests

    return isinstance(exc, (port.EngineFault, DockerException, requests.exceptions.RequestException, ConnectionError))


@contextlib.contextmanager
def tracked_container(client: docker.DockerClient, **create_kwargs: Any) -> Iterator[Container]:
    """Create a container (not started), yield it, and force-remove it however the block ends.

    Removal also runs on exceptions and KeyboardInterrupt; if it is itself interrupted, the id
    stays registered and `cleanup_all` (atexit, SIGTERM/SIGHUP) removes it.
    """
    _install_hooks()
    create_kwargs["labels"] = owner_labels(create_kwargs.get("labels") or {})
    _clients[id(client)] = client
    container = client.containers.create(**create_kwargs)
    container_id = container.id
    if container_id is None:  # the SDK reads it from the engine's answer; without it nothing could remove the container
        raise port.EngineFault("the engine created a container and did not say its id")
    _live[container_id] = client
    try:
        yield container
    except BaseException:
        # Keep the original error; if removal fails too, the id stays registered for cleanup_all.
        with contextlib.suppress(DockerException, OSError):
            _remove(client, container_id)
        raise
    _remove(client, container_id)


REMOVE_TRIES, REMOVE_WAIT_S = 20, 0.25  # a 409 asked again for ~5 s


def _remove(client: docker.DockerClient, container_id: str, tries: int = REMOVE_TRIES, wait_s: float = REMOVE_WAIT_S) -> None:
    """Force-remove it; it counts as removed only once the engine says it is gone. A 409 (its removal
    already under way, or a start or stop of it not yet finished) is not that: asked again until the
    engine answers 404 or removes it; the last 409 raises, and the id stays registered for cleanup_all."""
    for attempt in range(1, tries + 1):
        try:
            client.api.remove_container(container_id, force=True, v=True)
            break
        except NotFound:
            break
        except APIError as exc:
            if exc.status_code != 409 or attempt == tries:
                raise
            time.sleep(wait_s)
    _live.pop(container_id, None)


def cleanup_all() -> list[str]:
    """Remove every container this process created and has not removed yet; returns their ids.

    Safe to call more than once, from atexit or a signal handler; never raises.
    """
    removed: list[str] = []
    # Best effort: at exit there is nobody left to report an error to; the sweep retries.
    for container_id, client in list(_live.items()):
        with contextlib.suppress(Exception):
            _remove(client, container_id)
            removed.append(container_id)
    for client in list(_clients.values()):
        with contextlib.suppress(Exception):
            leftovers = client.api.containers(all=True, quiet=True, filters={"label": f"{SESSION_LABEL}={SESSION_ID}"})
            for entry in leftovers:
                _remove(client, entry["Id"])
                removed.append(entry["Id"])
    return removed


def _on_signal(signum: int, frame: FrameType | None) -> None:
    # Turn SIGTERM/SIGHUP into SystemExit so `finally` blocks (tracked_container) and atexit run;
    # the default action would kill the process and orphan its containers.
    raise SystemExit(128 + signum)


def _install_hooks() -> None:
    """Register cleanup once: atexit always; SIGTERM/SIGHUP only if nobody else handles them."""
    global _hooks_installed
    with _hooks_lock:
        if _hooks_installed:
            return
        _hooks_installed = True
        atexit.register(cleanup_all)
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is signal.SIG_DFL:
                signal.signal(sig, _on_signal)


# -- the port over the SDK ----------------------------------------------------------------------


def open_engine(timeout: int = 600) -> port.Engine:
    """The engine DOCKER_HOST names (or the default socket) as the port, proven by a ping (one
    line that says how to start one when none answers)."""
    return DockerEngine(connect(timeout))


def _one_line(exc: BaseException) -> str:
    return redact(" ".join(str(exc).split()))[:500]


@contextlib.contextmanager
def _faults() -> Iterator[None]:
    """Docker's errors as the port's: NotFound for a 404, EngineFault for the rest of the engine's."""
    import requests

    try:
        yield
    except NotFound as exc:
        raise port.NotFound(_one_line(exc)) from None
    except APIError as exc:
        raise port.EngineFault(_one_line(exc), exc.status_code) from None
    except (DockerException, requests.exceptions.RequestException, OSError) as exc:  # ConnectionError is an OSError
        raise port.EngineFault(_one_line(exc)) from None


def create_kwargs(spec: port.ContainerSpec) -> dict[str, Any]:
    """docker SDK `containers.create` arguments of a locked-down container: no network, every
    capability dropped, no new privileges, a read-only root, detached."""
    from docker.types import DeviceRequest

    kwargs: dict[str, Any] = {
        "image": spec.image,
        "command": list(spec.command),
        "network_disabled": True,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        "tmpfs": dict(spec.tmpfs),
        "environment": dict(spec.environment),
        "labels": dict(spec.labels),
        "detach": True,
    }
    if spec.mem_limit is not None:
        kwargs["mem_limit"] = spec.mem_limit
    if spec.pids_limit is not None:
        kwargs["pids_limit"] = spec.pids_limit
    if spec.gpus:
        kwargs["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if spec.devices:
        kwargs["devices"] = list(spec.devices)
    if spec.group_add:
        kwargs["group_add"] = list(spec.group_add)
    if spec.user is not None:
        kwargs["user"] = spec.user
    if spec.platform is not None:  # API 1.41: the engine checks the image is of this platform
        kwargs["platform"] = spec.platform
    return kwargs


def _progress(chunk: Mapping[str, Any]) -> port.Progress:
    aux = chunk.get("aux") or {}
    layer = chunk.get("id")
    return port.Progress(
        text=str(chunk.get("stream") or chunk.get("status") or ""),
        layer=None if layer is None else str(layer),
        error=" ".join(str(chunk["error"]).split()) if "error" in chunk else "",
        digest=str(aux.get("Digest") or "") if isinstance(aux, dict) else "",
    )


def cancel_response(response: Any) -> None:
    """Shut the connection under a streamed response. A close alone does not wake a thread blocked
    reading it; shutdown does, and the engine sees the client go (and cancels the operation)."""
    with contextlib.suppress(Exception):
        fd = response.raw.fileno()
        sock = socket.fromfd(fd, socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()  # the duplicate only; the response's own descriptor is closed below
    with contextlib.suppress(Exception):
        response.close()


class _DockerStream:
    """A streamed engine operation: its responses are kept as the request is made, so `cancel`
    can shut exactly this operation's connection from another thread."""

    def __init__(self, sdk: docker.DockerClient, start: Callable[[], Any]) -> None:
        self._responses: list[Any] = []

        def keep(response: Any, *args: Any, **kwargs: Any) -> None:
            self._responses.append(response)

        hooks = sdk.api.hooks.setdefault("response", [])
        hooks.append(keep)
        try:
            with _faults():
                self._chunks = start()
        finally:
            hooks.remove(keep)

    def __iter__(self) -> Iterator[port.Progress]:
        with _faults():
            for chunk in self._chunks:
                yield _progress(chunk)

    def cancel(self) -> None:
        for response in self._responses:
            cancel_response(response)


class _DockerContainer:
    def __init__(self, container: Container) -> None:
        self._container = container

    @property
    def id(self) -> str:
        return str(self._container.id)

    def start(self) -> None:
        with _faults():
            self._container.start()

    def wait(self, timeout: float) -> int:
        with _faults():
            return int(self._container.wait(timeout=timeout).get("StatusCode", -1))

    def logs(self) -> bytes:
        with _faults():
            return bytes(self._container.logs(stdout=True, stderr=False))

    def exec(self, command: Sequence[str]) -> port.ExecResult:
        with _faults():
            done = self._container.exec_run(list(command), demux=True)
        # demux: the output is (stdout, stderr), each None when empty (the stubs know only the plain form)
        stdout, stderr = cast("tuple[bytes | None, bytes | None]", done.output)
        return port.ExecResult(-1 if done.exit_code is None else int(done.exit_code), stdout or b"", stderr or b"")


def _image_info(attrs: Mapping[str, Any]) -> port.ImageInfo:
    labels = (attrs.get("Config") or {}).get("Labels") if "Config" in attrs else attrs.get("Labels")
    return port.ImageInfo(
        id=str(attrs["Id"]),
        labels=_labels(labels),
        repo_tags=tuple(str(t) for t in attrs.get("RepoTags") or () if t != "<none>:<none>"),
        repo_digests=tuple(str(d) for d in attrs.get("RepoDigests") or () if d != "<none>@<none>"),
        size=int(attrs.get("Size") or 0),
        architecture=str(attrs.get("Architecture") or ""),
        diff_ids=tuple(str(d) for d in (attrs.get("RootFS") or {}).get("Layers") or ()),
    )


LOAD_CHUNK = 4 << 20  # a streamed load's reads and writes


def _load_errors(messages: list[Any]) -> None:
    for message in messages:
        if isinstance(message, dict) and "error" in message:
            raise port.EngineFault(" ".join(str(message["error"]).split()))


class DockerEngine:
    """The engine port over a connected docker SDK client (see port.Engine for each operation)."""

    def __init__(self, sdk: docker.DockerClient) -> None:
        self._sdk = sdk

    def version(self) -> str:
        with _faults():
            return engine_version(self._sdk)

    def gpu_runtimes(self) -> tuple[str, ...]:
        with _faults():
            return tuple(gpu_runtimes(self._sdk.info()))

    def checks_blocked(self) -> str | None:
        return None if shutil.which("docker") else DOCKER_CLI_MISSING

    def inspect_image(self, ref: str) -> port.ImageInfo | None:
        try:
            with _faults():
                return _image_info(self._sdk.api.inspect_image(ref))
        except port.NotFound:
            return None

    def images(self, label: str, *, dangling: bool = False, intermediate: bool = False) -> list[port.ImageInfo]:
        filters: dict[str, Any] = {"label": label}
        if dangling:
            filters["dangling"] = True
        with _faults():
            return [_image_info(entry) for entry in self._sdk.api.images(all=intermediate, filters=filters)]

    def history(self, ref: str) -> list[port.Layer]:
        with _faults():
            return [port.Layer(str(layer.get("CreatedBy") or ""), int(layer.get("Size") or 0)) for layer in self._sdk.api.history(ref)]

    def tag(self, image: str, repository: str, tag: str) -> None:
        with _faults():
            self._sdk.api.tag(image, repository, tag=tag)

    def remove_image(self, ref: str) -> bool:
        try:
            with _faults():
                self._sdk.api.remove_image(ref)
        except port.EngineFault:  # gone already, or a tag, a container or a child image still uses it (409)
            return False
        return True

    def build(self, request: port.BuildRequest) -> _DockerStream:
        return _DockerStream(
            self._sdk,
            lambda: self._sdk.api.build(
                path=str(request.path),
                tag=request.tag,
                rm=True,
                forcerm=True,
                pull=False,
                nocache=request.no_cache,
                network_mode=request.network_mode,
                buildargs=dict(request.buildargs),
                labels=dict(request.labels),
                platform=request.platform,
                decode=True,
            ),
        )

    def save_image(self, ref: str, out: Path) -> None:
        with _faults(), out.open("wb") as data:
            for chunk in self._sdk.api.get_image(ref):
                data.write(chunk)

    def load_image(self, archive: Path) -> None:
        with _faults(), archive.open("rb") as data:
            messages = list(self._sdk.api.load_image(data))
        _load_errors(messages)

    def load_stream(self, write: Callable[[IO[bytes]], None]) -> None:
        """`write` runs in a thread of its own, into a pipe the load reads from (a chunked upload):
        the archive is never a file. Its error wins over the engine's (a cut archive is refused)."""
        read_fd, write_fd = os.pipe()
        failed: list[BaseException] = []

        def writer() -> None:
            try:
                with open(write_fd, "wb", buffering=LOAD_CHUNK) as out:
                    write(out)
            except BaseException as exc:  # noqa: BLE001 - handed to the loading thread
                failed.append(exc)

        thread = threading.Thread(target=writer, name="builder-load", daemon=True)
        refused: port.EngineFault | None = None
        with open(read_fd, "rb", buffering=LOAD_CHUNK) as source:
            thread.start()

            def chunks() -> Iterator[bytes]:
                while data := source.read(LOAD_CHUNK):
                    yield data

            try:
                with _faults():
                    messages = list(self._sdk.api.load_image(chunks()))
            except port.EngineFault as exc:
                refused = exc
            finally:
                source.close()  # a writer still writing gets a broken pipe and ends
                thread.join()
        if failed and not isinstance(failed[0], BrokenPipeError):
            raise failed[0]
        if refused is not None:
            raise refused
        if failed:
            raise port.EngineFault("the engine stopped reading the image archive before its end")
        _load_errors(messages)

    def push(self, repository: str, tag: str) -> _DockerStream:
        return _DockerStream(self._sdk, lambda: self._sdk.api.push(repository, tag=tag, stream=True, decode=True))

    def pull(self, reference: str) -> _DockerStream:
        return _DockerStream(self._sdk, lambda: self._sdk.api.pull(reference, stream=True, decode=True))

    def registry_digest(self, reference: str) -> str:
        with _faults():
            return str(self._sdk.api.inspect_distribution(reference)["Descriptor"]["digest"])

    @contextlib.contextmanager
    def container(self, spec: port.ContainerSpec) -> Iterator[_DockerContainer]:
        with contextlib.ExitStack() as stack:
            with _faults():  # creating it: the engine's errors as the port's; the block's own errors pass as they are
                container = stack.enter_context(tracked_container(self._sdk, **create_kwargs(spec)))
            yield _DockerContainer(container)

    def owned_containers(self) -> list[port.ContainerEntry]:
        with _faults():
            return owned_containers(self._sdk)

    def remove_container(self, container_id: str) -> bool:
        return remove_container_quietly(self._sdk, container_id)

    def cut_streams(self) -> int:
        return cut_streams(self._sdk)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._sdk.close()
