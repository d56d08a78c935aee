"""`builder pull`: the newest known-good record a query matches, its evidence verified, pulled by
digest (the digest checked), and a note for each of its tags the registry moved to another image."""

from __future__ import annotations

import datetime as dt
import platform
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from builder.catalog.indexes import IndexRecord
from builder.catalog.query import parse_query
from builder.catalog.records import KnownGood
from builder.catalog.store import Catalog
from builder.compat import lifecycle
from builder.compat.rules import table
from builder.engine.client import open_engine
from builder.engine.failures import is_network_failure
from builder.engine.port import Connect, Engine, EngineFault, NotFound
from builder.engine.retry import GaveUp, reason_of, retry_network
from builder.fit import host as fit_hosts
from builder.fit.host import FitHost
from builder.fit.runs_on import runs_on
from builder.host import facts as hostinfo
from builder.model.plan import PLATFORM_ARCH
from builder.publish.verify import signers, vouch
from builder.smoke.args import docker_run_line, rocm_flags_note
from builder.usecases.catalog import NO_MANIFEST, record_end_of_life, search
from builder.usecases.fit import judge
from builder.util.errors import RunFailure, UserError
from builder.util.query import Term
from builder.util.text import redact
from builder.workspace import Workspace


@dataclass(frozen=True)
class Pulled:
    record: KnownGood
    run_line: str
    note: str  # about this host, when it cannot use the image's GPU; tags the registry moved
    fit: str = ""  # what the fit check said: fits, not checked (and what), or skipped
    trust: str = ""  # what the signature check said: `signatures verified (signed by P)`, or why not
    runs_on: str = ""  # what the image runs on (fit/runs_on.py's cell: `sm ...` or `gfx...`, the same the catalog and report show)


@dataclass(frozen=True)
class FitCheck:
    """What pull checks before it pulls: the record's fit for `host` (None: this host, detected), or nothing (`skip`)."""

    host: FitHost | None = None
    skip: bool = False


class PullFlake(Exception):
    pass


def pull(
    catalog: Catalog,
    query: str,
    log: Callable[[str], None],
    attempts: int = 3,
    wait_s: float = 2.0,
    build_repository: str | None = None,
    connect: Connect = open_engine,
    check: FitCheck = FitCheck(),
    allowed_signers: Path | None = None,
    verify_signatures: bool = True,
) -> Pulled:
    """Resolve the query to the newest known-good record, check its evidence (publish/verify.py's
    `signers` and `vouch`: `allowed_signers`, or none with `verify_signatures` False), pull it by
    digest and check the digest; note each of its tags the registry moved.

    The record's readable tag is given to the pulled image only where that moves nothing that is not
    ours: the tag must be in the digest's repository, a name of `builder build` (`build_repository`,
    the workspace's registry) is never touched, and a name that holds another image is moved only
    when that image came from the same registry repository (an earlier pull); else one line.
    Before any of it, the record's fit for this host (`check`): one that does not fit is refused."""
    terms = parse_query(query)  # read once: the match, the platform order and a no-match message all use these
    if not terms:
        raise UserError("give a query, e.g. `builder pull torch=2.14 cuda=13 python=3.11` (`builder catalog` lists the records)")
    chosen = signers(catalog, allowed_signers, verify_signatures)  # a signers file that cannot be used: before anything
    matched = search(catalog, terms)  # the catalog read once
    if not matched.hits:
        raise RunFailure(matched.no_match())
    hits = host_platform_first(matched.hits, terms, check)
    record = hits[0]
    fit = fit_first(hits, check)
    repository, tag = readable_name(record, str(catalog.file))
    trust = vouch(catalog, record, chosen)
    engine = connect()
    try:
        retry_network(
            lambda attempt: _pull_once(engine, record.digest, log),
            flake=lambda exc: isinstance(exc, PullFlake),
            attempts=attempts,
            wait_s=wait_s,
        )
    except GaveUp as exc:
        raise RunFailure(f"pull of {record.digest} failed after {attempts} tries (network): {exc.reason}; is the registry up?") from None
    info = engine.inspect_image(record.digest)
    if info is None or record.digest not in info.repo_digests:
        found = list(info.repo_digests) if info else None
        raise RunFailure(f"pulled {record.digest} but the engine reports {found}: the digest does not verify")
    note = name_pulled(engine, info.id, repository, tag, build_repository)
    moved = moved_tags(engine, record, catalog.indexes())
    host = hostinfo.gather()
    flags = rocm_flags_note() if record.accelerator.kind == "rocm" else ""
    notes = "\n".join(filter(None, (note, *moved, host_note(record, host), end_of_life_note(record), flags)))
    cell = runs_on(record, table()).label
    return Pulled(record, docker_run_line(record.accelerator.kind, record.digest, host), notes, fit, trust, cell)


def build_repository(ws: Workspace) -> str | None:
    """The repository `builder build` names its images in, here (pull never moves those names);
    None where no matrix stands beside the catalog: no build names to keep."""
    try:
        return ws.matrix.registry
    except UserError:
        return None


def host_platform_first(hits: Sequence[KnownGood], terms: Sequence[Term], check: FitCheck) -> list[KnownGood]:
    """The matches of this host's platform (or of --arch's) first, each group newest first, unless
    the query names a platform: an image name published for amd64 and arm64 pulls the one that runs here."""
    if any(term.key == "platform" for term in terms):
        return list(hits)
    arch = check.host.arch if check.host is not None else fit_hosts.cpu_arch(platform.machine())
    return sorted(hits, key=lambda r: PLATFORM_ARCH.get(r.platform) != arch)


