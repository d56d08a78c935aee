"""`builder reproduce QUERY`: rebuild a published record from its lock and base, and compare.

The newest record the query matches (the query language of pull and catalog) is checked as `pull`
checks it, failing closed: its signed fields and its attestation against the allowed signers
(publish/verify.py `vouch`; an unsigned catalog is refused, there is no --no-verify). The signed
attestation names the tested image's ID and layers (`predicate.built`); an image it says was not
canonical is `not reproducible: built with RUN` (exit 1). The checkout must hold what the record was
built from: the same requirements.lock (its sha256 is signed) and the same rendered images/<id>/ (the
content hash), else one line says to check out the record's revision (exit 2).

The rebuild is `builder build`'s own, forced, under a tag of its own (`<tag>-reproduce`, removed
afterwards), with one difference: the labels the build adds for the building checkout (its git
revision and its workspace identity, engine/ownership.py) are the published image's, read from its
config in the registry (whose sha256 must be the attested image ID). So a rebuild from another
checkout, or another commit with the same images/<id>/, can give the very image ID; the verdict says
when those labels were not this checkout's. Then image ID and diff IDs are compared
(model/reproduced.py) and the verdict kept in build/results/reproduced.json for `catalog` and `report`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from builder.catalog.query import parse_query
from builder.catalog.records import KnownGood
from builder.catalog.store import Catalog
from builder.engine import leftovers
from builder.engine.build import Builder, git_revision
from builder.engine.client import open_engine
from builder.engine.image_build import Run, build_tag
from builder.engine.ownership import Owner
from builder.engine.port import Connect, Engine, EngineFault, ImageInfo
from builder.engine.registry import HttpRegistry, Registry
from builder.engine.settings import host_ca_bundle
from builder.model import reproduced
from builder.model.plan import ImageSpec
from builder.model.reproduced import Image, Verdict
from builder.publish import attestation, evidence
from builder.publish.signing import Signers, Unverified
from builder.publish.verify import signers, vouch
from builder.render.labels import HASH_LABEL, REVISION_LABEL, WORKSPACE_LABEL
from builder.usecases.build import BuildOptions, build_settings, check_rendered
from builder.usecases.catalog import search
from builder.usecases.layers import layer_maker
from builder.util import fsio
from builder.util.errors import RunFailure, UserError
from builder.util.fsio import MiB, read_bytes
from builder.util.text import utc_stamp
from builder.workspace import Workspace

MAX_CONFIG = 4 * MiB  # an image config (a few KB)
BUILD_LABELS = (REVISION_LABEL, WORKSPACE_LABEL)  # what a build adds for the checkout that builds


@dataclass(frozen=True)
class Reproduced:
    record: KnownGood
    verdict: Verdict
    trust: str  # `signatures verified (signed by P)`
    note: str = ""  # the published labels the rebuild took that are not this checkout's


def reproduce(
    ws: Workspace,
    catalog: Catalog,
    query: str,
    log: Callable[[str], None],
    allowed_signers: Path | None = None,
    connect: Connect = open_engine,
    registry: Registry | None = None,
) -> Reproduced:
    """Rebuild the newest record matching `query` and compare it with its signed attestation; the
    verdict is kept (build/results/reproduced.json) whatever it is, and only once it is whole."""
    terms = parse_query(query)
    if not terms:
        raise UserError("give a query, e.g. `builder reproduce id=numba0.68.0-cpu-py3.11-debian12` (`builder catalog` lists the records)")
    chosen = signers(catalog, allowed_signers, True)
    matched = search(catalog, terms)
    if not matched.hits:
        raise RunFailure(matched.no_match())
    record = matched.hits[0]
    if chosen.path is None:
        raise Unverified(f"record {record.id!r}: {chosen.why}; `builder reproduce` compares only with a signed attestation")
    built, trust = attested(catalog, record, chosen)
    if not built.canonical:
        verdict = Verdict(
            record.id,
            record.digest,
            "not reproducible",
            "not reproducible: built with RUN (matrix.yaml canonical_layers did not name it): its venv was installed by a build step",
            utc_stamp(),
        )
        reproduced.record(ws.store.reproduced, verdict)
        return Reproduced(record, verdict, trust)
    spec = checkout_spec(ws, record)
    config = published_config(registry or HttpRegistry(ca_bundle=host_ca_bundle(os.environ)), record, built)
    labels = _labels(config)
    if labels.get(HASH_LABEL) != record.content_hash:
        raise Unverified(
            f"record {record.id!r}: its published image's content-hash label is not the record's: restore the catalog from git"
        )
    engine = connect()
    try:
        verdict, note = _rebuild_and_compare(ws, engine, connect, spec, record, built, labels, log)
    finally:
        engine.close()
    reproduced.record(ws.store.reproduced, verdict)
    return Reproduced(record, verdict, trust, note)


def attested(catalog: Catalog, record: KnownGood, chosen: Signers) -> tuple[attestation.BuiltImage, str]:
    """The image the record's signed attestation names, and what vouched for it. The statement is
    read before and after its signature is checked: a file changed in between is refused."""
    path = catalog.evidence / evidence.statement_name(record.id)
    before = _statement(path, record)
    trust = vouch(catalog, record, chosen)
    text = _statement(path, record)
    if text != before:
        raise Unverified(f"the attestation of {record.id!r} changed while it was verified; run again")
    built = attestation.built_image(text, str(path))
    if built is None:
        raise RunFailure(
            f"the attestation of {record.id!r} records no built image (published before attestations did): publish it again to reproduce it"
        )
    return built, trust


def _statement(path: Path, record: KnownGood) -> str:
    try:
        return read_bytes(path, 64 * MiB, "attestation").decode("utf-8", errors="replace")
    except UserError as exc:
        raise Unverified(f"record {record.id!r}: {exc}") from None


def checkout_spec(ws: Workspace, record: KnownGood) -> ImageSpec:
    """The planned image the record was built as, in this checkout: its lock and rendered context must be the record's."""
    specs = [s for s in ws.selected(None, use_default=False) if s.id == record.id and s.platform == record.platform]
    fix = "check out the commit that published it (its image's org.opencontainers.image.revision label) and run again"
    if not specs:
        raise UserError(f"{record.id} is not planned by this checkout's matrix.yaml; {fix}", str(ws.matrix_path))
    spec = ws.hashed((specs[0],))[0]
    lock = ws.images_dir / spec.id / "requirements.lock"
    have = hashlib.sha256(spec.lock.text.encode()).hexdigest() if spec.lock else None
    if have != record.lock_sha256:
        said = f"sha256 {have[:12]}..." if have else "none"
        raise UserError(
            f"not the record's lock: this checkout's is {said}, the record's sha256 {str(record.lock_sha256)[:12]}...; {fix}", str(lock)
        )
    if spec.content_hash != record.content_hash:
        raise UserError(
            f"{ws.images_dir.name}/{spec.id}/ renders to content hash {spec.content_hash[:19]}..., the record was built from "
            f"{record.content_hash[:19]}... (same lock, other Dockerfile or files); {fix}",
            str(ws.images_dir / spec.id),
        )
    check_rendered(ws, [spec])
    return spec


