"""The use-cases behind `publish`, `pull`, `catalog` and `report`: known-good delivery.

Like app.py: no printing (progress goes to an events object, results come back typed), so the
CLI and the nightly loop share them. Publishing pushes only what the gate allows, and records each
image in the catalog (under its lock) as soon as its immutable tag is in the registry.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from docker.errors import NotFound  # type: ignore[import-untyped]
from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from builder import results
from builder.catalog.query import closest, known_keys, matching, parse_query, unknown_keys
from builder.catalog.records import KnownGood
from builder.catalog.store import Catalog
from builder.engine import client as engine
from builder.engine import push
from builder.engine.failures import is_network_failure
from builder.errors import RunFailure, UserError
from builder.host import facts as hostinfo
from builder.publish import gate
from builder.publish.publisher import PushNames, check_repository, floating_to_move, move_floating, push_immutable, read_local
from builder.publish.tags import floating_tags
from builder.records import ImageSpec
from builder.smoke.args import docker_run_line
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


def catalog_of(ws: Workspace, override: str | None = None, *, must_exist: bool = False) -> Catalog:
    """The --catalog folder, else catalog/ beside the matrix. `must_exist`: for the commands that
    only read it (catalog, pull, report), a --catalog folder that is not there is a typo, exit 2;
    publish and nightly create it on their first record."""
    if override:
        return Catalog(Path(override), named=must_exist)
    return Catalog(ws.matrix_path.parent / "catalog")


def publish(ws: Workspace, specs: Sequence[ImageSpec], options: PublishOptions, catalog: Catalog, events: PublishEvents) -> list[Published]:
    """Push each image the gate allows, acting only on the image id the gate approved.

    Order, so that the catalog always says what the registry holds: the immutable tag is pushed and
    recorded at once (its floating tags noted as pending), then the floating tags move and the record
    says which did. A failure or SIGTERM after the immutable push leaves a record of it."""
    repository = check_repository(options.registry or ws.matrix.registry)
    deadline = push.deadline_s(options.push_deadline_s)
    catalog.load()  # a corrupt catalog stops the run before anything is pushed
    client = engine.connect()
    engine.remove_leftover_containers(client)  # manifest containers of a killed publish
    host = hostinfo.gather(engine=lambda: hostinfo.EngineFacts(True, engine.engine_version(client), tuple(engine.gpu_runtimes(client))))
    results_dir = ws.build_dir / "results"
    outcomes: list[Published] = []
    for spec in specs:
        approved = engine.image_id(client, spec.tag)  # everything below acts on this id, never on spec.tag
        try:
            found = results.load(results_dir, spec.id)
        except UserError as exc:
            decision = gate.Decision(spec.id, False, str(exc))
        else:
            decision = gate.decide(spec, found.to_json() if found else None, approved, options.accept_gpu_skipped)
        if not decision.ok or decision.result is None or approved is None:
            outcome = Published(spec.id, "refused", decision.reason)
        elif options.dry_run:
            tags = (f"{repository}:{spec.id}", *(f"{repository}:{t}" for t in floating_tags(spec.id)))
            outcome = Published(spec.id, "would-publish", decision.reason, tags=tags)
        else:
            outcome = _publish_one(client, spec, approved, decision, repository, catalog, host, options, deadline, events)
        events.done(outcome)
        outcomes.append(outcome)
    return outcomes


def _publish_one(
    client: Any, spec: ImageSpec, approved: str, decision: gate.Decision, repository: str, catalog: Catalog,
    host: hostinfo.HostInfo, options: PublishOptions, deadline: float, events: PublishEvents,
) -> Published:  # fmt: skip
    assert decision.result is not None
    names = PushNames(client)
    try:
        return _push_and_record(client, names, spec, approved, decision, repository, catalog, host, options, deadline, events)
    finally:
        names.release()  # also on SIGTERM: no push name stays in the engine


def _push_and_record(
    client: Any, names: PushNames, spec: ImageSpec, approved: str, decision: gate.Decision, repository: str, catalog: Catalog,
    host: hostinfo.HostInfo, options: PublishOptions, deadline: float, events: PublishEvents,
) -> Published:  # fmt: skip
    assert decision.result is not None
    try:
        local = read_local(client, spec, approved, host)  # before any push: nothing after it can fail but the catalog write
        record, manifest = push_immutable(client, names, spec, approved, local, decision.result, repository, options.accept_gpu_skipped, events.info, deadline)
    except RunFailure as exc:
        return Published(spec.id, "failed", exc.message)
    pending = floating_to_move(record, catalog.load())
    note = (f"floating tags pending: {', '.join(pending)} (the publish moving them did not finish)",) if pending else ()
    catalog.add([replace(record, notes=record.notes + note)], {spec.id: manifest})
    moved: list[str] = []
    try:
        move_floating(client, names, approved, record, pending, events.info, moved, deadline)
    except RunFailure as exc:
        left = [t for t in pending if t not in moved]
        catalog.add([replace(record, floating=tuple(moved), notes=record.notes + (f"floating tags not moved: {', '.join(left)} ({exc.message})",))], {})
        reason = f"{record.tag} is published and recorded, but floating tags {', '.join(left)} were not moved: {exc.message}"
        return Published(spec.id, "failed", reason, record.digest, (record.tag, *moved))
    except BaseException:  # Ctrl-C, SIGTERM: the record says what the registry got
        left = [t for t in pending if t not in moved]
        interrupted = replace(record, floating=tuple(moved), notes=record.notes + (f"floating tags not moved: {', '.join(left)} (publish interrupted)",))
        with contextlib.suppress(Exception):  # the interruption is what the user must see
            catalog.add([interrupted], {})
        raise
    catalog.add([replace(record, floating=tuple(moved))], {})
    return Published(spec.id, "published", decision.reason, record.digest, (record.tag, *moved))


def publish_ok(outcomes: Sequence[Published]) -> bool:
    return all(o.status in ("published", "would-publish") for o in outcomes)


# -- catalog and pull ---------------------------------------------------------------------------


def find(catalog: Catalog, query: str) -> list[KnownGood]:
    """Records matching the query, newest first; a key no record has is a usage error."""
    records = catalog.load()
    terms = parse_query(query)
    bad = unknown_keys(records, terms) if records else []
    if bad:
        raise UserError(f"query key {bad[0]!r} is in no record; keys: {known_keys(records)}")
    return matching(records, terms) if terms else list(records)


def no_match_message(catalog: Catalog, query: str) -> str:
    records = catalog.load()
    asked = " ".join(str(t) for t in parse_query(query))
    query = asked if len(asked) <= 200 else asked[:197] + "..."
    if not records:
        return f"the catalog ({catalog.file}) is empty: `builder publish` records known-good images"
    near = closest(records, parse_query(query))
    if not near:
        return f"no known-good image matches {query!r}; `builder catalog` lists all {len(records)}"
    hints = "; ".join(f"{r.id} (differs in {', '.join(f'{t.key}={r.fields().get(t.key)}' for t in missed[:5])}{', ...' if len(missed) > 5 else ''})" for r, missed in near)
    return f"no known-good image matches {query!r}; closest: {hints}"


@dataclass(frozen=True)
class Pulled:
    record: KnownGood
    run_line: str
    note: str  # about this host, when it cannot use the image's GPU


class PullFlake(Exception):
    pass


def pull(catalog: Catalog, query: str, log: Callable[[str], None], attempts: int = 3, wait_s: float = 2.0, build_repository: str | None = None) -> Pulled:
    """Resolve the query to the newest known-good record, pull it by digest and verify the digest.

    The record's readable tag is given to the pulled image only where that moves nothing that is not
    ours: the tag must be in the digest's repository, a name of `builder build` (`build_repository`,
    the workspace's registry) is never touched, and a name that holds another image is moved only
    when that image came from the same registry repository (an earlier pull); else one line."""
    if not parse_query(query):
        raise UserError("give a query, e.g. `builder pull torch=2.14 cuda=13 python=3.11` (`builder catalog` lists the records)")
    hits = find(catalog, query)
    if not hits:
        raise RunFailure(no_match_message(catalog, query))
    record = hits[0]
    repository, tag = readable_name(record, str(catalog.file))
    client = engine.connect()
    try:
        for attempt in Retrying(retry=retry_if_exception_type(PullFlake), stop=stop_after_attempt(attempts), wait=wait_exponential(multiplier=wait_s, max=30), reraise=False):
            with attempt:
                _pull_once(client, record.digest, log)
    except RetryError as exc:
        raise RunFailure(f"pull of {record.digest} failed after {attempts} tries (network): {exc.last_attempt.exception()}; is the registry up?") from None
    info = client.api.inspect_image(record.digest)
    if record.digest not in (info.get("RepoDigests") or []):
        raise RunFailure(f"pulled {record.digest} but the engine reports {info.get('RepoDigests')}: the digest does not verify")
    note = name_pulled(client, str(info["Id"]), repository, tag, build_repository)
    host = hostinfo.gather()
    notes = "\n".join(filter(None, (note, host_note(record, host))))
    return Pulled(record, docker_run_line(record.accelerator.get("kind", "cpu"), record.digest, host), notes)


TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def readable_name(record: KnownGood, where: str) -> tuple[str, str]:
    """(repository, tag) of a record's `tag`, which must be <the digest's repository>:<tag>."""
    repository, colon, tag = record.tag.rpartition(":")
    if not colon or not TAG.match(tag) or repository != record.repository:
        raise UserError(
            f"record {record.id!r}: tag {record.tag!r} is not {record.repository}:<tag> (the repository of its digest); restore the catalog from git",
            where,
        )
    return repository, tag


def name_pulled(client: Any, pulled: str, repository: str, tag: str, build_repository: str | None) -> str:
    """Tag the pulled image id as repository:tag where that is safe; a note when the name is left alone,
    RunFailure when it holds an image that is not ours to move."""
    name = f"{repository}:{tag}"
    current = engine.image_id(client, name)
    if current == pulled:
        return ""
    if build_repository is not None and repository == build_repository:
        return f"not tagged {name}: that is a `builder build` name in this workspace; run the image by its digest"
    if current is not None:
        digests = client.api.inspect_image(current).get("RepoDigests") or []
        if not any(str(d).startswith(f"{repository}@") for d in digests):
            raise RunFailure(
                f"pulled and verified the image, but {name} already names another local image ({current[:19]}) that did not come from {repository}; "
                "it was left alone: run the image by its digest, or remove that name first (docker rmi)"
            )
    client.api.tag(pulled, repository, tag=tag)
    return ""


NO_MANIFEST = re.compile(r"manifest unknown|manifest for .* not found|name unknown|repository .* not found|404 Client Error", re.IGNORECASE)


def _pull_once(client: Any, reference: str, log: Callable[[str], None]) -> None:
    try:
        for chunk in client.api.pull(reference, stream=True, decode=True):
            if "error" in chunk:
                message = " ".join(str(chunk["error"]).split())
                if NO_MANIFEST.search(message):
                    raise RunFailure(f"pull of {reference} failed: the registry has no such manifest (deleted?): {message[:200]}")
                if is_network_failure(message):
                    raise PullFlake(message)
                raise RunFailure(f"pull of {reference} failed: {message}")
            if chunk.get("status") and chunk.get("id") is None:
                log(str(chunk["status"]))
    except (PullFlake, RunFailure):
        raise
    except Exception as exc:
        message = " ".join(str(exc).split())[:300]
        if isinstance(exc, NotFound) or NO_MANIFEST.search(message):
            raise RunFailure(f"pull of {reference} failed: the registry has no such manifest (deleted?): {message[:200]}") from None
        if engine.is_engine_fault(exc) or is_network_failure(message):
            raise PullFlake(message) from None
        raise RunFailure(f"pull of {reference} failed: {message}") from None


def host_note(record: KnownGood, host: hostinfo.HostInfo) -> str:
    kind = record.accelerator.get("kind")
    if kind == "cuda" and not host.nvidia.has_gpu:
        return "this host has no NVIDIA GPU: the image runs, but only on the CPU here (`builder doctor` says what is missing)"
    if kind == "rocm" and not host.amd.present:
        return "this host has no AMD GPU (/dev/kfd): the image runs, but only on the CPU here"
    if record.gpu_skipped_accepted:
        return "note: this image was published without a GPU run (verdict gpu-skipped)"
    return ""


@dataclass(frozen=True)
class Verified:
    record: KnownGood
    ok: bool
    detail: str


def verify(catalog: Catalog, records: Sequence[KnownGood]) -> list[Verified]:
    """Ask each record's registry (through the engine) whether its digest still exists."""
    client = engine.connect()
    out = []
    for record in records:
        try:
            found = str(client.api.inspect_distribution(record.digest)["Descriptor"]["digest"])
        except Exception as exc:  # noqa: BLE001 - the finding, per record
            message = " ".join(str(exc).split())[:200]
            missing = isinstance(exc, NotFound) or NO_MANIFEST.search(message)
            out.append(Verified(record, False, f"the registry has no such manifest (deleted?): {message}" if missing else message))
            continue
        ok = record.digest.endswith("@" + found)
        out.append(Verified(record, ok, "present" if ok else f"the registry reports {found}"))
    return out


