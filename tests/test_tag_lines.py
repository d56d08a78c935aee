"""Floating tags are composed from the tag line a spec plans and a record carries (issue 40, item 4),
never parsed out of an image id: the same tags as the id-spelled line for every planned image,
tags for a spec or record whose id spells no line, and records written before the field still read."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from builder.catalog.records import RecordError, from_json
from builder.model.plan import ARM64, TagLine, recorded_tag_line
from builder.publish.tags import floating_tags, newest_of_line
from builder.workspace import Workspace
from tests.catalog_fixtures import record

ROOT = Path(__file__).resolve().parents[1]
ODD_ID = "my-torch-build"  # an id from which no line could be read back
LINE = TagLine("torch", "2.14", "cu130", "3.11", "debian12")


def test_every_planned_image_composes_the_tags_its_id_spells() -> None:
    specs = Workspace.locate(str(ROOT / "matrix.yaml")).plan.images
    lined = [s for s in specs if s.tag_line is not None]
    assert lined and any(s.tag_line and s.tag_line.wheel for s in specs) and any(s.platform == ARM64 for s in lined)
    for spec in specs:
        assert floating_tags(spec.tag_line) == floating_tags(recorded_tag_line(spec.id, spec.platform)), spec.id
        assert (spec.tag_line is None) == (len(spec.frameworks) != 1), spec.id


def test_a_spec_and_a_record_whose_id_spells_no_line_get_their_lines_tags() -> None:
    assert recorded_tag_line(ODD_ID, "linux/amd64") is None
    spec = Workspace.locate(str(ROOT / "matrix.yaml")).plan.images[0]
    assert floating_tags(replace(spec, id=ODD_ID, tag_line=LINE).tag_line) == ("torch2.14-cu130-py3.11-debian12", "torch2.14-cu130")
    arm = record(ODD_ID, platform=ARM64, tag_line=replace(LINE, platform=ARM64, wheel="cu128", accelerator="cu130"))
    assert floating_tags(arm.line) == ("torch2.14-cu128-on-cu130-py3.11-debian12-arm64", "torch2.14-cu128-arm64")
    assert newest_of_line("torch2.14-cu128-arm64", [arm]) is arm
    assert floating_tags(record(ODD_ID).line) == (), "no line recorded and none in the id: no floating tags"


def test_a_recorded_line_round_trips_and_wins_over_the_id() -> None:
    one = record("torch2.13.0-cpu-py3.11-debian12", tag_line=LINE)
    data = json.loads(json.dumps(one.to_json()))
    assert data["tag_line"]["line"] == "2.14" and from_json(data, "c") == one
    assert floating_tags(from_json(data, "c").line)[1] == "torch2.14-cu130"


def test_a_record_written_before_tag_lines_keeps_its_form_and_reads_its_line_from_its_id() -> None:
    old = record("torch2.13.0-cu126-on-cu128-py3.11-ubuntu24.04")
    data = old.to_json()
    assert "tag_line" not in data, "its signed form is unchanged"
    read = from_json(json.loads(json.dumps(data)), "c")
    assert read.tag_line is None and read.line == TagLine("torch", "2.13", "cu128", "3.11", "ubuntu24.04", wheel="cu126")


def test_a_tag_line_of_another_platform_than_its_record_is_refused() -> None:
    data = record("torch2.13.0-cpu-py3.11-debian12", tag_line=replace(LINE, platform=ARM64)).to_json()
    with pytest.raises(RecordError, match="tag_line platform 'linux/arm64' is not its platform 'linux/amd64'"):
        from_json(data, "c")
    data["tag_line"] = {"name": "torch"}
    with pytest.raises(RecordError, match="'tag_line.line' must be text"):
        from_json(data, "c")