def published_config(registry: Registry, record: KnownGood, built: attestation.BuiltImage) -> dict[str, Any]:
    """The published image's config, read from its registry: the manifest of the record's digest
    names it, and its sha256 must be the attested image ID (so its labels are what was signed for)."""
    repository, _, digest = record.digest.partition("@")
    try:
        manifest = registry.manifest(repository, digest)
        doc = json.loads(manifest.body)
        config = doc.get("config", {}).get("digest") if isinstance(doc, dict) and isinstance(doc.get("config"), dict) else None
        if not isinstance(config, str) or built.image_id not in (config, manifest.digest):
            raise Unverified(f"{record.digest}: its registry manifest names config {config}, not the attested image {built.image_id}")
        body = registry.blob(repository, config, MAX_CONFIG)
    except EngineFault as exc:
        raise RunFailure(f"{record.digest}: the published image's config cannot be read from its registry: {exc.message[:200]}") from None
    except ValueError:
        raise RunFailure(f"{record.digest}: its registry manifest is not JSON") from None
    try:
        found = json.loads(body)
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise Unverified(f"{record.digest}: its config is not a JSON object")
    return found


def _labels(config: dict[str, Any]) -> dict[str, str]:
    inner = config.get("config")
    labels = inner.get("Labels") if isinstance(inner, dict) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def _rebuild_and_compare(
    ws: Workspace,
    engine: Engine,
    connect: Connect,
    spec: ImageSpec,
    record: KnownGood,
    built: attestation.BuiltImage,
    labels: dict[str, str],
    log: Callable[[str], None],
) -> tuple[Verdict, str]:
    expected = Image(built.image_id, built.diff_ids)
    steps = reproduced.layer_steps(ws.contexts((spec,))[spec.id]["Dockerfile"].decode("utf-8", errors="replace"))
    base = engine.inspect_image(spec.base.from_ref)
    if base is None:
        raise RunFailure(
            f"the base {spec.base.from_ref} is not on this engine; the record was built on {record.base.id}: load that very image "
            "(docker save / docker load): a base bootstrapped again is another base (docs/reproducible.md)"
        )
    keep = len(base.diff_ids)
    if tuple(expected.diff_ids[:keep]) != base.diff_ids:  # a rebuild is on these layers (the build asserts it): no need to build
        outcome, line = reproduced.compare(
            Image(expected.image_id, expected.diff_ids[:keep]), Image(base.id, base.diff_ids), keep, spec.base.from_ref, steps
        )
        line += f" (not rebuilt: a rebuild is on the layers of this engine's {spec.base.from_ref}, {base.id[:19]}...; the record's base was {record.base.id[:19]}...)"
        return Verdict(record.id, record.digest, outcome, line, utc_stamp()), ""
    owner = Owner(ws.root, ws.build_dir)
    workspace = labels.get(WORKSPACE_LABEL, "")
    revision = labels.get(REVISION_LABEL, "unknown")
    mine = {WORKSPACE_LABEL: owner.identity, REVISION_LABEL: git_revision(ws.root)}
    taken = [f"{k}={v}" for k, v in ((WORKSPACE_LABEL, workspace), (REVISION_LABEL, revision)) if mine[k] != v]
    note = f"rebuilt with the published image's {', '.join(taken)} (this checkout's differ: docs/reproducible.md)" if taken else ""
    rebuild = replace(spec, tag=f"{spec.tag}-reproduce")
    got = _rebuild(ws, engine, connect, rebuild, owner, workspace, revision, log)
    try:
        differ = {k: (labels.get(k), got.labels.get(k)) for k in sorted({*labels, *got.labels}) if labels.get(k) != got.labels.get(k)}
        outcome, line = reproduced.compare(expected, Image(got.id, got.diff_ids), keep, spec.base.from_ref, steps, differ)
    finally:
        engine.remove_image(rebuild.tag)  # the tag only, when the image is also the workspace's own
    if taken:
        line += f" ({note.split(' (')[0]})"
    return Verdict(record.id, record.digest, outcome, line, utc_stamp()), note