# -- report -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportFiles:
    markdown: Path
    html: Path
    counts: dict[str, int]


def report(ws: Workspace, catalog: Catalog, markdown: Path, html: Path) -> ReportFiles:
    """docs/support-matrix.md and build/report/index.html from the plan, build/results and the catalog."""
    from builder.fsio import MiB, read_json
    from builder.report.html import render_html
    from builder.report.markdown import render_markdown
    from builder.report.model import build_report
    from builder.report.output import write_report

    records = catalog.load()
    specs = ws.selected(None, use_default=False)  # every planned image, with its content hash
    results_dir = ws.build_dir / "results"
    results = {s.id: data for s in specs if (data := gate.read_result(results_dir, s.id)) is not None}
    sizes: dict[str, float] = {}
    build_json = results_dir / "build.json"
    if build_json.exists():
        try:
            for entry in read_json(build_json, 16 * MiB, "build summary"):
                if isinstance(entry, dict) and entry.get("sizes"):
                    sizes[str(entry["id"])] = float(entry["sizes"]["image_mb"])
        except (UserError, ValueError, TypeError, KeyError):
            pass  # sizes are a nicety; the report stands without them
    model = build_report(ws.decided, specs, results, records, sizes)
    write_report((markdown, render_markdown(model)), (html, render_html(model)), protected=(ws.matrix_path, catalog.file))
    return ReportFiles(markdown, html, model.counts())
