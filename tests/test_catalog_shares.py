"""A record's measured layers above its base (catalog/layers.py) and what of them the catalog's
records of its line share (catalog/shares.py), in `builder catalog` (table and JSON) and the report."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from builder.catalog.layers import ImageLayer
from builder.catalog.records import RecordError, from_json
from builder.catalog.shares import Share, shares
from builder.catalog.store import Catalog
from builder.publish.evidence import signed_fields
from builder.ui.catalog import print_catalog, size_cell
from builder.usecases.catalog import listing
from tests.catalog_fixtures import CUDA13, record

MB = 1_000_000
NVIDIA = ImageLayer("sha256:" + "1" * 64, 2_500 * MB)  # the line's NVIDIA wheels, right above the base
TORCH = ImageLayer("sha256:" + "2" * 64, 1_800 * MB)
JAX = ImageLayer("sha256:" + "3" * 64, 400 * MB)
TORCH_ID = "torch2.14.1-cu130-py3.11-debian12"
JAX_ID = "jax0.9.0-cu130-py3.11-debian12"


def cuda(image_id: str, *layers: ImageLayer, **changes: Any) -> Any:
    return record(image_id, accelerator=CUDA13, layers=layers, **changes)


def test_a_record_with_layers_round_trips_and_its_signature_covers_them() -> None:
    one = cuda(TORCH_ID, NVIDIA, TORCH)
    data = json.loads(json.dumps(one.to_json()))
    assert data["layers"] == [{"diff_id": NVIDIA.diff_id, "size": NVIDIA.size}, {"diff_id": TORCH.diff_id, "size": TORCH.size}]
    assert from_json(data, "x") == one
    assert json.loads(signed_fields(one))["layers"] == data["layers"], "a signed record vouches for its layers"
    assert signed_fields(replace(one, layers=(NVIDIA, replace(TORCH, size=1)))) != signed_fields(one)


def test_a_record_written_before_layers_keeps_its_form_and_signature() -> None:
    old = record(TORCH_ID)
    assert old.layers is None and "layers" not in old.to_json() and "layers" not in signed_fields(old)
    assert from_json(old.to_json(), "x").layers is None
    measured_nothing = record(TORCH_ID, layers=())  # measured: nothing above the base is not "not measured"
    assert measured_nothing.to_json()["layers"] == [] and from_json(measured_nothing.to_json(), "x").layers == ()


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        ([{"diff_id": "sha256:abc", "size": 1}], r"'layers.diff_id' must be sha256:<64 hex>"),
        ([{"diff_id": NVIDIA.diff_id, "size": -1}], r"'layers.size' must be a whole number of bytes"),
        ([{"diff_id": NVIDIA.diff_id, "size": 1.5}], r"'layers.size' must be a whole number of bytes"),
        ([{"diff_id": NVIDIA.diff_id}], r"'layers.size' must be a whole number"),
        ([{"diff_id": NVIDIA.diff_id, "size": 1, "mtime": 0}], r"'layers' has unknown keys mtime"),
        ({"diff_id": NVIDIA.diff_id}, r"'layers' must be a list of objects"),
        ([NVIDIA.to_json()] * 65, r"'layers' must be a list of at most 64 layers; got 65"),
    ],
)
def test_layers_a_hand_edit_broke_are_refused_naming_the_record(layers: Any, message: str) -> None:
    data = {**record(TORCH_ID).to_json(), "layers": layers}
    with pytest.raises(RecordError, match=f"catalog/known-good.json: record '{TORCH_ID}' field {message}"):
        from_json(data, "catalog/known-good.json")


def test_two_records_of_a_line_share_their_nvidia_layer_and_another_line_shares_nothing() -> None:
    torch = cuda(TORCH_ID, NVIDIA, TORCH)
    jax = cuda(JAX_ID, NVIDIA, JAX)
    other_python = cuda("jax0.9.0-cu130-py3.12-debian12", NVIDIA, JAX, python="3.12.8")
    arm = cuda(f"{TORCH_ID}-arm64", NVIDIA, TORCH, platform="linux/arm64")
    other_base = cuda("cupy14.0.0-cu130-py3.11-debian12", NVIDIA, base=replace(torch.base, id="sha256:" + "e" * 64))
    found = shares([torch, jax, other_python, arm, other_base])
    assert found[TORCH_ID] == Share(4_300 * MB, 2_500 * MB, (JAX_ID,))
    assert found[JAX_ID] == Share(2_900 * MB, 2_500 * MB, (TORCH_ID,))
    assert (found[JAX_ID].own, found[TORCH_ID].own) == (400 * MB, 1_800 * MB)
    for alone in (other_python, arm, other_base):
        assert found[alone.id].shared == 0 and found[alone.id].shared_with == (), f"{alone.id} is of another line"
    assert found[TORCH_ID].to_json() == {"above_base_mb": 4300.0, "shared_mb": 2500.0, "own_mb": 1800.0, "shared_with": [JAX_ID]}


def test_a_layer_is_shared_only_on_the_same_layers_beneath() -> None:
    """The engine stores a layer under its chain: the same diff ID on other layers is pulled again."""
    torch = cuda(TORCH_ID, NVIDIA, TORCH)
    torch_alone = cuda("torch2.14.1-cu130-py3.11-debian12-b", TORCH)  # the same venv layer, straight on the base
    found = shares([torch, torch_alone])
    assert found[TORCH_ID].shared == 0 and found[torch_alone.id].shared == 0


def test_an_old_record_shows_nothing_not_zero() -> None:
    old = record(TORCH_ID, accelerator=CUDA13, size_mb=5_400.0)
    jax = cuda(JAX_ID, NVIDIA, JAX, size_mb=3_100.0)
    found = shares([old, jax])
    assert TORCH_ID not in found, "no layers: unknown, not zero"
    assert found[JAX_ID].shared == 0, "a record without layers shares nothing with anyone"
    assert size_cell(old, found.get(TORCH_ID)) == "5,400"
    assert size_cell(jax, found[JAX_ID]) == "3,100 (0)"
    assert size_cell(record(TORCH_ID, size_mb=None), None) == ""


def test_the_catalog_lists_shares_across_the_whole_catalog_in_the_table_and_json(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "catalog")
    old = record("numba0.68.1-cu130-py3.11-debian12", accelerator=CUDA13, size_mb=4_000.0)
    catalog.add([cuda(TORCH_ID, NVIDIA, TORCH, size_mb=4_469.0), cuda(JAX_ID, NVIDIA, JAX, size_mb=3_069.0), old], {})
    found = listing(catalog, ["stack=jax"], None)
    assert [r.id for r in found.records] == [JAX_ID]
    assert found.to_json()["shares"] == {JAX_ID: {"above_base_mb": 2900.0, "shared_mb": 2500.0, "own_mb": 400.0, "shared_with": [TORCH_ID]}}
    everything = listing(catalog, [], None)
    assert set(everything.to_json()["shares"]) == {TORCH_ID, JAX_ID}, "the record without layers has no entry"
    console = Console(record=True, width=400)
    print_catalog(console, everything.records, shares=everything.shares)
    text = console.export_text()
    assert "MB (shared)" in text and "3,069 (2,500)" in text and "4,469 (2,500)" in text
    assert "4,000 " in text and "4,000 (" not in text
