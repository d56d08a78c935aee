"""The catalog use-case (builder/usecases/catalog.py) offline: which catalog a command reads, `find`
and the one-line answers when nothing matches, and `verify` against the in-memory registry: each
record present, missing (deleted), moved to another digest, or not known because the registry failed
(the rest of the registry side, evidence tags and signatures: tests/test_verify_closed.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.catalog.store import Catalog
from builder.engine.port import EngineFault
from builder.publish import attestation, evidence
from builder.publish.signing import Signers
from builder.usecases import catalog as catalogs
from builder.util.errors import UserError
from builder.workspace import Workspace
from tests.catalog_fixtures import record, smoke
from tests.fake_registry import FakeRegistry, published

REPO = "127.0.0.1:5000/gpu-images"
NUMBA = "numba0.68.0-cpu-py3.11-debian12"
JAX = "jax0.10.2-cpu-py3.11-debian12"
TORCH = "torch2.14.1-cpu-py3.11-debian12"
OTHER = "sha256:" + "f" * 64


def digest(n: int) -> str:
    return f"{REPO}@sha256:{str(n) * 64}"


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    store = Catalog(tmp_path / "catalog")
    store.add(
        [
            record(NUMBA, digest=digest(1), frameworks={"numba": "0.68.0"}),
            record(JAX, digest=digest(2), frameworks={"jax": "0.10.2"}),
            record(TORCH, digest=digest(3), frameworks={"torch": "2.14.1"}),
        ],
        {},
    )
    return store


# -- which catalog -----------------------------------------------------------------------------------


def test_the_catalog_is_beside_the_matrix_unless_one_is_named(tmp_path: Path, small_matrix: str) -> None:
    (tmp_path / "matrix.yaml").write_text(small_matrix, encoding="utf-8")
    ws = Workspace(tmp_path / "matrix.yaml")
    assert ws.store.catalog().root == tmp_path / "catalog"
    assert ws.store.catalog().load() == (), "no catalog yet: an empty one (publish creates it)"
    assert ws.store.catalog(str(tmp_path / "elsewhere")).root == tmp_path / "elsewhere"
    assert ws.store.catalog(str(tmp_path / "elsewhere")).load() == (), "publish and nightly create a named folder"
    with pytest.raises(UserError) as caught:
        ws.store.catalog(str(tmp_path / "typo"), must_exist=True).load()
    assert "no such catalog folder" in str(caught.value) and str(tmp_path / "typo") in str(caught.value)


# -- find ---------------------------------------------------------------------------------------------


def test_find_answers_what_matches(catalog: Catalog) -> None:
    assert [r.id for r in catalogs.find(catalog, "numba=0.68.0")] == [NUMBA]
    assert [r.id for r in catalogs.find(catalog, f"id={JAX}")] == [JAX]
    assert [r.id for r in catalogs.find(catalog, "")] == sorted([NUMBA, JAX, TORCH]), "no query: every record"
    assert catalogs.find(catalog, "numba=0.99.0") == []


def test_a_key_no_record_has_is_a_usage_error_listing_the_keys(catalog: Catalog) -> None:
    with pytest.raises(UserError) as caught:
        catalogs.find(catalog, "colour=blue")
    message = str(caught.value)
    assert message.startswith("query key 'colour' is in no record; keys: ") and "numba" in message and "python" in message
    assert "\n" not in message


def test_an_empty_catalog_says_how_records_get_there(tmp_path: Path) -> None:
    empty = Catalog(tmp_path / "catalog")
    assert catalogs.find(empty, "numba=0.68.0") == []
    assert catalogs.no_match_message(empty, "numba=0.68.0") == (
        f"the catalog ({empty.file}) is empty: `builder publish` records known-good images"
    )


def test_no_match_names_the_closest_records_and_how_they_differ(catalog: Catalog) -> None:
    assert catalogs.find(catalog, "numba=0.68.0 python=3.12.1") == []
    message = catalogs.no_match_message(catalog, "numba=0.68.0 python=3.12.1")
    assert message == f"no known-good image matches 'numba=0.68.0 python=3.12.1'; closest: {NUMBA} (differs in python=3.11.2)"


def test_no_match_without_anything_close_points_at_the_listing(catalog: Catalog) -> None:
    """Close: a record that matches some terms, or has every key asked for (with other values)."""
    message = catalogs.no_match_message(catalog, "numba=0.99.0 jax=0.1.0")
    assert message == "no known-good image matches 'numba=0.99.0 jax=0.1.0'; `builder catalog` lists all 3"


def test_a_long_query_is_cut_in_the_message_and_so_is_a_long_list_of_differences(catalog: Catalog) -> None:
    terms = " ".join(f"{key}=x{'y' * 30}" for key in ("id", "stack", "os", "python", "verdict", "digest", "tag"))
    message = catalogs.no_match_message(catalog, terms)
    quoted = message.split("'")[1]
    assert len(quoted) == 200 and quoted.endswith("...")
    assert ", ...)" in message, "more than five differences: the first five, then ..."
    assert "\n" not in message


# -- verify ---------------------------------------------------------------------------------------


def with_evidence(catalog: Catalog) -> Catalog:
    """The catalog's records with unsigned evidence in catalog/evidence/ (an SBOM and the attestation naming it)."""
    files: dict[str, str | None] = {}
    for r in catalog.load():
        sbom = f'{{"bomFormat": "CycloneDX", "for": "{r.id}"}}\n'
        files[evidence.sbom_name(r.id)] = sbom
        files[evidence.statement_name(r.id)] = attestation.statement(r, smoke(r.id), sbom)
    catalog.add([], {}, files)
    return catalog


