"""A canonical member of a CUDA line built FROM the base, its line's NVIDIA layer spliced back in
(engine/image_build.py `_base_below`, engine/reproducible.py `Splice`), offline against
tests/fake_engine.py: the image is the one a build FROM the line's image gives (same ID, same
layers, same config), and `docker save` streams the base and the member's own steps, never the
line's layer.
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

from builder.engine import image_build, line_config, line_image, reproducible
from builder.engine.port import BuildRequest, Progress
from builder.lock.layer import LAYER_NAME, NVIDIA_LAYER_NAME
from builder.model.plan import ImageSpec, Lock
from builder.render.labels import LINE_LABEL
from tests.fake_engine import BASE_LAYER, BytesLayer, FakeEngine, layer_tar
from tests.test_line_image import LINE, NVIDIA, SPEC, load_base, make_run

LOCK = Lock(
    "cupy-cuda13x==14.0.0 \\\n    --hash=sha256:aa\nnvidia-cublas==13.1.1.3 \\\n    --hash=sha256:bb\n",
    "sha256:inputs",
    (("cupy-cuda13x", "14.0.0"), ("nvidia-cublas", "13.1.1.3")),
    (("cupy-cuda13x", ("aa",)), ("nvidia-cublas", ("bb",))),
)
MEMBER = replace(SPEC, lock=LOCK, canonical="reproducible", content_hash="sha256:" + "c" * 64, python_bin="python3.11")
VENV = layer_tar({"opt/venv/lib/python3.11/site-packages/cupy/__init__.py": b"cupy"}, 946_684_800)
DOCKERFILE = (
    f"FROM {MEMBER.line_image}\nLABEL io.builder.built-by=builder\nUSER root\nRUN useradd app\n"
    "ADD venv.tar /\nCOPY hello_gpu.py /usr/local/bin/hello-gpu\nRUN chmod 0755 /usr/local/bin/hello-gpu\nUSER app\n"
)


def make(spec: ImageSpec, *, line: bool = False) -> dict[str, BytesLayer]:
    return {NVIDIA_LAYER_NAME: BytesLayer(NVIDIA)} if line else {LAYER_NAME: BytesLayer(VENV)}


def recording(engine: FakeEngine) -> list[str]:
    """The Dockerfiles the engine is given to build, as it builds them (each build succeeds)."""
    seen: list[str] = []

    def output(request: BuildRequest) -> list[Progress]:
        seen.append((request.path / "Dockerfile").read_text(encoding="utf-8"))
        return [Progress(text="Successfully built 0123456789ab\n")]

    engine.build_output = output
    return seen


def built(engine: FakeEngine, tmp_path: Path) -> tuple[image_build.BuildResult, list[str], list[int]]:
    """The member built on its line image (made first); the Dockerfile the engine was given, and the
    number of layers each `docker save` wrote."""
    tmp_path.mkdir()
    load_base(engine, tmp_path)
    run = make_run(tmp_path, make)
    line_image.ensure(run, engine, MEMBER)
    seen = recording(engine)
    saved: list[int] = []
    save = engine.save_image

    def counted(ref: str, out: Path) -> None:
        save(ref, out)
        with tarfile.open(out) as tar:
            saved.append(len(json.loads(tar.extractfile("manifest.json").read())[0]["Layers"]))  # type: ignore[union-attr]

    engine.save_image = counted  # type: ignore[method-assign]
    result = image_build.build_image(run, engine, MEMBER, {"Dockerfile": DOCKERFILE.encode(), "hello_gpu.py": b""}, force=True)
    return result, seen, saved


def config_of(engine: FakeEngine, image: str | None) -> dict[str, Any]:
    assert image is not None
    config: dict[str, Any] = json.loads(engine.configs[image])
    return config


def test_a_member_built_from_the_base_is_the_image_built_from_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spliced = FakeEngine()
    result, dockerfiles, saved = built(spliced, tmp_path / "a")
    assert result.status == "built", result.error
    assert dockerfiles == [
        DOCKERFILE.replace(f"FROM {MEMBER.line_image}", f"FROM {MEMBER.base.from_ref}").replace(
            "ADD venv.tar /", "LABEL io.builder.layer=venv.tar"
        )
    ], "built FROM the base, the venv step marked"
    assert saved == [4], "the save holds the base and the member's three steps: not the line's layer"
    line = spliced.inspect_image(str(MEMBER.line_image))
    assert line is not None and result.base_id == line.id, "the record names the line image it stands on"

    monkeypatch.setattr(image_build, "_base_below", lambda *args: None)  # as before: the build FROM the line's image
    direct = FakeEngine()
    other, dockerfiles, saved = built(direct, tmp_path / "b")
    assert other.status == "built", other.error
    assert dockerfiles[0].startswith(f"FROM {MEMBER.line_image}\n") and saved == [5]
    assert result.image_id == other.image_id, "one image, whichever way it was built"
    assert config_of(spliced, result.image_id) == config_of(direct, other.image_id)
    image = spliced.inspect_image(MEMBER.tag)
    assert image is not None and image.id == result.image_id
    assert list(image.diff_ids[:2]) == list(line.diff_ids), "on the line's two layers, as they are"
    config = config_of(spliced, result.image_id)
    assert config["config"]["Labels"][LINE_LABEL] == LINE
    assert [h["created_by"] for h in config["history"]][:2] == [config["history"][0]["created_by"], line_config.created_by(LINE)]


def test_a_line_image_that_is_not_its_base_and_one_layer_is_built_from(tmp_path: Path) -> None:
    """A line image made otherwise (another base, more layers): nothing to splice, the build is FROM it."""
    engine = FakeEngine()
    load_base(engine, tmp_path)
    made = engine.add_image("sha256:" + "e" * 64, str(MEMBER.line_image))
    engine.layers[made] = [layer_tar({"other/base": b"x"}, 0), NVIDIA]
    run = make_run(tmp_path, make)
    seen = recording(engine)
    result = image_build.build_image(run, engine, MEMBER, {"Dockerfile": DOCKERFILE.encode(), "hello_gpu.py": b""}, force=True)
    assert result.status == "built", result.error
    assert seen[0].startswith(f"FROM {MEMBER.line_image}\n") and result.base_id == made


def _tar(entries: list[tuple[str, bytes | None, int]]) -> bytes:
    """A layer: (name, file data or None for a directory, mtime), root-owned, 0755 directories."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mtime in entries:
            info = tarfile.TarInfo(name)
            info.mtime = mtime
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _archive(path: Path, layers: list[bytes], history: list[dict[str, Any]]) -> None:
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Labels": {"x": "y"}},
        "created": "2023-11-01T00:00:00Z",
        "history": history,
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest() for layer in layers]},
    }
    names = [f"{n}/layer.tar" for n in range(len(layers))]
    with tarfile.open(path, "w") as tar:
        for name, data in [*zip(names, layers, strict=True), ("c.json", json.dumps(config).encode())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        body = json.dumps([{"Config": "c.json", "RepoTags": ["x:y"], "Layers": names}]).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))


