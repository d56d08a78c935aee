"""Multi-platform indexes (issue 19, part 5): one index per image name listing each platform's
digest, put by publish once a name has records for two platforms, kept in catalog/indexes.json;
`pull` takes the host's platform; floating tags never cross platforms. Against tests/fake_registry.py;
the real registry's side is tests/integration/test_engine.py's index test."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from builder.catalog import indexes
from builder.catalog.query import parse_query
from builder.catalog.store import Catalog
from builder.fit.host import FitHost
from builder.model.plan import AMD64, ARM64
from builder.publish.tags import floating_tags
from builder.usecases import publish as publishing
from builder.usecases.pull import FitCheck, host_platform_first
from builder.util.errors import UserError
from tests.catalog_fixtures import record
from tests.fake_registry import FakeRegistry

REPO = "127.0.0.1:5000/gpu-images"
NAME = "numba0.68.0-cpu-py3.11-debian12"
ARM = f"{NAME}-arm64"


@dataclass
class Events:
    lines: list[str] = field(default_factory=list)

    def info(self, text: str) -> None:
        self.lines.append(text)

    def done(self, outcome: publishing.Published) -> None:
        self.lines.append(f"done {outcome.id} {outcome.status}")


def test_an_image_name_is_its_id_without_the_platform_suffix() -> None:
    assert indexes.image_name(ARM, ARM64) == NAME and indexes.image_name(NAME, AMD64) == NAME
    assert indexes.image_name("torch2.14.1-cu130-py3.11-debian12-arm64", ARM64) == "torch2.14.1-cu130-py3.11-debian12"
    assert indexes.image_name(ARM, AMD64) == ARM, "the platform is the record's, never read from the id"


def test_the_index_lists_each_platform_once_in_order_and_is_deterministic() -> None:
    amd = indexes.Entry("linux/amd64", "sha256:" + "a" * 64, 1234, indexes.DOCKER_MANIFEST)
    arm = indexes.Entry("linux/arm64", "sha256:" + "b" * 64, 1240, indexes.DOCKER_MANIFEST)
    media_type, body = indexes.index_body([arm, amd])
    assert media_type == indexes.DOCKER_LIST and indexes.index_body([amd, arm]) == (media_type, body)
    doc = json.loads(body)
    assert doc["schemaVersion"] == 2 and doc["mediaType"] == indexes.DOCKER_LIST
    assert [m["platform"] for m in doc["manifests"]] == [
        {"architecture": "amd64", "os": "linux"},
        {"architecture": "arm64", "os": "linux", "variant": "v8"},
    ]
    assert [(m["digest"], m["size"]) for m in doc["manifests"]] == [(amd.digest, 1234), (arm.digest, 1240)]
    oci = indexes.Entry("linux/arm64", arm.digest, 1240, indexes.OCI_MANIFEST)
    assert indexes.index_body([amd, oci])[0] == indexes.OCI_INDEX, "an OCI manifest among them: an OCI index"
    with pytest.raises(ValueError, match="two or more distinct platforms"):
        indexes.index_body([amd, amd])


def test_floating_tags_keep_the_platform_suffix() -> None:
    assert floating_tags(record(ARM, platform=ARM64).line) == ("numba0.68-cpu-py3.11-debian12-arm64", "numba0.68-cpu-arm64")
    assert floating_tags(record(NAME).line) == ("numba0.68-cpu-py3.11-debian12", "numba0.68-cpu"), "amd64's are unchanged"


def _two_platforms(tmp_path: Path, registry: FakeRegistry) -> Catalog:
    catalog = Catalog(tmp_path / "catalog")
    amd = registry.image(REPO, NAME, "sha256:" + "1" * 64)
    arm = registry.image(REPO, ARM, "sha256:" + "2" * 64)
    catalog.add(
        [record(NAME, digest=f"{REPO}@{amd}"), record(ARM, tag=f"{REPO}:{ARM}", digest=f"{REPO}@{arm}", platform=ARM64, emulated=True)], {}
    )
    return catalog


def test_publish_puts_the_index_of_a_name_with_two_platforms_and_records_it(tmp_path: Path) -> None:
    registry = FakeRegistry()
    catalog = _two_platforms(tmp_path, registry)
    events = Events()
    indexed = publishing.put_index(registry, catalog, REPO, NAME, events)
    assert indexed is not None and indexed.status == "indexed" and indexed.tags == (f"{REPO}:{NAME}",)
    assert publishing.publish_ok([indexed])
    assert registry.puts == [(REPO, NAME, indexes.DOCKER_LIST)]
    put = registry.manifest(REPO, NAME)
    listed = {m["platform"]["architecture"]: m["digest"] for m in json.loads(put.body)["manifests"]}
    records = {r.id: r for r in catalog.load()}
    assert listed == {"amd64": records[NAME].digest.split("@")[1], "arm64": records[ARM].digest.split("@")[1]}
    (index,) = catalog.indexes().values()
    assert index.name == NAME and index.tag == f"{REPO}:{NAME}" and index.digest == f"{REPO}@{put.digest}"
    assert index.platforms == {"linux/amd64": records[NAME].digest, "linux/arm64": records[ARM].digest}
    assert indexed.digest == index.digest and indexed.reason == "index of linux/amd64, linux/arm64"
    again = publishing.put_index(registry, catalog, REPO, NAME, events)
    assert again == indexed and registry.manifest(REPO, NAME).digest == put.digest, "the same records give the same index"


def test_one_platform_or_another_repository_puts_no_index(tmp_path: Path) -> None:
    registry = FakeRegistry()
    catalog = Catalog(tmp_path / "catalog")
    catalog.add([record(NAME, digest=f"{REPO}@{registry.image(REPO, NAME, 'x')}")], {})
    assert publishing.put_index(registry, catalog, REPO, NAME, Events()) is None
    catalog = _two_platforms(tmp_path / "other", registry)
    assert publishing.put_index(registry, catalog, "127.0.0.1:5000/elsewhere", NAME, Events()) is None
    assert registry.puts == [] and catalog.indexes() == {}


def test_a_refused_or_unreadable_index_fails_the_name_and_records_nothing(tmp_path: Path) -> None:
    registry = FakeRegistry()
    catalog = _two_platforms(tmp_path, registry)
    registry.refuse_puts = True
    failed = publishing.put_index(registry, catalog, REPO, NAME, Events())
    assert failed is not None and failed.status == "failed" and failed.id == NAME
    assert f"their index {REPO}:{NAME} is not" in failed.reason and "503" in failed.reason
    assert catalog.indexes() == {}
    registry.refuse_puts = False
    arm = next(r for r in catalog.load() if r.id == ARM)
    del registry.manifests[REPO, arm.digest.split("@")[1]]  # the registry lost the arm64 manifest
    gone = publishing.put_index(registry, catalog, REPO, NAME, Events())
    assert gone is not None and "manifest unknown" in gone.reason and catalog.indexes() == {}


def test_a_damaged_indexes_file_is_one_line_naming_it(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "catalog")
    catalog.root.mkdir()
    catalog.index_file.write_text(
        '{"schema": 1, "indexes": [{"name": "x", "tag": "t", "digest": "nope", "platforms": {}, "published": "d"}]}'
    )
    with pytest.raises(UserError, match="digest must be repository@sha256") as caught:
        catalog.indexes()
    assert str(catalog.index_file) in str(caught.value)
    catalog.index_file.write_text('{"schema": 1, "indexes": {}}')
    with pytest.raises(UserError, match="restore it from git"):
        catalog.indexes()


def test_pull_prefers_the_hosts_platform_unless_the_query_names_one() -> None:
    arm, amd = record(ARM, published="2026-12-02T00:00:00Z", platform=ARM64), record(NAME)
    on_arm = FitCheck(FitHost("arm64", "none", (), None))
    on_amd = FitCheck(FitHost("amd64", "none", (), None))
    assert [r.id for r in host_platform_first([arm, amd], parse_query("numba=0.68"), on_amd)] == [NAME, ARM]
    assert [r.id for r in host_platform_first([amd, arm], parse_query("numba=0.68"), on_arm)] == [ARM, NAME]
    assert [r.id for r in host_platform_first([arm, amd], parse_query("platform=linux/arm64"), on_amd)] == [ARM, NAME]
    assert arm.fields()["platform"] == "linux/arm64" and amd.fields()["platform"] == "linux/amd64"