def _rebuild(
    ws: Workspace,
    engine: Engine,
    connect: Connect,
    spec: ImageSpec,
    owner: Owner,
    workspace: str,
    revision: str,
    log: Callable[[str], None],
) -> ImageInfo:
    """`builder build`'s build of `spec`, forced, with these build labels; the rebuilt image."""
    for tag in (spec.tag, build_tag(spec)):
        engine.remove_image(tag)  # an earlier, interrupted reproduce's
    chosen = build_settings(ws, BuildOptions())
    owner.register()
    run = Run(
        settings=chosen,
        build_dir=ws.build_dir,
        lock_dir=fsio.lock_dir(),
        revision=revision,
        owner=owner,
        layers=layer_maker([spec], chosen, ws.build_dir / "wheels"),
        workspace=workspace,
    )
    builder = Builder(make_engine=lambda: connect(timeout=3600), run=run, contexts=ws.contexts((spec,)))
    log(f"rebuilding {spec.id} from {ws.images_dir.name}/{spec.id}/ (its lock and base), as `builder build` does")
    try:
        with leftovers.active_run():
            [result] = builder.build_all([spec], jobs=1, force=True, keep_going=False)
        if result.status != "built":
            raise RunFailure(f"the rebuild of {spec.id} failed: {result.error or result.status} (log: {result.log})")
        got = engine.inspect_image(spec.tag)
        if got is None:
            raise RunFailure(f"the rebuild of {spec.id} left no image {spec.tag}")
        return got
    except BaseException:  # a failed or interrupted rebuild leaves no image of its own behind
        with contextlib.suppress(EngineFault):
            for tag in (spec.tag, build_tag(spec)):
                engine.remove_image(tag)
        raise
