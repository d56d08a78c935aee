"""`builder publish`: push only what the gate allows and record each image in the catalog.

Publishing pushes only what the gate allows, and records each image in the catalog (under its lock)
as soon as its immutable tag is in the registry. No printing: progress goes to an events object.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from builder.catalog import indexes
from builder.catalog.records import KnownGood
from builder.catalog.store import Catalog
from builder.engine import push
from builder.engine.client import open_engine
from builder.engine.port import Connect, Engine, EngineFault
from builder.engine.registry import HttpRegistry, Registry
from builder.engine.session import remove_dead_runs_containers
from builder.engine.settings import host_ca_bundle
from builder.host import facts as hostinfo
from builder.model import results
from builder.model.plan import ImageSpec
from builder.model.results import SmokeResult
from builder.publish import attestation, evidence, gate, sbom, signing
from builder.publish.publisher import (
    Local,
    PushNames,
    Unread,
    check_repository,
    floating_to_move,
    immutable_record,
    move_floating,
    now,
    push_verified,
    read_local,
    repository_turn,
)
from builder.publish.tags import floating_tags
from builder.util.errors import RunFailure, UserError
from builder.workspace import Workspace


@dataclass(frozen=True)
class PublishOptions:
    registry: str | None = None  # repository to push to; the matrix's registry when None
    dry_run: bool = False
    accept_gpu_skipped: bool = False
    push_deadline_s: float | None = None  # a whole push; None: $BUILDER_PUSH_DEADLINE_S or an hour
    sign_key: Path | None = None  # an SSH private key: sign each attestation and record (ssh-keygen -Y sign)


@dataclass(frozen=True)
class Published:
    id: str
    status: str  # published | would-publish | indexed (a multi-platform index of `id`, an image name) | refused | failed
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
    registry: Registry | None = None,
) -> list[Published]:
    """Push each image the gate allows, acting only on the image id the gate approved.

    Order, so that the catalog always says what the registry holds: the immutable tag is pushed and
    recorded at once (its floating tags noted as pending), then the floating tags move and the record
    says which did. A failure or SIGTERM after the immutable push leaves a record of it."""
    repository = check_repository(options.registry or ws.matrix.registry)
    deadline = push.deadline_s(options.push_deadline_s)
    catalog.load()  # a corrupt catalog stops the run before anything is pushed
    if options.sign_key is not None and not options.dry_run:
        signing.check_key(options.sign_key)
        signing.sign(b"probe", options.sign_key, signing.RECORD_NAMESPACE)  # a key that cannot sign stops the run before any push
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
            tags = (f"{repository}:{spec.id}", *(f"{repository}:{t}" for t in floating_tags(spec.tag_line)))
            outcome = Published(spec.id, "would-publish", decision.reason, tags=tags)
        else:
            outcome = _publish_one(engine, spec, approved, decision, repository, catalog, host, options, deadline, events)
        events.done(outcome)
        outcomes.append(outcome)
    touched = sorted({indexes.image_name(s.id, s.platform) for s, o in zip(specs, outcomes, strict=True) if o.status == "published"})
    if touched:
        talk = registry or HttpRegistry(ca_bundle=host_ca_bundle(os.environ))
        for name in touched:
            indexed = put_index(talk, catalog, repository, name, events)
            if indexed is not None:
                events.done(indexed)
                outcomes.append(indexed)
    return outcomes


def put_index(registry: Registry, catalog: Catalog, repository: str, name: str, events: PublishEvents) -> Published | None:
    """When `name` has known-good records in `repository` for two or more platforms: the image index
    at repository:<name> naming the newest of each, read back from the registry and recorded in
    catalog/indexes.json: an `indexed` outcome, or a `failed` one (the images stay published). None
    when the name has one platform there."""
    found = {p: r for p, r in indexes.members(catalog.load(), name).items() if r.repository == repository}
    if len(found) < 2:
        return None
    tag = f"{repository}:{name}"
    try:
        entries = []
        for platform, record in sorted(found.items()):
            manifest = registry.manifest(repository, record.digest.partition("@")[2])
            if manifest.digest != record.digest.partition("@")[2]:
                raise EngineFault(f"the registry's {record.digest} reads back as {manifest.digest}")
            entries.append(indexes.Entry(platform, manifest.digest, len(manifest.body), manifest.media_type))
        media_type, body = indexes.index_body(entries)
        digest = registry.put_manifest(repository, name, media_type, body)
        back = registry.manifest(repository, name)
        if back.digest != digest:
            raise EngineFault(f"{tag} reads back as {back.digest}, not the index {digest} just put (a concurrent push?)")
    except EngineFault as exc:
        return Published(name, "failed", f"the platforms of {name} are published, but their index {tag} is not: {exc.message}")
    platforms = {platform: record.digest for platform, record in sorted(found.items())}
    catalog.add_index(indexes.IndexRecord(name, tag, f"{repository}@{digest}", platforms, now()))
    return Published(name, "indexed", f"index of {', '.join(platforms)}", f"{repository}@{digest}", (tag,))


def _publish_one(
    engine: Engine, spec: ImageSpec, approved: str, decision: gate.Decision, repository: str, catalog: Catalog,
    host: hostinfo.HostInfo, options: PublishOptions, deadline: float, events: PublishEvents,
) -> Published:  # fmt: skip
    assert decision.result is not None
    with repository_turn(repository, events.info):  # a second publish to this repository waits: its push names are ours
        names = PushNames(engine)
        try:
            return _push_and_record(engine, names, spec, approved, decision, repository, catalog, host, options, deadline, events)
        finally:
            names.release()  # also on SIGTERM: no push name stays in the engine


EVIDENCE_PENDING = "evidence pending: the publish making it did not finish"
UNFINISHED = "the publish moving them did not finish"


@dataclass
class _Recorder:
    """The record of a digest whose immutable tag is in the registry, written again after each step,
    so that whatever stops the run (a failure, a signer past its deadline, SIGTERM) the catalog says
    what the registry holds. `step` is what runs now: what its record says if it is interrupted."""

    catalog: Catalog
    record: KnownGood
    pending: tuple[str, ...]  # the floating tags to move
    manifest: str | None  # written with the first record, with every earlier digest's evidence file removed
    moved: list[str] = field(default_factory=list)
    step: str = "evidence"  # evidence (signing) | evidence-push | floating

    def left(self) -> list[str]:
        return [t for t in self.pending if t not in self.moved]

    def unmoved(self, why: str = UNFINISHED) -> tuple[str, ...]:
        left = self.left()
        return (f"floating tags not moved: {', '.join(left)} ({why})",) if left else ()

    def write(self, *notes: str, files: Mapping[str, str | None] | None = None) -> None:
        record = replace(self.record, floating=tuple(self.moved), notes=self.record.notes + notes)
        if self.manifest is None:
            self.catalog.add([record], {}, files)
            return
        self.catalog.add([record], {record.id: self.manifest}, {**evidence.no_evidence(record.id), **(files or {})})
        self.manifest = None

    def interrupted(self) -> None:
        """Ctrl-C, SIGTERM: what the step that was running leaves undone."""
        if self.step == "floating":
            notes = self.unmoved("publish interrupted")
        elif self.step == "evidence":
            notes = (*self.unmoved(), EVIDENCE_PENDING)
        else:
            notes = (*self.unmoved(), "evidence not in the registry (publish interrupted)")
        with contextlib.suppress(Exception):  # the interruption is what the user must see
            self.write(*notes)


def _push_and_record(
    engine: Engine, names: PushNames, spec: ImageSpec, approved: str, decision: gate.Decision, repository: str, catalog: Catalog,
    host: hostinfo.HostInfo, options: PublishOptions, deadline: float, events: PublishEvents,
) -> Published:  # fmt: skip
    assert decision.result is not None
    try:
        local = read_local(engine, spec, approved, host)  # before any push: nothing after it can fail but the catalog write
        pins = sbom.lock_pins(spec.lock)
        sbom.check_equal_to_lock(local.inventory, pins, spec.id)  # an SBOM that is not the lock: nothing is pushed
    except RunFailure as exc:
        return Published(spec.id, "failed", exc.message)
    landed: list[str] = []
    result = decision.result

    def record_landed(why: str) -> KnownGood | None:
        """The record of a push the engine made of the approved image, when the registry's tag could not be read back."""
        if not landed:
            return None
        record, manifest = immutable_record(spec, local, result, repository, landed[-1], options.accept_gpu_skipped)
        unread = replace(
            record, notes=record.notes + (f"its tag was not read back from the registry ({why}): `builder catalog --verify` checks it",)
        )
        catalog.add([unread], {spec.id: manifest}, evidence.no_evidence(spec.id))
        return unread

    try:
        digest = push_verified(engine, names, approved, repository, spec.id, events.info, deadline, landed=landed)
    except Unread as exc:  # pushed, then the registry went away
        unread = record_landed(exc.message)
        if unread is None:
            return Published(spec.id, "failed", exc.message)
        return Published(spec.id, "failed", f"{unread.tag} is pushed and recorded, but {exc.message}", unread.digest)
    except RunFailure as exc:
        return Published(spec.id, "failed", exc.message)
    except BaseException:  # Ctrl-C, SIGTERM once the registry took the tag, before it was read back: recorded as pushed
        with contextlib.suppress(Exception):  # the interruption is what the user must see
            record_landed("publish interrupted right after its push")
        raise
    record, manifest = immutable_record(spec, local, decision.result, repository, digest, options.accept_gpu_skipped)
    recorder = _Recorder(catalog, record, floating_to_move(record, catalog.load()), manifest)
    try:
        # The tag is in the registry: recorded at once, before anything that can take long or fail
        # (signing, the evidence pushes, the floating tags).
        recorder.write(*recorder.unmoved(), EVIDENCE_PENDING)
        try:
            files = evidence_files(spec, record, decision.result, local, pins, options.sign_key)
        except RunFailure as exc:
            recorder.write(*recorder.unmoved(), f"no evidence: {exc.message}")
            return Published(
                spec.id, "failed", f"{record.tag} is published and recorded without its evidence: {exc.message}", record.digest
            )
        recorder.write(*recorder.unmoved(), files=files)
        recorder.step = "evidence-push"
        try:
            pushed_evidence = push_evidence(engine, names, record, files, events.info, deadline)
        except RunFailure as exc:
            recorder.write(*recorder.unmoved(), f"evidence not in the registry: {exc.message}")
            return Published(
                spec.id, "failed", f"{record.tag} is published and recorded, but its evidence was not pushed: {exc.message}", record.digest
            )
        recorder.step = "floating"
        try:
            move_floating(engine, names, approved, record, recorder.pending, events.info, recorder.moved, deadline)
        except RunFailure as exc:
            left = recorder.left()
            recorder.write(*recorder.unmoved(exc.message))
            reason = f"{record.tag} is published and recorded, but floating tags {', '.join(left)} were not moved: {exc.message}"
            return Published(spec.id, "failed", reason, record.digest, (record.tag, *recorder.moved))
    except BaseException:  # Ctrl-C, SIGTERM: the record says what the registry got
        recorder.interrupted()
        raise
    recorder.write()
    return Published(spec.id, "published", decision.reason, record.digest, (record.tag, *recorder.moved, *pushed_evidence))


