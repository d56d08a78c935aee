"""`builder bake`'s use-case (offline): the canonical contexts with the real venv layer made from the
lock, the bake file it hands to `docker buildx bake`, and what it does with what bake loads: each
image normalized under its tag as `builder build` normalizes it. bake itself is a stand-in here
that loads what the bake file names into tests/fake_engine.py (the real one runs in
tests/integration/test_reproducible.py)."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from builder.engine.image_build import build_tag
from builder.lock.layer import LAYER_NAME, NVIDIA_LAYER_NAME, line_layer
from builder.model.plan import ImageSpec
from builder.render import bake
from builder.render.context import PROBE_NAME
from builder.render.labels import WORKSPACE_LABEL
from builder.usecases import bake as baking
from builder.usecases import layers
from builder.util.errors import UserError
from builder.workspace import Workspace
from tests.fake_engine import BytesLayer, FakeEngine, connect_to, layer_tar
from tests.test_line_image import BASE as LINE_BASE
from tests.test_line_image import NVIDIA, load_base

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "numba0.68.0-cpu-py3.11-debian12"
LINE_MEMBER = "cupy14.0.0-cu130-py3.11-debian12"


class Buildx:
    """`docker buildx`: `version` answers; `bake` loads each target it is asked for into the fake
    engine, tagged and labelled as the bake file says: the base, a RUN layer with the clock, the
    context's venv.tar and an empty WORKDIR layer, as BuildKit commits them."""

    def __init__(self, engine: FakeEngine, installed: bool = True) -> None:
        self.engine, self.installed = engine, installed
        self.calls: list[list[str]] = []
        self.doc: dict[str, Any] = {}

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        if argv[:3] == ["docker", "buildx", "version"]:
            return subprocess.CompletedProcess(argv, 0 if self.installed else 1, "github.com/docker/buildx 0.13.1+ds1", "")
        cwd = Path(kwargs["cwd"])
        files = [Path(argv[i + 1]) for i, a in enumerate(argv) if a == "-f"]
        self.doc = json.loads(files[0].read_text(encoding="utf-8"))
        for name in argv[argv.index("plain") + 1 :]:
            target = self.doc["target"][name]
            venv = (cwd / target["context"] / LAYER_NAME).read_bytes()
            dockerfile = (cwd / target["context"] / "Dockerfile").read_text(encoding="utf-8").splitlines()
            below = next(line.split()[-1] for line in dockerfile if line.startswith("FROM "))  # the base, or a CUDA line's image
            layers = [*self.engine._layers(self.engine.names[below]), layer_tar({"etc/passwd": b"app:x:10001"}, 1_765_000_000)]
            with tarfile.open(fileobj=io.BytesIO(venv)) as added:
                rebuilt = layer_tar({n.lstrip("./"): b"as BuildKit commits it" for n in added.getnames()}, 1_765_000_000)
            layers += [rebuilt, layer_tar({}, 1_765_000_000)]  # its own tar of the venv, and WORKDIR's empty layer
            image = self.engine.add_image(
                "sha256:" + hashlib.sha256(venv + name.encode()).hexdigest(), *target["tags"], labels=target["labels"]
            )
            self.engine.layers[image] = layers
            steps = ["RUN /bin/sh -c useradd app # buildkit", "ADD venv.tar / # buildkit", "WORKDIR /home/app"]
            history = [{"created_by": f"base layer {i}"} for i in range(len(layers) - 3)] + [{"created_by": step} for step in steps]
            diff_ids = ["sha256:" + hashlib.sha256(layer).hexdigest() for layer in layers]
            config = {"config": {"Labels": target["labels"]}, "history": history, "rootfs": {"type": "layers", "diff_ids": diff_ids}}
            self.engine.configs[image] = json.dumps(config).encode()
        kwargs["stdout"].write("#12 naming to the tags done\n")
        return subprocess.CompletedProcess(argv, 0)


def _workspace(folder: Path) -> Workspace:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "matrix.yaml", folder / "matrix.yaml")
    shutil.copytree(ROOT / "images", folder / "images")
    return Workspace(folder / "matrix.yaml")


def _engine(spec: ImageSpec) -> FakeEngine:
    engine = FakeEngine()
    engine.add_image("sha256:base", spec.base.from_ref)
    return engine


@pytest.fixture(scope="module")
def baked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workspace, ImageSpec, FakeEngine, Buildx, list[baking.Baked]]:
    ws = _workspace(tmp_path_factory.mktemp("bake") / "repo")
    (spec,) = baking.chosen(ws, f"id={IMAGE}")
    engine = _engine(spec)
    engine.add_image("sha256:" + "0" * 64, spec.tag)  # what the tag named before: replaced
    buildx = Buildx(engine)
    return ws, spec, engine, buildx, baking.bake_images(ws, [spec], None, connect_to(engine), buildx)


