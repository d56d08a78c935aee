"""The report use-case (builder/usecases/report.py) offline: docs/support-matrix.md and
build/report/index.html from what `builder build`, `builder test` and `builder publish` left, run here
on the in-memory engine; each image's status and count, the build sizes, a malformed build.json, a
result the tool cannot vouch for, and the paths the report never replaces.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from builder.catalog.layers import ImageLayer
from builder.catalog.store import Catalog
from builder.host import facts as hostinfo
from builder.render.tree import write_tree
from builder.usecases import build as building
from builder.usecases import publish as publishing
from builder.usecases import report as reporting
from builder.usecases import test as testing
from builder.util.errors import UserError
from builder.workspace import Workspace
from tests.catalog_fixtures import record
from tests.fake_engine import FakeEngine, connect_to
from tests.usecase_fixtures import (
    HOST,
    JAX,
    MATRIX,
    NUMBA,
    OFFLINE,
    REPO,
    BuildEvents,
    Checks,
    Probe,
    PublishEvents,
    TestEvents,
    fake_with_base,
    planned,
)


@dataclass
class Site:
    ws: Workspace
    fake: FakeEngine
    checks: Checks

    @property
    def catalog(self) -> Catalog:
        return self.ws.store.catalog()

    @property
    def markdown(self) -> Path:
        return self.ws.root / "docs" / "support-matrix.md"

    @property
    def html(self) -> Path:
        return self.ws.build_dir / "report" / "index.html"

    def report(self) -> reporting.ReportFiles:
        return reporting.report(self.ws, self.catalog, self.markdown, self.html)

    def row(self, image: str) -> list[str]:
        line = next(line for line in self.markdown.read_text(encoding="utf-8").splitlines() if line.startswith(f"| {image} |"))
        return [cell.strip() for cell in line.strip("|").split("|")]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    (tmp_path / "matrix.yaml").write_text(MATRIX, encoding="utf-8")
    ws = Workspace(tmp_path / "matrix.yaml")
    write_tree(ws.images_dir, ws.rendered_tree())
    fake = fake_with_base(planned(ws))
    checks = Checks(fake)
    monkeypatch.setattr(hostinfo, "gather", lambda **kwargs: HOST)
    monkeypatch.setenv("BUILDER_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setattr(subprocess, "run", checks)
    return Site(ws, fake, checks)


def built_and_tested(site: Site) -> None:
    """numba passes; jax fails its import, with the probe's diagnosis."""
    specs = planned(site.ws)
    site.checks.broken[JAX] = Probe("jax", "ImportError: numpy is broken", cause="numpy 2.4.99 breaks jaxlib", fix="hold numpy<2.4.99")
    building.build_images(site.ws, specs, building.BuildOptions(sources=OFFLINE), BuildEvents(), connect_to(site.fake))
    testing.test_images(site.ws, specs, testing.TestOptions(), TestEvents(), connect_to(site.fake))


def test_a_workspace_with_nothing_built_reports_every_image_not_built(site: Site) -> None:
    files = site.report()
    assert (files.markdown, files.html) == (site.markdown, site.html)
    assert files.counts["not-built"] == 2 and files.counts["passed"] == files.counts["failed"] == files.counts["known-good"] == 0
    assert site.row(JAX)[4] == site.row(NUMBA)[4] == "not-built"
    page = site.html.read_text(encoding="utf-8")
    assert JAX in page and NUMBA in page


def test_the_report_shows_each_verdict_its_diagnosis_and_the_build_size(site: Site) -> None:
    built_and_tested(site)
    files = site.report()
    assert (files.counts["passed"], files.counts["failed"], files.counts["not-built"]) == (1, 1, 0)
    numba, jax = site.row(NUMBA), site.row(JAX)
    assert numba[4] == "passed" and jax[4] == "failed"
    build = json.loads((site.ws.build_dir / "results" / "build.json").read_text(encoding="utf-8"))
    mb = {e["id"]: e["sizes"]["image_mb"] for e in build}
    assert numba[5:7] == ["", "linux/amd64"], "runs on (not published), then the platform"
    assert numba[7] == f"{mb[NUMBA]:,.0f}" and numba[7] != "", "the size column comes from build.json"
    assert numba[5] == "", "runs on: only a published record says"


