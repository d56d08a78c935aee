"""Build the selected images through the Docker engine: incremental, parallel, interruptible.

An image whose tag already carries the plan's content hash is skipped without touching the build
context. Leftovers of killed runs are swept first, bootstrapped bases are made next, then the
images `jobs` at a time (engine/image_build.py builds each). Ctrl-C and SIGTERM cancel the running
builds in the engine; every staged context is removed however the run ends.

Stopping never waits on a build: each runs in a daemon thread that may sit for minutes in a socket
read (a `RUN` step that prints nothing). An interrupt shuts those sockets down (the engine cancels
the build), removes the step's container, gives the workers STOP_GRACE_S to report, and returns;
a worker still stuck after that cannot hold the process at exit.
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.engine import bootstrap, leftovers, line_image, secrets
from builder.engine.failures import is_network_failure
from builder.engine.image_build import BuildFailed, BuildResult, Run, build_image, up_to_date
from builder.engine.port import Engine, EngineFault
from builder.lock.layer import line_layer
from builder.model.plan import Base, ImageSpec, platform_suffix
from builder.render.context import Files
from builder.render.labels import HASH_LABEL
from builder.util.errors import UserError

EngineFactory = Callable[[], Engine]  # a fresh connection per worker: an interrupt cuts each one's streams
STOP_GRACE_S = 3.0  # how long an interrupt waits for cancelled builds to report before it gives up on them
__all__ = ["HASH_LABEL", "BuildResult", "Builder", "built_hashes", "git_revision"]


def built_hashes(engine: Engine) -> dict[str, str]:
    """tag -> content hash of every local image this tool built (one engine call)."""
    return {tag: image.labels.get(HASH_LABEL, "") for image in engine.images(HASH_LABEL) for tag in image.repo_tags}


def git_revision(root: Path) -> str:
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 else "unknown"


@dataclass
class Builder:
    """One build run: how to reach the engine, what every image build shares, the rendered contexts."""

    make_engine: EngineFactory
    run: Run
    contexts: Mapping[str, Files]  # image id -> its rendered build context
    partial: list[BuildResult] = field(default_factory=list)  # what was done when an interrupt arrived

    def __post_init__(self) -> None:
        self._engines: list[Engine] = []
        self._lock = threading.Lock()
        self._interrupted = False

    @property
    def stop(self) -> threading.Event:
        return self.run.stop

    def engine(self) -> Engine:
        engine = self.make_engine()
        with self._lock:
            self._engines.append(engine)
            if self._interrupted:  # made after the interrupt: its streams end on arrival
                engine.cut_streams()
        return engine

    def interrupt(self) -> None:
        """Ctrl-C / SIGTERM: stop starting builds and cut the running ones, in bounded time.

        Closing a client does not wake a worker blocked reading the build stream; shutting its
        socket down does (Engine.cut_streams), and the engine then cancels the build. The step's
        container is removed too (the engine does it as well; this covers a slow engine), from a
        daemon thread given STOP_GRACE_S, so a wedged engine cannot hold the interrupt.
        """
        self.stop.set()
        with self._lock:
            if self._interrupted:
                return
            self._interrupted = True
            engines = list(self._engines)
        for engine in engines:
            engine.cut_streams()
        containers = list(self.run.step_containers.values())
        if containers and engines:
            _remove_all(self.make_engine, containers=containers)

    # -- bases ---------------------------------------------------------------------------
    def ensure_bases(self, specs: Sequence[ImageSpec]) -> dict[str, str]:
        """Bootstrap every local base the selection needs; returns base tag -> error for failures."""
        bases: dict[str, Base] = {s.base.local_tag: s.base for s in specs if s.base.bootstrap}  # one per OS
        failed: dict[str, str] = {}
        engine = self.engine()
        self.run.log_dir.mkdir(parents=True, exist_ok=True)
        for base in bases.values():
            log_path = self.run.log_dir / f"base-{base.os}{platform_suffix(base.platform)}.log"
            with log_path.open("w", encoding="utf-8") as log:

                def write(line: str, log: Any = log, name: str = base.name) -> None:
                    log.write(line.rstrip("\n") + "\n")
                    log.flush()
                    if self.run.on_line:
                        self.run.on_line(f"base {name}", line)

                try:
                    bootstrap.ensure_base(engine, base, log=write)
                except UserError:
                    raise
                except Exception as exc:  # noqa: BLE001 - reported per base, images needing it are not built
                    failed[base.local_tag] = f"bootstrap failed: {exc} (log: {log_path})"
        return failed

    def ensure_lines(self, specs: Sequence[ImageSpec]) -> dict[str, str]:
        """Make the NVIDIA image of every CUDA line the selection builds on (engine/line_image.py);
        returns line image -> error for those that could not be made (their members are not built)."""
        members = {s.line_image: s for s in specs if line_layer(s) and s.line_image is not None}
        failed: dict[str, str] = {}
        for tag, spec in sorted(members.items()):
            try:
                line_image.ensure(self.run, self.engine(), spec)
            except BuildFailed as exc:
                if self.stop.is_set():
                    raise KeyboardInterrupt from None
                failed[tag] = exc.message
        return failed

    # -- images --------------------------------------------------------------------------
    def build_one(self, spec: ImageSpec, force: bool = True) -> BuildResult:
        return build_image(self.run, self.engine(), spec, self.contexts[spec.id], force=force)

    def build_all(
        self, specs: Sequence[ImageSpec], *, jobs: int, force: bool, keep_going: bool, on_done: Callable[[BuildResult], None] | None = None
    ) -> list[BuildResult]:
        """Sweep a killed run's leftovers, skip what is built, bootstrap bases, then build the rest `jobs` at a time."""
        done: dict[str, BuildResult] = {}
        engine = self.engine()
        leftovers.sweep(engine, self.run.build_dir)
        have = {} if force else built_hashes(engine)
        todo = []
        for spec in specs:
            if have.get(spec.tag) == spec.content_hash:
                done[spec.id] = up_to_date(engine, spec)
                if on_done:
                    on_done(done[spec.id])
            else:
                todo.append(spec)
        try:
            if todo:
                failed_bases = self.ensure_bases(todo)
                for spec in [s for s in todo if s.base.local_tag in failed_bases]:
                    error = failed_bases[spec.base.local_tag]
                    done[spec.id] = BuildResult(spec.id, "failed", error=error, blocked_by="network" if is_network_failure(error) else None)
                todo = [s for s in todo if s.base.local_tag not in failed_bases]
                failed_lines = self.ensure_lines(todo)
                for spec in [s for s in todo if s.line_image in failed_lines]:
                    done[spec.id] = BuildResult(spec.id, "failed", error=failed_lines[str(spec.line_image)])
                todo = [s for s in todo if s.line_image not in failed_lines]
                with secrets.serving() as server:
                    self.run.secrets = server
                    self._run_pool(todo, jobs, force, keep_going, done, on_done)
        except KeyboardInterrupt:
            self.interrupt()  # idempotent; also cuts a base's import when the interrupt came during bootstrap
            self.partial = self._ordered(specs, done, "interrupted")
            raise
        finally:
            self.run.secrets = None
            leftovers.remove_staging(self.run.staging_root)
        return self._ordered(specs, done, "not-built")

    @staticmethod
    def _ordered(specs: Sequence[ImageSpec], done: dict[str, BuildResult], missing: str) -> list[BuildResult]:
        why = "an earlier build failed (use --keep-going)" if missing == "not-built" else "the run was interrupted"
        return [done.get(s.id) or BuildResult(s.id, missing, error=why) for s in specs]

    def _run_pool(
        self,
        todo: list[ImageSpec],
        jobs: int,
        force: bool,
        keep_going: bool,
        done: dict[str, BuildResult],
        on_done: Callable[[BuildResult], None] | None,
    ) -> None:
        pending = list(todo)
        finished: queue.Queue[tuple[ImageSpec, BuildResult]] = queue.Queue()
        running: set[str] = set()

        def record(spec: ImageSpec, result: BuildResult) -> None:
            running.discard(spec.id)
            done[spec.id] = result
            if on_done:
                on_done(result)
            if result.status == "failed" and not keep_going:
                pending.clear()

        try:
            while pending or running:
                while pending and len(running) < max(1, jobs) and not self.stop.is_set():
                    spec = pending.pop(0)
                    running.add(spec.id)
                    threading.Thread(target=self._work, args=(spec, force, finished), name=f"build {spec.id}", daemon=True).start()
                if not running:
                    break
                with contextlib.suppress(queue.Empty):
                    record(*finished.get(timeout=0.5))
        except KeyboardInterrupt:
            self.interrupt()
            deadline = time.monotonic() + STOP_GRACE_S
            while running and time.monotonic() < deadline:
                with contextlib.suppress(queue.Empty):
                    spec, result = finished.get(timeout=max(0.01, deadline - time.monotonic()))
                    running.discard(spec.id)
                    done[spec.id] = result
            if self.run.unfinished_steps:  # a cancelled canonical build's own step images (image_build.py)
                _remove_all(self.make_engine, images=list(self.run.unfinished_steps))
            raise

    def _work(self, spec: ImageSpec, force: bool, finished: queue.Queue[tuple[ImageSpec, BuildResult]]) -> None:
        """One image in a daemon thread; whatever happens, one result goes to `finished`."""
        try:
            result = self.build_one(spec, force)
        except Exception as exc:  # noqa: BLE001 - an unexpected fault fails this image, not the run
            status = "interrupted" if self.stop.is_set() else "failed"
            blocked = "engine" if status == "failed" and isinstance(exc, (EngineFault, ConnectionError)) else None
            result = BuildResult(spec.id, status, error=f"{type(exc).__name__}: {exc}", blocked_by=blocked)
        finished.put((spec, result))


def _remove_all(make_engine: EngineFactory, containers: Sequence[str] = (), images: Sequence[str] = ()) -> None:
    """Remove the containers of cancelled build steps, and the step images of cancelled canonical
    builds (each with the parents only it has), through a fresh connection (the builds' ones are cut),
    from a daemon thread given STOP_GRACE_S, so a wedged engine cannot hold the interrupt."""

    def remove() -> None:
        with contextlib.suppress(Exception):  # the engine may be gone: it cancels the builds, `builder clean` finds the images
            engine = make_engine()
            for container_id in containers:
                engine.remove_container(container_id)
            for image in images:
                engine.remove_image(image)

    remover = threading.Thread(target=remove, daemon=True)
    remover.start()
    remover.join(STOP_GRACE_S)
