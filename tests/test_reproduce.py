"""`builder reproduce`, offline (issue 41, part 6): the pure comparison of a rebuild with the signed
attestation (model/reproduced.py: which layer differs first, and what it is), the verdicts file the
catalog and the report read, and the use-case's and the command's refusals before any build: no
query, a key no record has, no match, an unsigned catalog, a signed one without allowed signers, a
record built with RUN, a checkout whose lock or images/<id>/ is not the record's. The rebuild itself
against the real engine and registry is tests/integration/test_reproducible.py."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from builder.catalog.indexes import DOCKER_MANIFEST
from builder.catalog.store import Catalog
from builder.engine.build import Builder
from builder.engine.port import EngineFault
from builder.engine.registry import Manifest
from builder.host import facts as hostinfo
from builder.lock.layer import LAYER_NAME
from builder.model import reproduced
from builder.model.reproduced import Image, Verdict
from builder.publish import attestation, evidence, signing
from builder.report.markdown import render_markdown
from builder.report.model import build_report
from builder.usecases import catalog as catalogs
from builder.usecases import reproduce as reproducing
from builder.util.errors import RunFailure, UserError
from builder.workspace import Store, Workspace
from tests.catalog_fixtures import record
from tests.conftest import RunCli
from tests.fake_engine import BytesLayer, FakeEngine, connect_to, layer_tar
from tests.fake_registry import FakeRegistry
from tests.test_evidence import HOST, ROOT, TESTED, fake, make_key, needs_ssh_keygen, publish, spec

__all__ = ["fake", "spec"]  # tests/test_evidence.py's fixtures: the torch CPU image, published through the in-memory engine

NUMBA = "numba0.68.0-cpu-py3.11-debian12"
VENV_TAR = layer_tar(
    {"opt/venv/pyvenv.cfg": b"venv"}, 946_684_800
)  # a rebuild's venv.tar (the layer's own tests are test_canonical_layer.py's)
BASE = ("sha256:" + "1" * 64, "sha256:" + "2" * 64)
OWN = ("sha256:" + "3" * 64, "sha256:" + "4" * 64, "sha256:" + "5" * 64, "sha256:" + "6" * 64)
STEPS = ("RUN useradd app", "ADD venv.tar /", "COPY hello_gpu.py /usr/local/bin/hello-gpu", "RUN chmod 0755 /usr/local/bin/hello-gpu")
PUBLISHED = Image("sha256:" + "a" * 64, BASE + OWN)


# -- the comparison ------------------------------------------------------------------------------------


def test_the_same_id_and_layers_are_reproduced() -> None:
    outcome, line = reproduced.compare(PUBLISHED, PUBLISHED, 2, "builder-base/debian12:latest", STEPS)
    assert outcome == "reproduced"
    assert line == f"reproduced: image ID {PUBLISHED.image_id} and its 6 layers equal the record's"


def test_a_different_venv_layer_is_named_with_both_diff_ids() -> None:
    other = "sha256:" + "9" * 64
    rebuilt = Image("sha256:" + "b" * 64, BASE + (OWN[0], other, *OWN[2:]))
    outcome, line = reproduced.compare(PUBLISHED, rebuilt, 2, "builder-base/debian12:latest", STEPS)
    assert outcome == "differs"
    assert line == f"differs: layer 3 (the venv layer (ADD venv.tar /)): expected {OWN[1]}, got {other}"


def test_a_different_base_layer_names_the_base_and_a_later_step_its_instruction() -> None:
    other = "sha256:" + "9" * 64
    _, base = reproduced.compare(PUBLISHED, Image("x", (other, *PUBLISHED.diff_ids[1:])), 2, "builder-base/debian12:latest", STEPS)
    assert base.startswith("differs: layer 0 (a layer of the base builder-base/debian12:latest): expected sha256:1111")
    _, step = reproduced.compare(PUBLISHED, Image("x", (*PUBLISHED.diff_ids[:5], other)), 2, "b", STEPS)
    assert step.startswith("differs: layer 5 (the layer of `RUN chmod 0755 /usr/local/bin/hello-gpu`)")


def test_a_missing_or_extra_layer_differs_at_the_first_one_absent() -> None:
    _, shorter = reproduced.compare(PUBLISHED, Image("x", PUBLISHED.diff_ids[:4]), 2, "b", STEPS)
    assert shorter == f"differs: layer 4 (the layer of `COPY hello_gpu.py /usr/local/bin/hello-gpu`): expected {OWN[2]}, got no layer"
    _, longer = reproduced.compare(PUBLISHED, Image("x", (*PUBLISHED.diff_ids, "sha256:" + "7" * 64)), 2, "b", STEPS)
    assert longer.startswith("differs: layer 6 (a layer above the base that the Dockerfile does not name): expected no layer")


def test_equal_layers_but_another_id_is_the_config_and_names_a_label() -> None:
    rebuilt = Image("sha256:" + "b" * 64, PUBLISHED.diff_ids)
    outcome, line = reproduced.compare(PUBLISHED, rebuilt, 2, "b", STEPS, {"io.builder.workspace": ("0123", "4567")})
    assert outcome == "differs"
    assert line.startswith("differs: the config (every one of the 6 layers is equal; image ID expected sha256:aaaa")
    assert line.endswith("; label io.builder.workspace is '0123' published, '4567' rebuilt)")
    assert Verdict("i", "d", outcome, line).short == "differs: the config"


def test_the_layer_steps_of_the_canonical_images_dockerfile() -> None:
    text = (ROOT / "images" / NUMBA / "Dockerfile").read_text(encoding="utf-8")
    steps = reproduced.layer_steps(text)
    assert steps == (
        "RUN useradd --create-home --uid 10001 --user-group --shell /bin/sh app",
        "ADD venv.tar /",
        "COPY hello_gpu.py /usr/local/bin/hello-gpu",
        "RUN chmod 0755 /usr/local/bin/hello-gpu",
    )
    assert reproduced.layer_steps("FROM x\nRUN a \\\n  && RUN b\n# RUN c\nENV A=1\ncopy d /\n") == ("RUN a", "COPY d /")


# -- the verdicts file ---------------------------------------------------------------------------------


def test_verdicts_are_kept_per_record_and_only_for_the_digest_they_were_about(tmp_path: Path) -> None:
    path = tmp_path / "results" / "reproduced.json"
    assert reproduced.load(path) == {}
    first = Verdict("a", "r@sha256:1", "reproduced", "reproduced: ...", "2026-12-06T10:00:00Z")
    reproduced.record(path, first)
    reproduced.record(path, Verdict("b", "r@sha256:2", "differs", "differs: layer 3 (the venv layer (ADD venv.tar /)): ...", "x"))
    known = reproduced.load(path)
    assert known["a"] == first and known["b"].short == "differs: layer 3"
    assert first.short == "reproduced 2026-12-06"
    assert reproduced.current(known, "a", "r@sha256:1") == first
    assert reproduced.current(known, "a", "r@sha256:9") is None, "a record published again is not reproduced yet"
    assert not list(path.parent.glob("*.tmp*")), "written whole, no temporary file left"


def test_a_verdicts_file_that_is_not_ours_is_one_line_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "reproduced.json"
    path.write_text(json.dumps({"schema": 1, "records": {"a": {"digest": "d", "outcome": "yes", "line": "", "checked": ""}}}))
    with pytest.raises(UserError, match="the verdict of 'a' is not one `builder reproduce` writes") as caught:
        reproduced.load(path)
    assert caught.value.file == str(path)


def test_the_catalog_and_the_report_show_the_verdict_of_the_current_digest(tmp_path: Path) -> None:
    one, two = record("numba0.68.0-cpu-py3.11-debian12"), record("torch2.13.0-cpu-py3.11-debian12")
    catalog = Catalog(tmp_path / "catalog")
    catalog.add([one, two], {})
    path = tmp_path / "reproduced.json"
    reproduced.record(path, Verdict(one.id, one.digest, "reproduced", f"reproduced: image ID {PUBLISHED.image_id} ...", "2026-12-06"))
    reproduced.record(path, Verdict(two.id, "elsewhere@sha256:" + "0" * 64, "differs", "differs: layer 0 (...)", "2026-12-06"))
    found = catalogs.listing(catalog, [], None, verdicts=path)
    assert set(found.reproduced) == {one.id}
    assert found.to_json()["reproduced"][one.id]["outcome"] == "reproduced"
    ws = Workspace.locate(str(ROOT / "matrix.yaml"))
    report = build_report(ws.decided, (), {}, [one, two], {}, verdicts=reproduced.load(path))
    assert [v.id for v in report.reproduced] == [one.id]
    assert f"| {one.id.replace('_', chr(92) + '_')} | `{one.digest}` | reproduced: image ID" in render_markdown(report)


# -- the attestation's built image ---------------------------------------------------------------------


def test_the_built_image_is_read_from_the_statement_or_refused() -> None:
    def statement(built: Any) -> str:
        return json.dumps({"predicate": {"built": built}})

    assert attestation.built_image(statement(None), "s") is None
    found = attestation.built_image(statement({"image_id": "sha256:a", "diff_ids": ["sha256:b"], "canonical": True}), "s")
    assert found == attestation.BuiltImage("sha256:a", ("sha256:b",), True)
    with pytest.raises(RunFailure, match="s: predicate.built must be"):
        attestation.built_image(statement({"image_id": "sha256:a", "diff_ids": "sha256:b", "canonical": True}), "s")


# -- the use-case's refusals, before any build ---------------------------------------------------------


def _ws(tmp_path: Path) -> Any:
    return SimpleNamespace(store=Store(tmp_path))


@needs_ssh_keygen
def test_a_record_built_with_run_is_not_reproducible_and_kept_so(
    tmp_path: Path, spec: Any, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(signing.ALLOWED_SIGNERS_ENV, raising=False)
    key, line = make_key(tmp_path, "ci@example.org")
    spec = replace(spec, canonical=None)  # the torch CPU image as it was built before canonical_layers named it
    outcome, catalog = publish(tmp_path, spec, fake, key)
    assert outcome.status == "published", outcome.reason
    (catalog.root / signing.ALLOWED_SIGNERS).write_text(line)
    done = reproducing.reproduce(_ws(tmp_path), catalog, f"id={spec.id}", log=lambda _: None, connect=_no_engine)
    assert done.verdict.outcome == "not reproducible" and not done.verdict.ok
    assert done.verdict.line.startswith("not reproducible: built with RUN")
    assert done.trust == "signatures verified (signed by ci@example.org)"
    assert reproduced.load(Store(tmp_path).reproduced)[spec.id].digest == done.record.digest
    statement = catalog.evidence / evidence.statement_name(spec.id)
    text = statement.read_text()
    changed = text.replace('"canonical": false', '"canonical": true')
    assert changed != text
    statement.write_text(changed)
    with pytest.raises(signing.Unverified, match="attestation"):  # a changed attestation is never believed
        reproducing.reproduce(_ws(tmp_path), catalog, f"id={spec.id}", log=lambda _: None, connect=_no_engine)


def _no_engine(timeout: int = 600) -> Any:
    raise AssertionError("no engine is reached before the checks pass")


def test_an_unsigned_record_is_refused_and_a_missing_query_too(tmp_path: Path, spec: Any, fake: FakeEngine) -> None:
    outcome, catalog = publish(tmp_path, spec, fake, None)
    assert outcome.status == "published", outcome.reason
    with pytest.raises(signing.Unverified, match="compares only with a signed attestation"):
        reproducing.reproduce(_ws(tmp_path), catalog, f"id={spec.id}", log=lambda _: None, connect=_no_engine)
    with pytest.raises(UserError, match="give a query"):
        reproducing.reproduce(_ws(tmp_path), catalog, "", log=lambda _: None, connect=_no_engine)
    assert not Store(tmp_path).reproduced.exists(), "nothing kept of a refusal"


def test_a_checkout_whose_lock_or_context_is_not_the_records_is_refused() -> None:
    ws = Workspace.locate(str(ROOT / "matrix.yaml"))
    (numba,) = ws.hashed(ws.selected(f"id={NUMBA}", use_default=False))
    assert numba.lock is not None
    good = record(NUMBA, lock_sha256=hashlib.sha256(numba.lock.text.encode()).hexdigest(), content_hash=numba.content_hash)
    assert reproducing.checkout_spec(ws, good).id == NUMBA
    with pytest.raises(UserError, match=r"not the record's lock: this checkout's is sha256 .*check out the commit") as caught:
        reproducing.checkout_spec(ws, replace(good, lock_sha256="c" * 64))
    assert str(caught.value.file).endswith(f"images/{NUMBA}/requirements.lock")
    with pytest.raises(UserError, match="same lock, other Dockerfile or files"):
        reproducing.checkout_spec(ws, replace(good, content_hash="sha256:" + "d" * 64))
    with pytest.raises(UserError, match="is not planned by this checkout's matrix.yaml"):
        reproducing.checkout_spec(ws, replace(good, id="numba0.1.0-cpu-py3.11-debian12"))


# -- the command ---------------------------------------------------------------------------------------


@pytest.fixture
def published_unsigned(tmp_path: Path, spec: Any, fake: FakeEngine) -> Path:
    outcome, catalog = publish(tmp_path, spec, fake, None)
    assert outcome.status == "published", outcome.reason
    return catalog.root


@pytest.mark.parametrize(
    ("words", "code", "said"),
    [
        ((), 2, "Missing argument 'QUERY...'"),
        (("nokey=1",), 2, "query key 'nokey' is in no record"),
        (("id=nothing",), 1, "no known-good image matches 'id=nothing'"),
        (("stack=torch",), 1, "compares only with a signed attestation"),
    ],
)
def test_the_commands_refusals_are_one_line_with_the_projects_exit_codes(
    cli: RunCli, published_unsigned: Path, words: tuple[str, ...], code: int, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(signing.ALLOWED_SIGNERS_ENV, raising=False)
    done = cli("--matrix", str(ROOT / "matrix.yaml"), "reproduce", "--catalog", str(published_unsigned), *words)
    assert done.exit_code == code, done.output
    assert said in done.output
    assert len([line for line in done.output.splitlines() if line.startswith("error:")]) == 1


def test_a_signed_catalog_without_its_signers_is_exit_2(cli: RunCli, published_unsigned: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(signing.ALLOWED_SIGNERS_ENV, raising=False)
    (published_unsigned / evidence.EVIDENCE / "x.intoto.json.sig").write_text("signed")  # any signature: the catalog is signed
    done = cli("--matrix", str(ROOT / "matrix.yaml"), "reproduce", "--catalog", str(published_unsigned), "stack=torch")
    assert done.exit_code == 2, done.output
    assert "records are signed; give --allowed-signers" in done.output


# -- the rebuild, against tests/fake_engine.py and tests/fake_registry.py --------------------------------


class Elsewhere:
    """The repository's workspace (its plan, images/ and contexts), its build/ and results in `folder`."""

    def __init__(self, real: Workspace, folder: Path) -> None:
        self._real = real
        self.root = folder
        self.build_dir = folder / "build"
        self.store = Store(folder)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@pytest.fixture