def test_a_published_image_is_known_good_with_its_digest(site: Site) -> None:
    built_and_tested(site)
    (outcome,) = publishing.publish(
        site.ws, [s for s in planned(site.ws) if s.id == NUMBA], publishing.PublishOptions(registry=REPO), site.catalog, PublishEvents(),
        connect_to(site.fake),
    )  # fmt: skip
    assert outcome.status == "published" and outcome.digest
    files = site.report()
    assert (files.counts["known-good"], files.counts["passed"], files.counts["failed"]) == (1, 0, 1)
    assert site.row(NUMBA)[4] == "known-good" and outcome.digest in site.row(NUMBA)[8]
    assert site.row(NUMBA)[5] == "any (CPU image), amd64 (table)", "the runs-on column of a known-good CPU image"


def test_a_failed_image_shows_its_diagnosis(site: Site) -> None:
    """The probe's diagnosis reaches the row (read back untyped, it was lost: the row said only "failed")."""
    built_and_tested(site)
    site.report()
    assert site.row(JAX)[-1] == "jax: numpy 2.4.99 breaks jaxlib"


@pytest.mark.parametrize(
    "text",
    [
        "[{broken",  # not JSON
        '{"id": "numba"}',  # not a list
        f'[{{"id": "{NUMBA}", "sizes": {{"image_mb": "big"}}}}]',  # not a number
        f'[{{"id": "{NUMBA}", "sizes": {{"venv_mb": 1.0}}}}]',  # no image_mb
        f'[{{"id": "{NUMBA}", "sizes": {{"image_mb": 1.0, "shared_mb": "half"}}}}]',  # shared MB not a number
        f'[{{"id": "{NUMBA}", "sizes": [917]}}]',  # not a mapping
        '["numba", 3, null]',  # entries that are not records
    ],
)
def test_a_malformed_build_json_loses_the_sizes_and_nothing_else(site: Site, text: str) -> None:
    built_and_tested(site)
    good = site.report()
    (site.ws.build_dir / "results" / "build.json").write_text(text, encoding="utf-8")
    again = site.report()
    assert again.counts == good.counts
    assert site.row(NUMBA)[4] == "passed" and site.row(NUMBA)[7] == ""


def test_a_result_the_tool_cannot_vouch_for_counts_as_not_tested(site: Site) -> None:
    """A hand-edited result (its bytes are not the ones the test run recorded) is not shown as a pass."""
    built_and_tested(site)
    result = site.ws.build_dir / "results" / f"{JAX}.json"
    doc = json.loads(result.read_text(encoding="utf-8"))
    result.write_text(json.dumps({**doc, "verdict": "passed"}), encoding="utf-8")
    files = site.report()
    assert site.row(JAX)[4] == "not-built" and (files.counts["passed"], files.counts["failed"]) == (1, 0)


@pytest.mark.parametrize("target", ["matrix", "catalog", "mine"])
def test_the_report_never_replaces_an_input_or_a_file_of_the_users(site: Site, target: str) -> None:
    site.catalog.add([], {})
    mine = site.ws.root / "NOTES.md"
    mine.write_text("mine\n", encoding="utf-8")
    path = {"matrix": site.ws.matrix_path, "catalog": site.catalog.file, "mine": mine}[target]
    before = path.read_bytes() if path.exists() else None
    with pytest.raises(UserError) as caught:
        reporting.report(site.ws, site.catalog, path, site.html)
    assert "\n" not in str(caught.value)
    assert (path.read_bytes() if path.exists() else None) == before
    assert not site.html.exists(), "both files or neither"


def test_a_published_images_shared_mb_is_the_catalogs(site: Site) -> None:
    """The catalog's records of a line share their NVIDIA layer (catalog/shares.py): the report shows it
    beside the record's size; a record without layers shows no shared MB (not zero)."""
    nvidia = ImageLayer("sha256:" + "1" * 64, 2_500_000_000)
    specs = {s.id: s for s in planned(site.ws)}
    numba = record(NUMBA, content_hash=specs[NUMBA].content_hash, layers=(nvidia, ImageLayer("sha256:" + "2" * 64, 90_000_000)))
    site.catalog.add([numba, replace(numba, id=JAX, tag=numba.tag.replace(NUMBA, JAX), layers=(nvidia,))], {})
    site.report()
    assert site.row(NUMBA)[7] == "917 (2,500 shared)" and site.row(JAX)[7] == "917 (2,500 shared)"
    site.catalog.add([replace(numba, id=JAX, tag=numba.tag.replace(NUMBA, JAX), layers=None)], {})
    site.report()
    assert site.row(NUMBA)[7] == "917" and site.row(JAX)[7] == "917", "nothing shared with a record whose layers are unknown"
