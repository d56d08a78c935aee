"""The use-cases behind `publish`, `pull`, `catalog` and `report`: known-good delivery.

Like app.py: no printing (progress goes to an events object, results come back typed), so the
CLI and the nightly loop share them. Publishing pushes only what the gate allows, and the
catalog is written once per run, after the pushes, under its lock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from builder.catalog.query import closest, known_keys, matching, parse_query, unknown_keys
from builder.catalog.records import KnownGood
from builder.catalog.store import Catalog
from builder.engine import client as engine
from builder.engine.failures import is_network_failure
from builder.errors import RunFailure, UserError
from builder.host import facts as hostinfo
from builder.publish import gate
from builder.publish.publisher import check_repository, publish_one
from builder.publish.tags import floating_tags
from builder.records import ImageSpec
from builder.smoke.args import docker_run_line
from builder.workspace import Workspace


@dataclass(frozen=True)
class PublishOptions:
    registry: str | None = None  # repository to push to; the matrix's registry when None
    dry_run: bool = False
    accept_gpu_skipped: bool = False


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
    """Push each image the gate allows; record the pushed ones in the catalog (one locked write)."""
    repository = check_repository(options.registry or ws.matrix.registry)
    known = list(catalog.load())  # a corrupt catalog stops the run before anything is pushed
    client = engine.connect()
    host = hostinfo.gather(engine=lambda: hostinfo.EngineFacts(True, engine.engine_version(client), tuple(engine.gpu_runtimes(client))))
    results_dir = ws.build_dir / "results"
    outcomes: list[Published] = []
    records: list[KnownGood] = []
    manifests: dict[str, str] = {}
    for spec in specs:
        decision = gate.decide(spec, gate.read_result(results_dir, spec.id), engine.image_id(client, spec.tag), options.accept_gpu_skipped)
        if not decision.ok or decision.result is None:
            outcome = Published(spec.id, "refused", decision.reason)
        elif options.dry_run:
            tags = (f"{repository}:{spec.id}", *(f"{repository}:{t}" for t in floating_tags(spec.id)))
            outcome = Published(spec.id, "would-publish", decision.reason, tags=tags)
        else:
            try:
                record, manifest = publish_one(client, spec, decision.result, repository, [*known, *records], host, options.accept_gpu_skipped, events.info)
            except RunFailure as exc:
                outcome = Published(spec.id, "failed", exc.message)
            else:
                records.append(record)
                manifests[spec.id] = manifest
                outcome = Published(spec.id, "published", decision.reason, record.digest, (record.tag, *record.floating))
        events.done(outcome)
        outcomes.append(outcome)
    if records:
        catalog.add(records, manifests)
    return outcomes


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


def pull(catalog: Catalog, query: str, log: Callable[[str], None], attempts: int = 3, wait_s: float = 2.0) -> Pulled:
    """Resolve the query to the newest known-good record, pull it by digest and verify the digest."""
    if not parse_query(query):
        raise UserError("give a query, e.g. `builder pull torch=2.14 cuda=13 python=3.11` (`builder catalog` lists the records)")
    hits = find(catalog, query)
    if not hits:
        raise RunFailure(no_match_message(catalog, query))
    record = hits[0]
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
    repository, _, tag = record.tag.rpartition(":")
    client.api.tag(info["Id"], repository, tag=tag)  # the readable name too, pointing at the verified digest
    host = hostinfo.gather()
    return Pulled(record, docker_run_line(record.accelerator.get("kind", "cpu"), record.digest, host), host_note(record, host))


def _pull_once(client: Any, reference: str, log: Callable[[str], None]) -> None:
    try:
        for chunk in client.api.pull(reference, stream=True, decode=True):
            if "error" in chunk:
                message = " ".join(str(chunk["error"]).split())
                if is_network_failure(message):
                    raise PullFlake(message)
                raise RunFailure(f"pull of {reference} failed: {message}")
            if chunk.get("status") and chunk.get("id") is None:
                log(str(chunk["status"]))
    except (PullFlake, RunFailure):
        raise
    except Exception as exc:
        message = " ".join(str(exc).split())[:300]
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
            out.append(Verified(record, False, " ".join(str(exc).split())[:200]))
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