def test_bake_loads_each_image_normalized_under_its_tag(baked: tuple[Workspace, ImageSpec, FakeEngine, Buildx, list[baking.Baked]]) -> None:
    ws, spec, engine, buildx, results = baked
    (result,) = results
    loaded = engine.inspect_image(spec.tag)
    assert loaded is not None and result.image_id == loaded.id and result.error is None
    assert engine.inspect_image(build_tag(spec)) is None, "the unnormalized tag is gone"
    assert engine.inspect_image("sha256:" + "0" * 64) is None, "the image the tag named before is removed"
    assert len(result.diff_ids) == 3, "the base, the RUN layer, the venv: the empty WORKDIR layer is left out"
    venv = (ws.build_dir / "bake-canonical" / spec.id / LAYER_NAME).read_bytes()
    assert result.diff_ids[2] == "sha256:" + hashlib.sha256(venv).hexdigest(), "BuildKit's venv layer is the host's tar, as builder build's"
    name = bake.target_name(spec.id)
    bake_call = buildx.calls[-1]
    assert bake_call[:3] == ["docker", "buildx", "bake"] and "--load" in bake_call and bake_call[-1] == name
    assert buildx.doc["target"][name]["tags"] == [build_tag(spec)]
    assert buildx.doc["target"][name]["labels"][WORKSPACE_LABEL], "labelled with the workspace, for `builder clean`"
    assert (ws.build_dir / "logs" / "bake.log").read_text(encoding="utf-8").endswith("done\n")


def test_the_canonical_context_is_what_build_stages(baked: tuple[Workspace, ImageSpec, FakeEngine, Buildx, list[baking.Baked]]) -> None:
    ws, spec, _, buildx, _ = baked
    context = ws.build_dir / "bake-canonical" / spec.id
    assert ws.root / buildx.doc["target"][bake.target_name(spec.id)]["context"] == context
    assert sorted(p.name for p in context.iterdir()) == sorted(
        ["Dockerfile", LAYER_NAME, PROBE_NAME, "requirements.lock", "requirements.txt"]
    )
    assert (context / "Dockerfile").read_bytes() == (ws.images_dir / spec.id / "Dockerfile").read_bytes()
    with tarfile.open(context / LAYER_NAME) as layer:
        names = layer.getnames()
    assert names[:2] == ["opt", "opt/venv"] and "opt/venv/pyvenv.cfg" in names
    network = (context.parent / "network.compose.yaml").read_text(encoding="utf-8")
    assert json.loads(network) == bake.network_file([spec])  # JSON is YAML: bake reads it as a compose file
    assert not [p.name for p in context.parent.iterdir() if p.name.startswith(".")], "no .part or .old folder left"


def test_without_buildx_or_the_base_nothing_runs(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "repo")
    (spec,) = baking.chosen(ws, f"id={IMAGE}")
    engine = _engine(spec)
    with pytest.raises(UserError, match=r"^docker buildx is not installed: bash \.ci/buildx\.sh"):
        baking.bake_images(ws, [spec], None, connect_to(engine), Buildx(engine, installed=False))
    empty = FakeEngine()
    with pytest.raises(UserError, match=rf"^{spec.id}: its base {spec.base.from_ref} is not in the engine"):
        baking.bake_images(ws, [spec], None, connect_to(empty), Buildx(empty))
    assert not (ws.build_dir / "bake-canonical").exists(), "nothing written"


def test_the_selection_is_the_canonical_images(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "repo")
    assert IMAGE in [s.id for s in baking.chosen(ws, None)]
    assert all(s.canonical for s in baking.chosen(ws, None))
    with pytest.raises(UserError, match="is not a canonical image"):
        baking.chosen(ws, "stack=torch")


def test_a_failed_bake_is_named_by_its_last_error_line(tmp_path: Path) -> None:
    log = tmp_path / "bake.log"
    log.write_text("#6 [2/6] RUN useradd\n#6 ERROR: network bridge not found\nERROR: failed to solve: network bridge not found\n\n")
    assert baking._last_error(log) == "ERROR: failed to solve: network bridge not found"
    log.write_text("")
    assert baking._last_error(log) == "no output"


def test_no_docker_cli_is_one_line() -> None:
    def missing(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(argv[0])

    with pytest.raises(UserError, match=r"^no docker CLI on PATH: `builder bake` runs `docker buildx bake`$"):
        baking._has_buildx(missing)


def test_a_line_member_is_baked_on_its_line_image_made_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cuda13 line member (canonical on its line image): bake makes the line's NVIDIA image where the
    engine has none (as `builder build` does), BuildKit builds FROM it, and the normalization keeps its
    two layers (the base's and the NVIDIA layer) as they are."""
    ws = _workspace(tmp_path / "repo")
    (spec,) = baking.chosen(ws, f"id={LINE_MEMBER}")
    assert spec.line_image is not None and line_layer(spec) and spec.base.from_ref == LINE_BASE.from_ref

    def make(spec: ImageSpec, *, line: bool = False) -> dict[str, BytesLayer]:
        return {NVIDIA_LAYER_NAME: BytesLayer(NVIDIA)} if line else {LAYER_NAME: BytesLayer(layer_tar({"opt/venv/pyvenv.cfg": b"x"}, 0))}

    monkeypatch.setattr(baking, "layer_maker", lambda *args: make)
    monkeypatch.setattr(layers, "layer_maker", lambda *args: make)
    engine = FakeEngine()
    load_base(engine, tmp_path)
    (result,) = baking.bake_images(ws, [spec], None, connect_to(engine), Buildx(engine))
    assert result.error is None, result.error
    made = engine.inspect_image(spec.line_image)
    assert made is not None and made.diff_ids[-1] == "sha256:" + hashlib.sha256(NVIDIA).hexdigest()
    assert list(result.diff_ids[:2]) == list(made.diff_ids), "the line image's layers, as they are"
    assert len(result.diff_ids) == 4, "the line image's two, the RUN layer, the venv: the empty WORKDIR layer is left out"
    assert not (ws.build_dir / "staging").exists() or not list((ws.build_dir / "staging").iterdir()), "no staging folder left"
