"""`builder plan --format bake`: a docker-bake.json whose targets are the plan (same ids, tags,
committed contexts, the engine's labels), valid against Bake's published JSON Schema. No Docker."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import dockerfile
import jsonschema  # type: ignore[import-untyped]
import pytest
from click.testing import Result

from builder.engine import image_build
from builder.engine.build import git_revision
from builder.engine.image_build import Run
from builder.engine.settings import BuildSettings
from builder.engine.staging import Staged
from builder.lock.layer import source_date_epoch
from builder.model.plan import ImageSpec, Plan
from builder.render import bake, labels
from builder.render.context import PROBE_NAME
from builder.render.labels import build_labels
from builder.util.errors import UserError
from tests.fake_engine import FakeEngine

RunCli = Callable[..., Result]
SCHEMA = Path(__file__).parent / "fixtures" / "docker-bake.schema.json"  # SchemaStore's; see fixtures/README.md
BAKE_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")  # what bake accepts for target and group names


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(data)
    return data


def plan_bake(cli: RunCli, matrix: Path, *args: str) -> dict[str, Any]:
    result = cli("--matrix", str(matrix), "plan", "--format", "bake", *args)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


@pytest.fixture
def bake_doc(cli: RunCli, root: Path, embedded_matrix_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.chdir(root)  # bake resolves contexts from where it runs: the repository root
    return plan_bake(cli, embedded_matrix_path)


def by_name(plan: Plan) -> dict[str, ImageSpec]:
    """The plan's images bake builds: all but the canonical ones (their venv layer is made by `builder build`)."""
    return {bake.target_name(s.id): s for s in plan.images if not s.canonical}


def test_canonical_images_are_left_out(bake_doc: dict[str, Any], embedded_plan: Plan) -> None:
    canonical = [bake.target_name(s.id) for s in embedded_plan.images if s.canonical]
    assert canonical, "the embedded matrix names canonical images (canonical_layers); this test needs one"
    assert not set(canonical) & set(bake_doc["target"])


def test_targets_are_the_plan(bake_doc: dict[str, Any], embedded_plan: Plan, root: Path) -> None:
    specs = by_name(embedded_plan)
    assert sorted(bake_doc["target"]) == sorted(specs)
    revision = git_revision(root)
    for name, target in bake_doc["target"].items():
        spec = specs[name]
        assert target["tags"] == [spec.tag], name
        assert target["context"] == f"build/bake/{spec.id}", name
        context = root / target["context"]
        assert (context / target["dockerfile"]).is_file(), f"{context}/{target['dockerfile']} is missing"
        committed = json.loads((root / "images" / spec.id / "image.json").read_text(encoding="utf-8"))
        assert target["labels"] == {labels.HASH_LABEL: spec.content_hash, labels.REVISION_LABEL: revision}, name
        assert committed["content_hash"] == spec.content_hash, f"images/{spec.id} is stale: run `builder render`"
        assert target["platforms"] == [spec.platform], name  # what the lock resolves for: x86_64 or aarch64


def test_validates_against_bakes_json_schema(bake_doc: dict[str, Any], schema: dict[str, Any]) -> None:
    validator = jsonschema.Draft7Validator(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(bake_doc)]
    assert errors == []
    broken = json.loads(json.dumps(bake_doc))
    next(iter(broken["target"].values()))["dockerfil"] = "Dockerfile"  # a field bake does not have
    assert not validator.is_valid(broken), "the schema accepts anything: the check above proves nothing"


def test_names_are_bake_names_and_lead_back_to_the_image(bake_doc: dict[str, Any]) -> None:
    for name in [*bake_doc["target"], *bake_doc["group"]]:
        assert BAKE_NAME.fullmatch(name), name
    for name, target in bake_doc["target"].items():
        image_id = target["tags"][0].rsplit(":", 1)[1]
        assert bake.target_name(image_id) == name
    assert not set(bake_doc["target"]) & set(bake_doc["group"])