def evidence_files(
    spec: ImageSpec, record: KnownGood, result: SmokeResult, local: Local, pins: dict[str, sbom.LockPin], key: Path | None
) -> dict[str, str | None]:
    """catalog/evidence/'s files of this record: SBOM, Statement, the record's signed fields and,
    with a key, their signatures (without one, an earlier digest's signatures are removed)."""
    repository, _, digest = record.digest.partition("@")
    sbom_text = sbom.make_sbom(spec.id, repository, digest, local.inventory, pins, record.published)
    built = attestation.BuiltImage(local.image_id, local.diff_ids, spec.canonical is not None) if local.image_id else None
    statement = attestation.statement(record, result, sbom_text, built)
    signed = evidence.signed_fields(record)
    files: dict[str, str | None] = {
        evidence.sbom_name(spec.id): sbom_text,
        evidence.statement_name(spec.id): statement,
        evidence.record_name(spec.id): signed,
    }
    for name, text, namespace in (
        (evidence.statement_name(spec.id), statement, signing.ATTESTATION_NAMESPACE),
        (evidence.record_name(spec.id), signed, signing.RECORD_NAMESPACE),
    ):
        files[name + evidence.SIG] = None if key is None else signing.sign(text.encode(), key, namespace)
    return files


def push_evidence(
    engine: Engine, names: PushNames, record: KnownGood, files: dict[str, str | None], log: Callable[[str], None], deadline: float
) -> tuple[str, ...]:
    """REPO:sha256-<hex>.sbom (the SBOM) and REPO:sha256-<hex>.att (the Statement and its signature)."""
    statement = files[evidence.statement_name(record.id)] or ""
    signature = files.get(evidence.statement_name(record.id) + evidence.SIG)
    att = {evidence.STATEMENT_FILE: statement, **({evidence.STATEMENT_FILE + evidence.SIG: signature} if signature else {})}
    sbom_files = {evidence.SBOM_FILE: files[evidence.sbom_name(record.id)] or ""}
    return (
        evidence.push_files(engine, names, record, "sbom", sbom_files, log, deadline).tag,
        evidence.push_files(engine, names, record, "att", att, log, deadline).tag,
    )


def publish_ok(outcomes: Sequence[Published]) -> bool:
    return all(o.status in ("published", "would-publish", "indexed") for o in outcomes)