def fit_first(hits: Sequence[KnownGood], check: FitCheck) -> str:
    """The fit check's line for hits[0] (the newest match); RunFailure naming the reason and the
    newest match that fits when it does not fit the host. `unknown` pulls, saying what was not checked."""
    if check.skip:
        return f"fit not checked (--no-fit-check): {hits[0].id} may not run on this host"
    host = check.host if check.host is not None else fit_hosts.detect()
    compat = table()
    verdict = judge(hits[0], host, compat)
    if verdict.status == "does not fit":
        raise RunFailure(f"{verdict.id} does not fit this host: {verdict.reason}; {_instead(hits[1:], host)}")
    if verdict.status == "unknown":
        return f"fit unknown, pulled anyway: {verdict.reason}"
    return f"fits this host: {verdict.reason}"


def _instead(others: Sequence[KnownGood], host: FitHost) -> str:
    compat = table()
    newest = next((r.id for r in others if judge(r, host, compat).status == "fits"), None)
    if newest is None:
        return "no record of the query fits (`builder fit QUERY` says why; --no-fit-check pulls it anyway)"
    return f"the newest that fits is {newest} (`builder pull id={newest}`; --no-fit-check pulls this one anyway)"


def moved_tags(engine: Engine, record: KnownGood, indexes: Mapping[str, IndexRecord]) -> list[str]:
    """A note for each readable tag of `record` (its immutable and floating tags) that the registry
    no longer points at its digest: the pull was by digest, so it got the record's image, but
    whoever pulls the tag gets another. A tag that is the index of a name published for several
    platforms counts as pointing at it when catalog/indexes.json lists that index with this digest."""
    digest = record.digest.partition("@")[2]
    listed = {index.digest.partition("@")[2] for index in indexes.values() if index.platforms.get(record.platform) == record.digest}
    out = []
    for tag in (record.tag, *record.floating):
        if tag.rpartition(":")[0] != record.repository:  # floating tags are not signed: never follow one elsewhere
            out.append(f"note: {tag} is not a tag of {record.repository}; not asked (restore the catalog from git)")
            continue
        try:
            found = engine.registry_digest(tag)
        except EngineFault as exc:
            gone = isinstance(exc, NotFound) or NO_MANIFEST.search(exc.message)
            out.append(
                f"note: {tag} is no longer in the registry (this digest still is)"
                if gone
                else f"note: {tag} could not be checked in the registry: {' '.join(exc.message.split())[:200]}"
            )
            continue
        if found != digest and found not in listed:
            out.append(f"note: {tag} in the registry now points at {found}, not this digest: whoever pulls that tag gets another image")
    return out


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


def name_pulled(engine: Engine, pulled: str, repository: str, tag: str, build_repository: str | None) -> str:
    """Tag the pulled image id as repository:tag where that is safe; a note when the name is left alone,
    RunFailure when it holds an image that is not ours to move."""
    name = f"{repository}:{tag}"
    held = engine.inspect_image(name)
    if held is not None and held.id == pulled:
        return ""
    if build_repository is not None and repository == build_repository:
        return f"not tagged {name}: that is a `builder build` name in this workspace; run the image by its digest"
    if held is not None and not any(d.startswith(f"{repository}@") for d in held.repo_digests):
        raise RunFailure(
            f"pulled and verified the image, but {name} already names another local image ({held.id[:19]}) that did not come from {repository}; "
            "it was left alone: run the image by its digest, or remove that name first (docker rmi)"
        )
    engine.tag(pulled, repository, tag)
    return ""


def _pull_once(engine: Engine, reference: str, log: Callable[[str], None]) -> None:
    try:
        for event in engine.pull(reference):
            if event.error:
                message = redact(event.error)
                if NO_MANIFEST.search(message):
                    raise RunFailure(f"pull of {reference} failed: the registry has no such manifest (deleted?): {message[:200]}")
                if is_network_failure(message):
                    raise PullFlake(message)
                raise RunFailure(f"pull of {reference} failed: {message}")
            if event.text and event.layer is None:
                log(event.text)
    except EngineFault as exc:
        message = reason_of(exc)[:300]
        if isinstance(exc, NotFound) or NO_MANIFEST.search(message):
            raise RunFailure(f"pull of {reference} failed: the registry has no such manifest (deleted?): {message[:200]}") from None
        raise PullFlake(message) from None  # the engine went away or broke the stream: worth another try


def end_of_life_note(record: KnownGood, today: dt.date | None = None) -> str:
    """A warning when one of the image's lines is past the end of life its vendor publishes; a note when a
    framework line is past this project's support window (compat/data/lifecycle.yaml)."""
    dates = lifecycle.past(record_end_of_life(record), today or dt.datetime.now(dt.UTC).date())
    vendor = [e for e in dates if not e.policy]
    window = [e for e in dates if e.policy]
    lines = []
    if vendor:
        lines.append(f"warning: {', '.join(str(e) for e in vendor)} is past: this image gets no more fixes for it; pick a newer line")
    if window:
        lines.append(f"note: {', '.join(str(e) for e in window)} is past; the image still works, a newer line gets this project's builds")
    return "\n".join(lines)


def host_note(record: KnownGood, host: hostinfo.HostInfo) -> str:
    kind = record.accelerator.kind
    if kind == "cuda" and not host.nvidia.has_gpu:
        return "this host has no NVIDIA GPU: the image runs, but only on the CPU here (`builder doctor` says what is missing)"
    if kind == "rocm" and not host.amd.present:
        return "this host has no AMD GPU (/dev/kfd): the image runs, but only on the CPU here"
    if record.gpu_skipped_accepted:
        return "note: this image was published without a GPU run (verdict gpu-skipped)"
    return ""
