"""The Docker engine edge: the only module that creates a docker client.

Everything else receives a client from `connect()`, so commands that build nothing never need an
engine, and tests can hand in their own. Containers the tool creates go through
`tracked_container`, which labels them `io.builder.owner=builder` and always removes them, so an
interrupted run leaves nothing behind (and tests can assert exactly that).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import threading
import uuid
from collections.abc import Iterator, Mapping
from types import FrameType
from typing import Any

import docker  # type: ignore[import-untyped]
from docker.errors import APIError, DockerException, NotFound  # type: ignore[import-untyped]

from builder.errors import UserError
from builder.text import printable

OWNER_LABEL = "io.builder.owner"
OWNER_VALUE = "builder"
OWNER_FILTER = f"{OWNER_LABEL}={OWNER_VALUE}"
# Per-process label: lets cleanup find a container whose create call was interrupted before its
# id came back to us, and lets a later run tell a dead run's leftovers (host, pid and the pid's
# start time, so a reused pid is not mistaken for the dead run) from a live run's containers.
SESSION_LABEL = "io.builder.session"
HOST = socket.gethostname()


def process_start(pid: int) -> str | None:
    """The start time of a process (clock ticks since boot, from /proc), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


SESSION_ID = f"{HOST}:{os.getpid()}:{process_start(os.getpid())}:{uuid.uuid4().hex[:8]}"


def session_alive(session: str) -> bool | None:
    """Whether the run that labelled something is still running; None when it cannot be told
    (another host shares this engine, or the label predates this format): then leave it alone."""
    parts = session.split(":")
    if len(parts) != 4 or parts[0] != HOST or not parts[1].isdigit():
        return None
    return process_start(int(parts[1])) == parts[2]


DEFAULT_SOCKET = "unix:///var/run/docker.sock"
START_ENGINE_HINT = "start one: bash .ci/docker-up.sh, or sudo systemctl start docker"
PING_TIMEOUT_S = 10

# Runtimes that give containers a GPU, by name prefix (nvidia, nvidia-cdi, nvidia-legacy, amd...).
GPU_RUNTIME_PREFIXES = ("nvidia", "amd", "rocm")

# id -> client that created it; plain dict operations are atomic under the GIL, so cleanup_all
# may run from a signal handler or atexit while the main code is between statements.
_live: dict[str, Any] = {}
_clients: dict[int, Any] = {}
_hooks_installed = False
_hooks_lock = threading.Lock()


def connect(timeout: int = 600) -> docker.DockerClient:
    """A client for the engine DOCKER_HOST names (or the default socket), proven by a ping.

    `timeout` bounds every later API call (builds can be slow); the ping itself uses a short one
    so a wedged engine is reported in seconds, not minutes.
    """
    where = os.environ.get("DOCKER_HOST") or f"{DEFAULT_SOCKET} (DOCKER_HOST is not set)"
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


def cut_streams(client: Any) -> int:
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


def remove_container_quietly(client: Any, container_id: str) -> bool:
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
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


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


def gpu_runtimes(client: docker.DockerClient) -> list[str]:
    """Names of the engine's GPU-capable runtimes (e.g. ['nvidia']); [] on a plain engine."""
    runtimes = client.info().get("Runtimes") or {}
    return sorted(name for name in runtimes if name.lower().startswith(GPU_RUNTIME_PREFIXES))


def owned_containers(client: docker.DockerClient) -> list[Any]:
    """Every container (any state) this tool created on the engine, from any process."""
    return list(client.containers.list(all=True, filters={"label": OWNER_FILTER}))


def remove_leftover_containers(client: docker.DockerClient) -> list[str]:
    """Remove the containers of runs that are gone (SIGKILL, a crash): ids removed. Containers of
    live runs, and of runs this host cannot judge, stay."""
    removed = []
    for entry in client.api.containers(all=True, filters={"label": OWNER_FILTER}):
        session = (entry.get("Labels") or {}).get(SESSION_LABEL, "")
        if session != SESSION_ID and session_alive(session) is False:
            with contextlib.suppress(NotFound, APIError):
                client.api.remove_container(entry["Id"], force=True, v=True)
                removed.append(str(entry["Id"]))
    return removed


def is_engine_fault(exc: BaseException) -> bool:
    """An error from talking to the engine (it went away, timed out, broke a stream)."""
    import requests

    return isinstance(exc, (DockerException, requests.exceptions.RequestException, ConnectionError))


def _owner_labels(labels: Mapping[str, str] | list[str] | None) -> dict[str, str]:
    merged = {name: "" for name in labels} if isinstance(labels, list) else dict(labels or {})
    merged[OWNER_LABEL] = OWNER_VALUE
    merged[SESSION_LABEL] = SESSION_ID
    return merged


@contextlib.contextmanager
def tracked_container(client: docker.DockerClient, **create_kwargs: Any) -> Iterator[Any]:
    """Create a container (not started), yield it, and force-remove it however the block ends.

    Removal also runs on exceptions and KeyboardInterrupt; if it is itself interrupted, the id
    stays registered and `cleanup_all` (atexit, SIGTERM/SIGHUP) removes it.
    """
    _install_hooks()
    create_kwargs["labels"] = _owner_labels(create_kwargs.get("labels"))
    _clients[id(client)] = client
    container = client.containers.create(**create_kwargs)
    _live[container.id] = client
    try:
        yield container
    except BaseException:
        # Keep the original error; if removal fails too, the id stays registered for cleanup_all.
        with contextlib.suppress(DockerException, OSError):
            _remove(client, container.id)
        raise
    _remove(client, container.id)


def _remove(client: Any, container_id: str) -> None:
    try:
        client.api.remove_container(container_id, force=True, v=True)
    except NotFound:
        pass
    except APIError as exc:
        # 409: removal already in progress (another cleanup got there first).
        if exc.status_code != 409:
            raise
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
