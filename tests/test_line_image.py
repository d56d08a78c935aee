"""A CUDA line's NVIDIA image loaded, not built (engine/line_image.py), offline against tests/fake_engine.py.

The base is a bootstrapped one, loaded into the fake from engine/bootstrap.py's own archive, so a
save of it gives back its config as loaded (as an engine does); the NVIDIA layer is a small tar
written by a stand-in for the run's layer maker.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from builder.engine import bootstrap, line_config, line_image
from builder.engine.image_build import BuildFailed, Run
from builder.engine.reproducible import FileLayer, NotAnArchive
from builder.engine.settings import BuildSettings
from builder.lock.layer import NVIDIA_LAYER_NAME
from builder.model.plan import Accelerator, Base, ImageSpec
from builder.render.labels import BUILT_BY_LABEL, LINE_LABEL
from tests.fake_engine import BASE_LAYER, BytesLayer, FakeEngine, layer_tar

LINE = "cuda13-debian12-py3.11-amd64"
BASE = Base("local-cuda13-debian12", "cuda", "debian12", bootstrap="debootstrap")
SPEC = ImageSpec(
    id="cupy14.0.0-cu130-py3.11-debian12",
    tag="reg/x:cupy14.0.0-cu130-py3.11-debian12",
    base=BASE,
    stack="cupy",
    python="3.11",
    frameworks=(("cupy", "14.0.0"),),
    installs=(),
    packages=("cupy-cuda13x==14.0.0",),
    index_urls=(),
    accelerator=Accelerator("cuda", "13.0"),
    line=LINE,
    line_image=f"builder-line/{LINE}:0123456789abcdef",
)
NVIDIA = layer_tar({"opt/venv/lib/python3.11/site-packages/nvidia/cublas/lib/libcublas.so.13": b"cublas"}, 946_684_800)
EPOCH = 1_783_764_997  # the base's mirror date: 2026-07-11T10:16:37Z


def load_base(engine: FakeEngine, tmp_path: Path) -> str:
    """A bootstrapped base in the engine, as ensure_base leaves it; returns its image ID."""
    layer = tmp_path / "base-layer.tar"
    layer.write_bytes(BASE_LAYER)
    recipe = bootstrap.Recipe(arch="amd64", release="bookworm", mirror="http://deb.debian.org/debian")
    config = bootstrap.base_config(recipe, bootstrap.recipe_hash(recipe), EPOCH, "sha256:" + hashlib.sha256(BASE_LAYER).hexdigest())
    image_id = bootstrap.image_archive(layer, tmp_path / "base-image.tar", BASE.from_ref, config)
    engine.load_image(tmp_path / "base-image.tar")
    return image_id


def nvidia_layer(spec: ImageSpec, *, line: bool = False) -> dict[str, BytesLayer]:
    assert line, "the line image asks for its line's layer"
    return {NVIDIA_LAYER_NAME: BytesLayer(NVIDIA)}


def make_run(tmp_path: Path, layers: object = nvidia_layer) -> Run:
    return Run(settings=BuildSettings(), build_dir=tmp_path / "build", lock_dir=tmp_path / "locks", layers=layers)  # type: ignore[arg-type]


def saved_config(engine: FakeEngine, ref: str, tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / "saved.tar"
    engine.save_image(ref, out)
    with tarfile.open(out) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        config: dict[str, Any] = json.loads(tar.extractfile(manifest[0]["Config"]).read())  # type: ignore[union-attr]
    out.unlink()
    return config


def test_two_runs_and_two_engines_load_one_image_id(tmp_path: Path) -> None:
    tag = str(SPEC.line_image)
    ids = []
    for n, engine in enumerate((FakeEngine(), FakeEngine())):
        base_id = load_base(engine, tmp_path)
        for again in (1, 2):
            engine.clock += 86_400 * again  # another day: nothing of the clock reaches the image
            run = make_run(tmp_path / f"e{n}r{again}")
            line_image.ensure(run, engine, SPEC)
            info = engine.inspect_image(tag)
            assert info is not None
            ids.append(info.id)
            assert not engine.builds, "loaded, not built"
            assert engine.saves[-1] == BASE.from_ref
            assert not any(run.staging_root.iterdir()), "nothing left in the staging folder"
            assert "loaded " in (run.log_dir / f"line-{LINE}.log").read_text(encoding="utf-8")
            assert engine.remove_image(tag)
        assert engine.inspect_image(BASE.from_ref) is not None and engine.resolve(BASE.from_ref) == base_id
    assert len(set(ids)) == 1, ids


def test_the_config_is_the_bases_with_one_layer_more(tmp_path: Path) -> None:
    engine = FakeEngine()
    load_base(engine, tmp_path)
    base = saved_config(engine, BASE.from_ref, tmp_path)
    line_image.ensure(make_run(tmp_path), engine, SPEC)
    info = engine.inspect_image(str(SPEC.line_image))
    assert info is not None
    config = saved_config(engine, str(SPEC.line_image), tmp_path)
    body = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    assert info.id == "sha256:" + hashlib.sha256(body).hexdigest(), "the ID is the config's sha256"
    nvidia = "sha256:" + hashlib.sha256(NVIDIA).hexdigest()
    assert info.diff_ids == (*base["rootfs"]["diff_ids"], nvidia), "the layer's diff ID is the tar's sha256"
    base_labels = base["config"]["Labels"]
    assert info.labels == {**base_labels, BUILT_BY_LABEL: "builder", LINE_LABEL: LINE}
    assert config["created"] == base["created"] == "2026-07-11T10:16:37Z", "the base's own date"
    assert config["history"] == [
        *base["history"],
        {"created": base["created"], "created_by": f"ADD nvidia.tar / (builder: the NVIDIA wheels of CUDA line {LINE})"},
    ]
    assert {k: v for k, v in config.items() if k not in ("config", "rootfs", "history")} == {
        k: v for k, v in base.items() if k not in ("config", "rootfs", "history")
    }, "the rest is the base's"
    assert config["config"]["Cmd"] == base["config"]["Cmd"] and config["config"]["Env"] == base["config"]["Env"]


def test_a_base_without_a_date_gives_the_epoch_floor() -> None:
    config = line_config.line_config({"rootfs": {"type": "layers", "diff_ids": ["sha256:a"]}}, LINE, "sha256:b")
    assert config["created"] == "2000-01-01T00:00:00Z" == config["history"][-1]["created"]
    assert config["rootfs"]["diff_ids"] == ["sha256:a", "sha256:b"]
    assert config["config"]["Labels"] == {BUILT_BY_LABEL: "builder", LINE_LABEL: LINE}


def test_an_engine_that_loads_another_id_is_refused(tmp_path: Path) -> None:
    class Rewriting(FakeEngine):
        def load_image(self, archive: Path) -> None:
            super().load_image(archive)
            if self.loads[-1] != self.loads[0]:  # the line image, not the base
                image = self.names[str(SPEC.line_image)]
                self.add_image("sha256:rewritten", str(SPEC.line_image), labels=self.labels[image])

    engine = Rewriting()
    load_base(engine, tmp_path)
    run = make_run(tmp_path)
    with pytest.raises(BuildFailed) as failed:
        line_image.ensure(run, engine, SPEC)
    assert "\n" not in failed.value.message
    assert f"the engine loaded sha256:rewritten as {SPEC.line_image}, not the sha256:" in failed.value.message
    assert failed.value.message.endswith(f"its config names: the engine rewrote it (log: {run.log_dir / f'line-{LINE}.log'})")
    assert engine.inspect_image(str(SPEC.line_image)) is None, "the tag does not stay on the rewritten image"
    assert not any(run.staging_root.iterdir())


def test_an_existing_line_image_is_left_alone(tmp_path: Path) -> None:
    engine = FakeEngine()
    engine.add_image("sha256:made-before", str(SPEC.line_image))
    called: list[str] = []

    def layers(spec: ImageSpec, folder: Path) -> None:
        called.append(spec.id)

    line_image.ensure(make_run(tmp_path, layers), engine, SPEC)
    assert engine.resolve(str(SPEC.line_image)) == "sha256:made-before"
    assert not called and not engine.saves and not engine.loads and not engine.builds


def test_a_layer_that_cannot_be_made_fails_in_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    def broken(spec: ImageSpec, *, line: bool = False) -> dict[str, BytesLayer]:
        raise RuntimeError("nvidia-cublas==13.1.1.3: no wheel\nfor the target")

    engine = FakeEngine()
    load_base(engine, tmp_path)
    run = make_run(tmp_path, broken)
    with pytest.raises(
        BuildFailed, match=rf"^the NVIDIA image of its line {LINE}: nvidia-cublas==13.1.1.3: no wheel for the target \(log: "
    ):
        line_image.ensure(run, engine, SPEC)
    assert engine.inspect_image(str(SPEC.line_image)) is None and len(engine.loads) == 1, "only the base was ever loaded"
    assert not any(run.staging_root.iterdir())


def test_an_interrupt_loads_nothing(tmp_path: Path) -> None:
    engine = FakeEngine()
    load_base(engine, tmp_path)
    run = make_run(tmp_path)

    def interrupted(spec: ImageSpec, *, line: bool = False) -> dict[str, BytesLayer]:
        run.stop.set()  # Ctrl-C while the layer was made
        return nvidia_layer(spec, line=line)

    run.layers = interrupted
    with pytest.raises(BuildFailed, match="interrupted before saving the base"):
        line_image.ensure(run, engine, SPEC)
    assert engine.inspect_image(str(SPEC.line_image)) is None and not engine.saves
    assert not any(run.staging_root.iterdir())


def test_a_saved_layer_that_is_a_link_is_written_as_a_file(tmp_path: Path) -> None:
    """`docker save` may write a layer as a link to another layer's file: the archive holds plain files."""
    saved = tmp_path / "saved.tar"
    diff = "sha256:" + hashlib.sha256(BASE_LAYER).hexdigest()
    config = json.dumps({"created": "2026-07-11T10:16:37Z", "rootfs": {"type": "layers", "diff_ids": [diff, diff]}}).encode()
    manifest = json.dumps([{"Config": "c.json", "RepoTags": [], "Layers": ["a/layer.tar", "b/layer.tar"]}]).encode()
    with tarfile.open(saved, "w") as tar:
        for name, data in (("a/layer.tar", BASE_LAYER), ("c.json", config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("b/layer.tar")
        link.type, link.linkname = tarfile.SYMTYPE, "../a/layer.tar"
        tar.addfile(link)
    (tmp_path / "nvidia.tar").write_bytes(NVIDIA)
    image_id = line_image.line_archive(saved, FileLayer(tmp_path / "nvidia.tar"), tmp_path / "image.tar", "builder-line/x:1", LINE)
    with tarfile.open(tmp_path / "image.tar") as tar:
        assert all(member.isfile() for member in tar.getmembers())
        assert tar.extractfile("b/layer.tar").read() == BASE_LAYER  # type: ignore[union-attr]
    engine = FakeEngine()
    engine.load_image(tmp_path / "image.tar")
    assert engine.resolve("builder-line/x:1") == image_id


def test_a_save_of_two_images_is_refused(tmp_path: Path) -> None:
    saved = tmp_path / "saved.tar"
    manifest = json.dumps([{"Config": "a.json", "Layers": []}, {"Config": "b.json", "Layers": []}]).encode()
    with tarfile.open(saved, "w") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
    (tmp_path / "nvidia.tar").write_bytes(NVIDIA)
    with pytest.raises(NotAnArchive, match="names 2 images, not one"):
        line_image.line_archive(saved, FileLayer(tmp_path / "nvidia.tar"), tmp_path / "image.tar", "builder-line/x:1", LINE)


def test_not_a_line_member_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BuildFailed, match="is not on a CUDA line with a current lock"):
        line_image.ensure(make_run(tmp_path), FakeEngine(), replace(SPEC, line_image=None))
