"""`builder publish`: push only what the gate allows and record each image in the catalog.

Publishing pushes only what the gate allows, and records each image in the catalog (under its lock)
as soon as its immutable tag is in the registry. No printing: progress goes to an events object.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from builder import results
from builder.catalog.store import Catalog
from builder.engine import push
from builder.engine.client import open_engine
from builder.engine.port import Connect, Engine
from builder.engine.session import remove_dead_runs_containers
from builder.errors import RunFailure, UserError
from builder.host import facts as hostinfo
from builder.publish import gate
from builder.publish.publisher import PushNames, check_repository, floating_to_move, move_floating, push_immutable, read_local
from builder.publish.tags import floating_tags
from builder.records import ImageSpec
from builder.workspace import Workspace


@dataclass(frozen=True)
class PublishOptions:
    registry: str | None = None  # repository to push to; the matrix's registry when None
    dry_run: bool = False
    accept_gpu_skipped: bool = False
    push_deadline_s: float | None = None  # a whole push; None: $BUILDER_PUSH_DEADLINE_S or an hour


@dataclass(frozen=True)
class Published:
    id: str
    status: str  # published | would-publish | refused | failed
    reason: str
    digest: str | None = None
    tags: tuple[str, ...] = ()


class PublishEvents(Protocol):
    def info(self, text: str) -> None: ...
    def done(self, outcome: Published) -> None: ...


def publish(
    ws: Workspace,
    specs: Sequence[ImageSpec],
    options: PublishOptions,
    catalog: Catalog,
    events: PublishEvents,
    connect: Connect = open_engine,
) -> list[Published]:
    """Push each image the gate allows, acting only on the image id the gate approved.

    Order, so that the catalog always says what the registry holds: the immutable tag is pushed and
    recorded at once (its floating tags noted as pending), then the floating tags move and the record
    says which did. A failure or SIGTERM after the immutable push leaves a record of it."""
    repository = check_repository(options.registry or ws.matrix.registry)
    deadline = push.deadline_s(options.push_deadline_s)
    catalog.load()  # a corrupt catalog stops the run before anything is pushed
    engine = connect()
    remove_dead_runs_containers(engine)  # manifest containers of a killed publish
    host = hostinfo.gather(engine=lambda: hostinfo.EngineFacts(True, engine.version(), engine.gpu_runtimes()))
    results_dir = ws.store.results
    outcomes: list[Published] = []
    for spec in specs:
        tested = engine.inspect_image(spec.tag)
        approved = None if tested is None else tested.id  # everything below acts on this id, never on spec.tag
        try:
            found = results.load(results_dir, spec.id)
        except UserError as exc:
            decision = gate.Decision(spec.id, False, str(exc))
        else:
            decision = gate.decide(spec, found, approved, options.accept_gpu_skipped)
        if not decision.ok or decision.result is None or approved is None:
            outcome = Published(spec.id, "refused", decision.reason)
        elif options.dry_run:
            tags = (f"{repository}:{spec.id}", *(f"{repository}:{t}" for t in floating_tags(spec.id)))
            outcome = Published(spec.id, "would-publish", decision.reason, tags=tags)
        else:
            outcome = _publish_one(engine, spec, approved, decision, repository, catalog, host, options, deadline, events)
        events.done(outcome)
        outcomes.append(outcome)
    return outcomes


def _publish_one(
    engine: Engine, spec: ImageSpec, approved: str, decision: gate.Decision, repository: str, catalog: Catalog,
    host: hostinfo.HostInfo, options: PublishOptions, deadline: float, events: PublishEvents,
) -> Published:  # fmt: skip
    assert decision.result is not None
    names = PushNames(engine)
    try:
        return _push_and_record(engine, names, spec, approved, decision, repository, catalog, host, options, deadline, events)
    finally:
        names.release()  # also on SIGTERM: no push name stays in the engine


def _push_and_record(
    engine: Engine, names: PushNames, spec: ImageSpec, approved: str, decision: gate.Decision, repository: str, catalog: Catalog,
    host: hostinfo.HostInfo, options: PublishOptions, deadline: float, events: PublishEvents,
) -> Published:  # fmt: skip
    assert decision.result is not None
    try:
        local = read_local(engine, spec, approved, host)  # before any push: nothing after it can fail but the catalog write
        record, manifest = push_immutable(
            engine, names, spec, approved, local, decision.result, repository, options.accept_gpu_skipped, events.info, deadline
        )
    except RunFailure as exc:
        return Published(spec.id, "failed", exc.message)
    pending = floating_to_move(record, catalog.load())
    note = (f"floating tags pending: {', '.join(pending)} (the publish moving them did not finish)",) if pending else ()
    catalog.add([replace(record, notes=record.notes + note)], {spec.id: manifest})
    moved: list[str] = []
    try:
        move_floating(engine, names, approved, record, pending, events.info, moved, deadline)
    except RunFailure as exc:
        left = [t for t in pending if t not in moved]
        catalog.add(
            [replace(record, floating=tuple(moved), notes=record.notes + (f"floating tags not moved: {', '.join(left)} ({exc.message})",))],
            {},
        )
        reason = f"{record.tag} is published and recorded, but floating tags {', '.join(left)} were not moved: {exc.message}"
        return Published(spec.id, "failed", reason, record.digest, (record.tag, *moved))
    except BaseException:  # Ctrl-C, SIGTERM: the record says what the registry got
        left = [t for t in pending if t not in moved]
        interrupted = replace(
            record, floating=tuple(moved), notes=record.notes + (f"floating tags not moved: {', '.join(left)} (publish interrupted)",)
        )
        with contextlib.suppress(Exception):  # the interruption is what the user must see
            catalog.add([interrupted], {})
        raise
    catalog.add([replace(record, floating=tuple(moved))], {})
    return Published(spec.id, "published", decision.reason, record.digest, (record.tag, *moved))


def publish_ok(outcomes: Sequence[Published]) -> bool:
    return all(o.status in ("published", "would-publish") for o in outcomes)