def test_a_directory_that_repeats_one_of_the_line_layer_is_left_out_as_on_the_line(tmp_path: Path) -> None:
    """BuildKit's kind of layer (a directory entry with nothing below it, the one beneath repeated):
    dropped against the spliced layer's directories as against the saved line layer's; the line's
    entries are read once, only because they are needed."""
    line = _tar([("opt/", None, 1), ("opt/venv/", None, 1), ("opt/venv/lib.so", b"nvidia", 1)])
    upper = _tar([("etc/passwd", b"app", 7), ("opt/venv/", None, 99)])
    entry = {"created": "2023-11-01T00:00:00Z", "created_by": line_config.created_by(LINE)}
    step = {"created": "2023-11-01T00:00:00Z", "created_by": "/bin/sh -c useradd app"}
    base_entry = {"created": "2023-11-01T00:00:00Z", "created_by": "mmdebstrap"}
    _archive(tmp_path / "on-line.tar", [BASE_LAYER, line, upper], [base_entry, entry, step])
    _archive(tmp_path / "on-base.tar", [BASE_LAYER, upper], [base_entry, step])
    direct = reproducible.normalize_archive(tmp_path / "on-line.tar", tmp_path / "a.tar", 5, 2, kept_files=False)
    reads: list[int] = []

    def members() -> list[tarfile.TarInfo]:
        reads.append(1)
        with tarfile.open(fileobj=io.BytesIO(line)) as tar:
            return tar.getmembers()

    splice = reproducible.Splice("sha256:" + hashlib.sha256(line).hexdigest(), 1, 1, {"created_by": entry["created_by"]}, {}, members)
    spliced = reproducible.normalize_archive(tmp_path / "on-base.tar", tmp_path / "b.tar", 5, 1, kept_files=False, splice=splice)
    assert spliced == direct and reads == [1]
    with tarfile.open(tmp_path / "b.tar") as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        assert manifest[0]["Layers"][1] not in tar.getnames(), "the spliced layer's file is the engine's, not the archive's"
        config = json.loads(tar.extractfile(manifest[0]["Config"]).read())  # type: ignore[union-attr]
        upper_out = tar.extractfile(manifest[0]["Layers"][2]).read()  # type: ignore[union-attr]
    assert config["rootfs"]["diff_ids"][1] == splice.diff_id
    with tarfile.open(fileobj=io.BytesIO(upper_out)) as layer:
        assert [m.name for m in layer.getmembers()] == ["etc/passwd"], "opt/venv/ repeats the line's"


def test_a_saved_image_not_on_the_base_it_names_is_refused(tmp_path: Path) -> None:
    _archive(tmp_path / "s.tar", [BASE_LAYER], [{"created_by": "mmdebstrap", "empty_layer": True}, {"created_by": "x"}])
    splice = reproducible.Splice("sha256:" + "a" * 64, 1, 1, {"created_by": "line"}, {}, list)
    with pytest.raises(reproducible.NotAnArchive, match="does not start with its base's 1 layers and 1 history entries"):
        reproducible.normalize_archive(tmp_path / "s.tar", tmp_path / "o.tar", 5, 1, kept_files=False, splice=splice)
    with pytest.raises(ValueError, match="kept_files must be off"):
        reproducible.normalize_archive(tmp_path / "s.tar", tmp_path / "o.tar", 5, 1, splice=splice)


@pytest.mark.parametrize(
    "dockerfile", ["FROM other\nRUN x\n", "RUN x\n", "FROM line:1\nFROM line:1\n", "FROM line:1 AS x\n", "FROM platform=y line:1\n"]
)
def test_a_dockerfile_not_from_its_line_image_once_is_refused(dockerfile: str) -> None:
    with pytest.raises(reproducible.NotAnArchive, match=r"does not say `FROM line:1` once"):
        reproducible.from_base(dockerfile, "line:1", "base:latest")
    assert reproducible.from_base("# x\nFROM line:1\nRUN y\n", "line:1", "base:latest") == "# x\nFROM base:latest\nRUN y\n"


def test_an_arm64_members_platform_flag_stays() -> None:
    """An arm64 member's Dockerfile says `FROM --platform=linux/arm64 <line image>` (rendered so)."""
    dockerfile = "FROM --platform=linux/arm64 line:1\nRUN y\n"
    assert reproducible.from_base(dockerfile, "line:1", "base:latest") == "FROM --platform=linux/arm64 base:latest\nRUN y\n"