def test_groups(bake_doc: dict[str, Any], embedded_plan: Plan) -> None:
    specs = by_name(embedded_plan)
    groups = {name: group["targets"] for name, group in bake_doc["group"].items()}
    assert groups["default"] == sorted(specs)
    for base in {s.base.name for s in specs.values()}:
        assert groups[f"base-{bake.target_name(base)}"] == sorted(n for n, s in specs.items() if s.base.name == base)
    for vendor in {s.base.vendor for s in specs.values()}:
        assert groups[f"vendor-{vendor}"] == sorted(n for n, s in specs.items() if s.base.vendor == vendor)
    local = sorted(n for n, s in specs.items() if s.base.bootstrap)
    assert local, "the embedded matrix has bootstrapped bases; this test needs one"
    assert groups[bake.LOCAL_BASE_GROUP] == local
    assert groups[bake.REGISTRY_BASE_GROUP] == sorted(set(specs) - set(local))
    # the Debian 13 CUDA images install with RUN on it (the Debian 12 amd64 ones are canonical: not in this file)
    assert "builder-base/debian13:latest" in bake_doc["group"][bake.LOCAL_BASE_GROUP]["description"]


def test_selection_and_determinism(cli: RunCli, root: Path, embedded_matrix_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(root)
    # a base with images that install with RUN (every Debian 12 amd64 image is canonical: left out without --layers)
    first = cli("--matrix", str(embedded_matrix_path), "plan", "--format", "bake", "--select", "base=local-debian13")
    again = cli("--matrix", str(embedded_matrix_path), "plan", "--format", "bake", "--select", "base=local-debian13")
    assert first.exit_code == 0, first.output
    assert first.stdout == again.stdout
    data = json.loads(first.stdout)
    assert first.stdout == json.dumps(data, indent=2, sort_keys=True) + "\n"
    assert bake.REGISTRY_BASE_GROUP not in data["group"]  # no empty groups
    assert set(data["group"][bake.LOCAL_BASE_GROUP]["targets"]) == set(data["target"])


def test_contexts_are_relative_to_where_bake_runs(
    cli: RunCli, root: Path, embedded_matrix_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "run-here").mkdir()
    monkeypatch.chdir(tmp_path / "run-here")
    data = plan_bake(cli, embedded_matrix_path, "--select", "base=local-debian12", "--contexts", str(tmp_path / "ctx"))
    for target in data["target"].values():
        assert target["context"].startswith("../ctx/")
        assert (tmp_path / "run-here" / target["context"] / "Dockerfile").is_file()


def test_labels_are_the_ones_the_engine_build_adds(embedded_plan: Plan, tmp_path: Path) -> None:
    """The engine's own build path, with a fake engine that records what it is asked to build."""
    fake = FakeEngine()
    spec = embedded_plan.images[0]
    run = Run(settings=BuildSettings(), build_dir=tmp_path, lock_dir=tmp_path, revision="0" * 40)
    image_build._attempt(run, fake, spec, Staged(tmp_path, (), ()), image_build.Served(), tmp_path / "build.log", 1)
    (seen,) = fake.builds
    assert seen.tag == bake.target(spec, "images", run.revision)["tags"][0]
    assert seen.labels == build_labels(spec, run.revision)


def test_every_file_a_dockerfile_copies_is_in_its_bake_context(bake_doc: dict[str, Any], root: Path) -> None:
    """The bake contexts are complete: images/<id>/ as rendered plus the probe `builder build` stages,
    byte for byte, so a remote builder needs nothing else."""
    for name, target in bake_doc["target"].items():
        context = root / target["context"]
        text = (context / target["dockerfile"]).read_text(encoding="utf-8")
        sources = [
            source
            for i in dockerfile.parse_string(text)
            if i.cmd.upper() in ("COPY", "ADD") and not any(f.startswith("--from") for f in i.flags)
            for source in i.value[:-1]
            if not any(c in source for c in "*?[")  # `.builder*`, `.builder/ca.pe[m]`: optional, only `builder build` stages them
        ]
        missing = {s for s in sources if not (context / s).is_file()}
        assert not missing, f"{name}: {sorted(missing)} are not in {target['context']}"
        assert (context / PROBE_NAME).read_bytes() == (root / "builder" / "probes" / PROBE_NAME).read_bytes()
        image = (context / target["dockerfile"]).parent.name
        for committed in (root / "images" / image).iterdir():
            if committed.name not in ("image.json", "fit.json"):  # the plan entry and the measured fit are not built
                assert (context / committed.name).read_bytes() == committed.read_bytes(), f"{image}/{committed.name} differs from images/"


def test_two_ids_on_one_bake_name_are_an_error(embedded_plan: Plan) -> None:
    spec = embedded_plan.images[0]
    with pytest.raises(UserError, match="both become bake name"):
        bake.bake_file([replace(spec, id="a.b"), replace(spec, id="a_b")])


def test_an_unhashed_spec_is_refused(embedded_plan: Plan) -> None:
    with pytest.raises(ValueError, match="no content hash"):
        bake.bake_file([replace(embedded_plan.images[0], content_hash="")])


def test_two_bases_on_one_group_name_are_an_error_not_a_merged_group(embedded_plan: Plan) -> None:
    """Bases `x.y` and `x_y` both sanitise to `base-x_y`: bake would merge their images into one
    group (building one base's group built both), so the plan is refused, naming both bases."""
    spec = embedded_plan.images[0]
    one = replace(spec, id="a-1", base=replace(spec.base, name="x.y", line=3))
    two = replace(spec, id="a-2", base=replace(spec.base, name="x_y", line=9))
    with pytest.raises(UserError, match=r"bases 'x\.y' \(matrix.yaml line 3\) and 'x_y' \(line 9\) both become bake group 'base-x_y'"):
        bake.bake_file([one, two])
    assert bake.bake_file([one])["group"]["base-x_y"]["targets"] == ["a-1"]


def test_contexts_without_bake_is_a_usage_error_not_ignored(cli: RunCli, embedded_matrix_path: Path, tmp_path: Path) -> None:
    """`plan --contexts DIR` with another format wrote nothing and said nothing (second hostile pass)."""
    result = cli("--matrix", str(embedded_matrix_path), "plan", "--format", "json", "--contexts", str(tmp_path / "ctx"))
    assert result.exit_code == 2 and "--contexts goes with --format bake" in result.output
    assert not (tmp_path / "ctx").exists()


# -- canonical images: their contexts carry the venv layer made from the lock (`--layers`) -----------


def test_canonical_targets_carry_their_epoch_and_build_with_the_network_off(embedded_plan: Plan, schema: dict[str, Any]) -> None:
    images = embedded_plan.images
    canonical = next(s for s in images if s.canonical and any(not o.canonical and o.base.name == s.base.name for o in images))
    other = next(s for s in images if not s.canonical and s.base.name == canonical.base.name)
    doc = bake.bake_file([canonical, other], canonical_dir="build/bake-canonical")
    name = bake.target_name(canonical.id)
    assert doc["target"][name]["context"] == f"build/bake-canonical/{canonical.id}"
    assert canonical.lock is not None
    assert doc["target"][name]["args"] == {"SOURCE_DATE_EPOCH": str(source_date_epoch(canonical.lock))}
    assert "args" not in doc["target"][bake.target_name(other.id)]
    assert doc["target"][bake.target_name(other.id)]["context"] == f"images/{other.id}"
    assert doc["group"][bake.CANONICAL_GROUP]["targets"] == [name]
    assert sorted(doc["group"]["default"]["targets"]) == sorted([name, bake.target_name(other.id)])
    assert jsonschema.Draft7Validator(schema).is_valid(doc)
    assert bake.network_file([canonical, other]) == {"services": {name: {"build": {"network": "none"}}}}
    assert name not in bake.bake_file([canonical, other])["target"], "without their contexts they are left out"


def test_layers_without_bake_is_a_usage_error(cli: RunCli, embedded_matrix_path: Path) -> None:
    result = cli("--matrix", str(embedded_matrix_path), "plan", "--format", "json", "--layers")
    assert result.exit_code == 2 and "--layers goes with --format bake" in result.output


def test_bake_refuses_an_image_that_is_not_canonical(cli: RunCli, embedded_matrix_path: Path, embedded_plan: Plan) -> None:
    other = next(s for s in embedded_plan.images if not s.canonical)
    result = cli("--matrix", str(embedded_matrix_path), "bake", "--select", f"id={other.id}")
    assert result.exit_code == 2
    assert f"{other.id} is not a canonical image (matrix.yaml canonical_layers)" in result.output
    assert len(result.output.strip().splitlines()) == 1