def offline_rebuild(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Any, Any, FakeEngine]:
    """The numba image's workspace (build/ in tmp_path), a fake engine holding its base, builds that
    make the venv layer from nothing (the layer's own tests are tests/test_canonical_layer.py)."""
    monkeypatch.setenv("BUILDER_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setattr(Builder, "ensure_bases", lambda self, specs: {})
    monkeypatch.setattr(
        reproducing,
        "layer_maker",
        lambda specs, settings, folder: lambda spec, line=False: {LAYER_NAME: BytesLayer(VENV_TAR)},
    )
    real = Workspace.locate(str(ROOT / "matrix.yaml"))
    ws = Elsewhere(real, tmp_path)
    (numba,) = real.hashed(real.selected(f"id={NUMBA}", use_default=False))
    engine = FakeEngine()
    engine.add_image("sha256:" + "e" * 64, numba.base.from_ref)
    return ws, numba, engine


def _got(line: str) -> str:
    found = re.search(r"got (sha256:[0-9a-f]{64})", line)
    assert found, line
    return found.group(1)


def test_a_rebuild_is_compared_layer_by_layer_and_removed(offline_rebuild: tuple[Any, Any, FakeEngine]) -> None:
    ws, numba, engine = offline_rebuild
    base = engine.inspect_image(numba.base.from_ref)
    assert base is not None
    rec = record(NUMBA, content_hash=numba.content_hash)
    labels = {"io.builder.workspace": "0123456789abcdef", "org.opencontainers.image.revision": "f" * 40}

    def rebuild(expected: attestation.BuiltImage) -> tuple[Verdict, str]:
        return reproducing._rebuild_and_compare(ws, engine, connect_to(engine), numba, rec, expected, labels, lambda _: None)

    one_layer, note = rebuild(attestation.BuiltImage("sha256:" + "a" * 64, base.diff_ids, True))
    assert one_layer.line.startswith("differs: layer 1 (the layer of `RUN useradd --create-home"), one_layer.line
    assert one_layer.line.endswith(
        "(rebuilt with the published image's io.builder.workspace=0123456789abcdef, org.opencontainers.image.revision=ffffffffffffffffffffffffffffffffffffffff)"
    )
    assert note.startswith("rebuilt with the published image's io.builder.workspace=")
    layers, config, lines = tuple(base.diff_ids), one_layer, []
    while config.line.startswith("differs: layer "):  # each rebuild names the first layer the record lacks
        lines.append(config.line)
        layers = (*layers, _got(config.line))
        config, _ = rebuild(attestation.BuiltImage("sha256:" + "a" * 64, layers, True))
    venv = "sha256:" + hashlib.sha256(VENV_TAR).hexdigest()
    assert lines[1].startswith(f"differs: layer 2 (the venv layer (ADD venv.tar /)): expected no layer, got {venv}"), lines
    assert len(layers) == 5, "the base, useradd, the venv (the host's tar as it is), the probe's COPY and chmod"
    assert config.line.startswith("differs: the config (every one of the 5 layers is equal; image ID expected sha256:aaaa"), config.line
    same, _ = rebuild(attestation.BuiltImage(_got(config.line), layers, True))
    assert same.outcome == "reproduced" and same.line.startswith(f"reproduced: image ID {_got(config.line)} and its 5 layers")
    assert {r.labels["io.builder.workspace"] for r in engine.builds} == {"0123456789abcdef"}, "the published label, not this checkout's"
    assert {r.network_mode for r in engine.builds} == {"none"}
    assert not [n for n in engine.names if n.endswith(("-reproduce", "-unnormalized"))], "the rebuilt image is given back"


def test_a_base_with_other_layers_differs_without_a_build(offline_rebuild: tuple[Any, Any, FakeEngine]) -> None:
    ws, numba, engine = offline_rebuild
    rec = record(NUMBA, content_hash=numba.content_hash)
    other = "sha256:" + "0" * 64
    verdict, _ = reproducing._rebuild_and_compare(
        ws, engine, connect_to(engine), numba, rec, attestation.BuiltImage("x", (other, "y"), True), {}, lambda _: None
    )
    assert verdict.line.startswith(f"differs: layer 0 (a layer of the base {numba.base.from_ref}): expected {other}, got sha256:")
    assert "(not rebuilt: a rebuild is on the layers of this engine's" in verdict.line
    assert engine.builds == []
    engine.remove_image(numba.base.from_ref)
    with pytest.raises(RunFailure, match="is not on this engine; the record was built on"):
        reproducing._rebuild_and_compare(ws, engine, connect_to(engine), numba, rec, attestation.BuiltImage("x", (), True), {}, print)


@needs_ssh_keygen
def test_reproduce_end_to_end_offline_reads_the_published_config_and_keeps_the_verdict(
    offline_rebuild: tuple[Any, Any, FakeEngine], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, numba, engine = offline_rebuild
    monkeypatch.delenv(signing.ALLOWED_SIGNERS_ENV, raising=False)
    monkeypatch.setattr(hostinfo, "gather", lambda **kwargs: HOST)
    engine.add_image(TESTED, numba.tag)
    key, line = make_key(tmp_path, "ci@example.org")
    outcome, catalog = publish(tmp_path, numba, engine, key)
    assert outcome.status == "published", outcome.reason
    (catalog.root / signing.ALLOWED_SIGNERS).write_text(line)
    (rec,) = catalog.load()
    repository, _, digest = rec.digest.partition("@")
    registry = FakeRegistry()
    config = json.dumps({"config": {"Labels": {"io.builder.content-hash": numba.content_hash, "io.builder.workspace": "w"}}}).encode()
    body = json.dumps({"schemaVersion": 2, "config": {"digest": TESTED}}).encode()
    registry.manifests[repository, digest] = Manifest(DOCKER_MANIFEST, digest, body)
    registry.blobs[repository, TESTED] = config
    done = reproducing.reproduce(ws, catalog, f"id={NUMBA}", log=lambda _: None, connect=connect_to(engine), registry=registry)
    assert done.verdict.line.startswith("differs: layer 1 (the layer of `RUN useradd"), done.verdict.line
    assert "io.builder.workspace=w" in done.note
    assert reproduced.load(Store(tmp_path).reproduced)[NUMBA] == done.verdict
    registry.manifests[repository, digest] = Manifest(DOCKER_MANIFEST, digest, json.dumps({"config": {"digest": "sha256:x"}}).encode())
    with pytest.raises(signing.Unverified, match="names config sha256:x, not the attested image"):
        reproducing.reproduce(ws, catalog, f"id={NUMBA}", log=lambda _: None, connect=connect_to(engine), registry=registry)
    registry.fault = EngineFault("127.0.0.1:5000: connection refused")
    with pytest.raises(RunFailure, match="config cannot be read from its registry: 127.0.0.1:5000: connection refused"):
        reproducing.reproduce(ws, catalog, f"id={NUMBA}", log=lambda _: None, connect=connect_to(engine), registry=registry)
