"""Build the rendered contexts through the Docker engine: incremental, parallel, retried, interruptible.

An image whose tag already carries the plan's content hash is skipped without touching the
build context. Bootstrapped bases are made before the images that need them. Only network
flakes are retried; a deterministic failure fails once, with its log and a diagnosis.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from builder.engine import bootstrap, staging
from builder.engine import client as engine
from builder.engine.failures import is_network_build_failure
from builder.engine.settings import BuildSettings
from builder.errors import UserError
from builder.host.diagnose import diagnose_text
from builder.records import Base, ImageSpec

HASH_LABEL = "io.builder.content-hash"
REVISION_LABEL = "org.opencontainers.image.revision"
Client = Any
ClientFactory = Callable[[], Client]
Log = Callable[[str, str], None]  # (image id, line)


_CREDENTIALS = re.compile(r"(?<=://)([^/@\s:]+):([^/@\s]+)@")


def redact(text: str) -> str:
    """user:password@ in URLs -> user:****@ (for logs)."""
    return _CREDENTIALS.sub(r"\1:****@", text)


class NetworkFlake(Exception):
    """A build failed in a way a retry can fix (download errors)."""


class BuildFailed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class BuildResult:
    id: str
    status: str  # built | up-to-date | failed | interrupted | not-built
    seconds: float = 0.0
    size_mb: float | None = None
    attempts: int = 0
    log: str | None = None
    error: str | None = None
    cause: str | None = None
    fix: str | None = None


def built_hashes(client: Client) -> dict[str, str]:
    """tag -> content hash of every local image this tool built (one engine call)."""
    out: dict[str, str] = {}
    for image in client.api.images(filters={"label": HASH_LABEL}):
        value = (image.get("Labels") or {}).get(HASH_LABEL)
        for tag in image.get("RepoTags") or []:
            out[tag] = str(value)
    return out


def git_revision(root: Path) -> str:
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def check_rendered(specs: Sequence[ImageSpec], images_dir: Path) -> None:
    """Refuse to build from a stale images/: the rendered context must be the planned one."""
    for spec in specs:
        meta = images_dir / spec.id / "image.json"
        try:
            data = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = None
        rendered = data.get("content_hash") if isinstance(data, dict) else None
        if rendered != spec.content_hash:
            raise UserError(f"{images_dir.name}/{spec.id} is missing or stale; run `builder render` first")


@dataclass
class Builder:
    """One build run: settings, where logs go, how to reach the engine."""

    make_client: ClientFactory
    settings: BuildSettings
    images_dir: Path
    build_dir: Path
    revision: str = "unknown"
    retries: int = 3
    backoff_s: float = 5.0
    no_cache: bool = False
    on_line: Log | None = None

    def __post_init__(self) -> None:
        self.stop = threading.Event()
        self._clients: list[Client] = []
        self._lock = threading.Lock()

    @property
    def log_dir(self) -> Path:
        return self.build_dir / "logs"

    def client(self) -> Client:
        client = self.make_client()
        with self._lock:
            self._clients.append(client)
        return client

    def interrupt(self) -> None:
        """Ctrl-C: stop starting builds and cut the running ones (the engine cancels them)."""
        self.stop.set()
        with self._lock:
            for client in self._clients:
                with contextlib.suppress(Exception):  # closing a dying client must not mask the interrupt
                    client.close()

    # -- bases ---------------------------------------------------------------------------
    def ensure_bases(self, specs: Sequence[ImageSpec]) -> dict[str, str]:
        """Bootstrap every local base the selection needs; returns base name -> error for failures."""
        bases: dict[str, Base] = {s.base.name: s.base for s in specs if s.base.bootstrap}
        failed: dict[str, str] = {}
        client = self.client()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for base in bases.values():
            log_path = self.log_dir / f"base-{base.name}.log"
            with log_path.open("w", encoding="utf-8") as log:

                def write(line: str, log: Any = log, name: str = base.name) -> None:
                    log.write(line.rstrip("\n") + "\n")
                    log.flush()
                    if self.on_line:
                        self.on_line(f"base {name}", line)

                try:
                    bootstrap.ensure_base(client, base, log=write)
                except UserError:
                    raise
                except Exception as exc:  # noqa: BLE001 - reported per base, images needing it are not built
                    failed[base.name] = f"bootstrap failed: {exc} (log: {log_path})"
        return failed

    # -- images --------------------------------------------------------------------------
    def build_one(self, spec: ImageSpec) -> BuildResult:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{spec.id}.log"
        started = time.monotonic()
        attempts = 0
        client = self.client()
        staging_root = self.build_dir / "contexts"
        staging_root.mkdir(parents=True, exist_ok=True)
        staged = staging.stage(spec, self.images_dir / spec.id, staging_root, self.settings)
        replaced = engine.image_id(client, spec.tag)
        try:
            for attempt in Retrying(
                stop=stop_after_attempt(self.retries),
                wait=wait_exponential(multiplier=self.backoff_s, max=60),
                retry=retry_if_exception_type(NetworkFlake),
                reraise=False,
            ):
                with attempt:
                    attempts += 1
                    self._attempt(client, spec, staged, log_path, attempts)
        except RetryError as exc:
            return self._failed(
                spec, started, attempts, log_path, f"network errors in all {attempts} attempts: {exc.last_attempt.exception()}"
            )
        except BuildFailed as exc:
            status = "interrupted" if self.stop.is_set() else "failed"
            return self._failed(spec, started, attempts, log_path, exc.message, status)
        finally:
            shutil.rmtree(staged.path, ignore_errors=True)
        built = client.api.inspect_image(spec.tag)
        if replaced and replaced != built["Id"]:  # the old image is garbage now; nightly rebuilds would fill the disk
            engine.remove_image_quietly(client, replaced)
        return BuildResult(spec.id, "built", time.monotonic() - started, round(built.get("Size", 0) / 1e6, 1), attempts, str(log_path))

    def _failed(self, spec: ImageSpec, started: float, attempts: int, log_path: Path, error: str, status: str = "failed") -> BuildResult:
        text = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else error
        found = diagnose_text(text + "\n" + error)
        return BuildResult(
            spec.id,
            status,
            time.monotonic() - started,
            attempts=attempts,
            log=str(log_path),
            error=error,
            cause=found.cause if found else None,
            fix=found.fix if found else None,
        )

    def _attempt(self, client: Client, spec: ImageSpec, staged: staging.Staged, log_path: Path, attempt: int) -> None:
        if self.stop.is_set():
            raise BuildFailed("interrupted before the build started")
        buildargs = dict(self.settings.build_args)
        buildargs["PIP_EXTRA_INDEX_URL"] = " ".join(staged.extra_index_urls)
        labels = {HASH_LABEL: spec.content_hash, REVISION_LABEL: self.revision}
        mode = "w" if attempt == 1 else "a"
        with log_path.open(mode, encoding="utf-8", buffering=1) as log:  # line-buffered: `tail -f` works
            log.write(f"# build {spec.id} attempt {attempt} -> {spec.tag}\n")
            log.write(f"# local wheels: {', '.join(staged.wheels) or 'none'}\n")
            log.write(f"# extra indexes: {redact(' '.join(staged.extra_index_urls)) or 'none'}\n")
            error = None
            try:
                for chunk in self._stream(client, spec, staged.path, buildargs, labels):
                    text = chunk.get("stream") or chunk.get("status") or ""
                    if text:
                        log.write(redact(text))
                        if self.on_line:
                            self.on_line(spec.id, text)
                    if "error" in chunk:
                        error = str(chunk["error"]).strip()
                        log.write(f"ERROR: {error}\n")
                    if self.stop.is_set():
                        raise BuildFailed("interrupted")
            except BuildFailed:
                raise
            except Exception as exc:  # noqa: BLE001 - the engine or the connection broke mid-build
                if self.stop.is_set():
                    raise BuildFailed("interrupted") from None
                error = f"engine connection failed: {exc}"
                log.write(f"ERROR: {error}\n")
        if error is None:
            return
        if is_network_build_failure(error, log_path.read_text(encoding="utf-8", errors="replace")):
            raise NetworkFlake(error)
        raise BuildFailed(error)

    def _stream(
        self, client: Client, spec: ImageSpec, path: Path, buildargs: dict[str, str], labels: dict[str, str]
    ) -> Iterator[dict[str, Any]]:
        return iter(
            client.api.build(
                path=str(path),
                tag=spec.tag,
                rm=True,
                forcerm=True,
                pull=False,
                nocache=self.no_cache,
                network_mode="host",
                buildargs=buildargs,
                labels=labels,
                decode=True,
            )
        )

    def build_all(
        self, specs: Sequence[ImageSpec], *, jobs: int, force: bool, keep_going: bool, on_done: Callable[[BuildResult], None] | None = None
    ) -> list[BuildResult]:
        """Skip what is built, bootstrap bases, then build the rest `jobs` at a time."""
        done: dict[str, BuildResult] = {}
        have = {} if force else built_hashes(self.client())
        todo = []
        for spec in specs:
            if have.get(spec.tag) == spec.content_hash:
                done[spec.id] = BuildResult(spec.id, "up-to-date")
                if on_done:
                    on_done(done[spec.id])
            else:
                todo.append(spec)
        if todo:
            failed_bases = self.ensure_bases(todo)
            for spec in [s for s in todo if s.base.name in failed_bases]:
                done[spec.id] = BuildResult(spec.id, "failed", error=failed_bases[spec.base.name])
            todo = [s for s in todo if s.base.name not in failed_bases]
            self._run_pool(todo, jobs, keep_going, done, on_done)
        return [done.get(s.id) or BuildResult(s.id, "not-built", error="an earlier build failed (use --keep-going)") for s in specs]

    def _run_pool(
        self,
        todo: list[ImageSpec],
        jobs: int,
        keep_going: bool,
        done: dict[str, BuildResult],
        on_done: Callable[[BuildResult], None] | None,
    ) -> None:
        pending = list(todo)
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            running: dict[Future[BuildResult], ImageSpec] = {}
            try:
                while pending or running:
                    while pending and len(running) < max(1, jobs) and not self.stop.is_set():
                        spec = pending.pop(0)
                        running[pool.submit(self.build_one, spec)] = spec
                    if not running:
                        break
                    finished, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
                    for future in finished:
                        spec = running.pop(future)
                        try:
                            result = future.result()
                        except Exception as exc:  # noqa: BLE001 - an unexpected fault fails this image, not the run
                            result = BuildResult(spec.id, "failed", error=f"{type(exc).__name__}: {exc}")
                        done[spec.id] = result
                        if on_done:
                            on_done(result)
                        if result.status == "failed" and not keep_going:
                            pending.clear()
            except KeyboardInterrupt:
                self.interrupt()
                for future, spec in running.items():
                    done[spec.id] = future.result()
                raise