UNSIGNED = Signers(None, "not verified: the catalog has no signatures and no allowed_signers")


def test_verify_says_for_each_record_whether_the_registry_still_holds_it(catalog: Catalog) -> None:
    records = with_evidence(catalog).load()
    by_id = {r.id: r for r in records}
    registry = published(catalog)
    registry.tag(REPO, JAX, OTHER)  # the immutable tag was moved to another image
    del registry.manifests[REPO, TORCH]  # deleted (or never pushed)
    found = {v.record.id: (v.ok, v.detail) for v in catalogs.verify(catalog, records, UNSIGNED, registry)}
    assert found[NUMBA] == (True, f"{UNSIGNED.why}; the registry's tags match")
    jax = by_id[JAX].digest.split("@")[1]
    assert found[JAX] == (False, f"{REPO}:{JAX}: points at {OTHER}, not the record's {jax}: the tag was moved to another image")
    assert found[TORCH] == (False, f"{REPO}:{TORCH}: not in the registry (deleted?); publish the record again")
    asked = [reference for _, reference in registry.asked]
    assert asked[:3] == [JAX, f"sha256-{jax[7:]}.sbom", f"sha256-{jax[7:]}.att"], "per record: its tag, then its evidence tags"


@pytest.mark.parametrize(
    ("fault", "detail"),
    [
        (EngineFault("127.0.0.1:5000: the registry answered 500 to reading its manifest", 500), "answered 500"),
        (EngineFault("127.0.0.1:5000: the registry cannot be reached: [Errno 111] Connection refused"), "Connection refused"),
        (EngineFault("127.0.0.1:5000: the registry asks for a login (run `docker login 127.0.0.1:5000`)", 401), "docker login"),
    ],
)
def test_a_registry_that_cannot_be_read_is_one_line_per_record(catalog: Catalog, fault: EngineFault, detail: str) -> None:
    records = with_evidence(catalog).load()
    registry = published(catalog)
    registry.fault = fault
    results = catalogs.verify(catalog, records, UNSIGNED, registry)
    for v in results:
        assert not v.ok and v.findings == (f"{REPO}: the registry cannot be read: {fault.message}",) and detail in v.detail


def test_a_long_registry_error_is_cut(catalog: Catalog) -> None:
    (one,) = with_evidence(catalog).load()[:1]
    registry = FakeRegistry()
    registry.fault = EngineFault("x" * 1000, 502)
    (found,) = catalogs.verify(catalog, [one], UNSIGNED, registry)
    assert found.detail == f"{REPO}: the registry cannot be read: " + "x" * 200


def test_verify_of_nothing_asks_nothing(catalog: Catalog) -> None:
    registry = FakeRegistry()
    assert catalogs.verify(catalog, [], UNSIGNED, registry) == [] and registry.asked == []
