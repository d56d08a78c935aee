"""Same lock, same image (offline): the canonical venv layer and the normalized image config.

The layer is made from small wheels written here (a package, a console script, an executable data
file), the builds run against tests/fake_engine.py, whose builds stamp their layer with the clock
and whose saves stamp the config, like the classic builder's.
"""

from __future__ import annotations

import _thread
import base64
import hashlib
import io
import json
import os
import tarfile
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from installer.utils import Scheme

from builder.engine import image_build, reproducible
from builder.engine.build import Builder
from builder.engine.image_build import LayerFailed, Run
from builder.engine.port import BuildRequest, EngineFault, Progress
from builder.engine.settings import BuildSettings
from builder.lock import layer, wheel_tar
from builder.lock.layer import LAYER_NAME, Layout, source_date_epoch
from builder.model.plan import Accelerator, Base, ImageSpec, Lock
from builder.spec.matrix import load_matrix
from builder.util.errors import UserError
from builder.util.text import utc_stamp
from tests.fake_engine import BASE_LAYER, BytesLayer, FakeEngine, image_id_of, layer_tar, write_archive

EPOCH = 1_000_000_000


def make_layer(layout: Layout, wheels: list[Path], epoch: int, out: Path) -> None:
    wheel_tar.venv_layer(layout, wheels, epoch).write(out)


def make_layers(layout: Layout, wheels: list[Path], epoch: int, folder: Path, nvidia: bool) -> None:
    """The layers as `builder build` makes them, each written to `folder` (as bake's contexts have them)."""
    for name, made in wheel_tar.venv_layers(layout, wheels, epoch, nvidia).items():
        made.write(folder / name)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(folder: Path, name: str = "toy", version: str = "1.0") -> Path:
    """A wheel with a module, a console script and an executable file in its data scheme."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"VALUE = 42\n",
        f"{name}/cli.py": b"def main():\n    print('hi')\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": f"[console_scripts]\n{name} = {name}.cli:main\n".encode(),
        f"{name}-{version}.data/scripts/{name}-tool": b"#!python\nprint('tool')\n",
    }
    return _zip_wheel(folder / f"{name}-{version}-py3-none-any.whl", files, info)


def _zip_wheel(path: Path, files: dict[str, bytes], info: str) -> Path:
    """`files` and their RECORD as the wheel `path` (fixed dates; `*-tool` files executable)."""
    record = "\n".join([*(_record_line(n, d) for n, d in files.items()), f"{info}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(path, "w") as whl:
        for entry, data in [*files.items(), (f"{info}/RECORD", record.encode())]:
            zinfo = zipfile.ZipInfo(entry, (2024, 1, 1, 0, 0, 0))
            zinfo.external_attr = (0o755 if entry.endswith("-tool") else 0o644) << 16
            whl.writestr(zinfo, data)
    return path


def _layer(tmp_path: Path, label: str, umask: int) -> tuple[bytes, Path]:
    work = tmp_path / label
    (work / "wheels").mkdir(parents=True)
    wheel = make_wheel(work / "wheels")
    old = os.umask(umask)
    try:
        make_layer(Layout("3.11", "python3.11"), [wheel], EPOCH, work / LAYER_NAME)
    finally:
        os.umask(old)
    return (work / LAYER_NAME).read_bytes(), work


def test_the_layer_is_the_same_bytes_from_other_folders_and_umasks(tmp_path: Path) -> None:
    first, _ = _layer(tmp_path, "one", 0o022)
    second, _ = _layer(tmp_path, "two-with-a-longer-name", 0o077)
    assert first == second


def test_the_layer_names_no_host_path_and_is_canonical(tmp_path: Path) -> None:
    data, work = _layer(tmp_path, "host", 0o002)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        assert names == sorted(names, key=str.encode)
        assert names[:2] == ["opt", "opt/venv"]
        for member in members:
            assert (member.mtime, member.uid, member.gid, member.uname, member.gname) == (EPOCH, 0, 0, "", ""), member.name
            expected = 0o777 if member.issym() else 0o755 if member.isdir() else None
            if expected is not None:
                assert member.mode == expected, member.name
            else:
                assert member.mode in (0o644, 0o755), member.name
            if member.isfile():
                body = tar.extractfile(member)
                assert body is not None
                assert str(tmp_path).encode() not in body.read(), f"{member.name} names the build host's folder"
            if member.issym():
                assert str(tmp_path) not in member.linkname
        by_name = {m.name: m for m in members}
        script = by_name["opt/venv/bin/toy"]
        assert script.mode == 0o755
        body = tar.extractfile(script)
        assert body is not None and body.read().startswith(b"#!/opt/venv/bin/python\n")
        assert by_name["opt/venv/lib/python3.11/site-packages/toy/__init__.py"].mode == 0o644
        assert by_name["opt/venv/bin/python3.11"].linkname == "/usr/bin/python3.11"
        assert by_name["opt/venv/bin/python"].linkname == "python3.11"
        cfg = tar.extractfile("opt/venv/pyvenv.cfg")
        assert cfg is not None and b"home = /usr/bin\n" in cfg.read()
        record = tar.extractfile("opt/venv/lib/python3.11/site-packages/toy-1.0.dist-info/RECORD")
        assert record is not None and b"../../../bin/toy," in record.read()  # relative to site-packages, never the host's root
        assert not [n for n in names if n.endswith(".pyc")], "no byte-compiled files"


def test_the_layer_is_made_from_the_wheels_with_nothing_written_but_its_tar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No tree is installed on the build host (so no host path can reach a file): the wheels' members
    are read into the tar as it is written, and nothing else is written, not even in the temp folder."""
    for folder in ("wheels", "temp", "cwd", "out"):
        (tmp_path / folder).mkdir()
    wheel = make_wheel(tmp_path / "wheels")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "temp"))
    monkeypatch.chdir(tmp_path / "cwd")
    make_layer(Layout("3.11", "python3.11"), [wheel], EPOCH, tmp_path / "out" / LAYER_NAME)
    assert [p.name for p in (tmp_path / "out").iterdir()] == [LAYER_NAME]
    assert not [*(tmp_path / "temp").iterdir()] and not [*(tmp_path / "cwd").iterdir()]
    assert [p.name for p in (tmp_path / "wheels").iterdir()] == [wheel.name]


def _lying_wheel(folder: Path, body: bytes, listed: bytes | None) -> Path:
    """A wheel whose RECORD lists `toy/data.bin` with the sha256 of `listed` (not at all with None)."""
    info = "toy-1.0.dist-info"
    files = {
        "toy/data.bin": body,
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: toy\nVersion: 1.0\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    lines = [_record_line(n, d) for n, d in files.items() if n != "toy/data.bin"]
    if listed is not None:
        lines.append(_record_line("toy/data.bin", listed))
    record = "\n".join([*lines, f"{info}/RECORD,,"]) + "\n"
    path = folder / "toy-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for entry, data in [*files.items(), (f"{info}/RECORD", record.encode())]:
            whl.writestr(zipfile.ZipInfo(entry, (2024, 1, 1, 0, 0, 0)), data)
    return path


def test_a_file_whose_bytes_are_not_the_ones_its_record_lists_refuses_the_layer_and_leaves_no_tar(tmp_path: Path) -> None:
    """The layer's RECORD takes each file's sha256 from the wheel's RECORD (the member is not inflated
    twice), so the bytes are checked against it as they pass into the tar: a wheel that lies fails."""
    body = b"x" * (3 * wheel_tar.COPY_BUFFER + 7)  # read in several pieces
    out = tmp_path / LAYER_NAME
    with pytest.raises(
        layer.LayerError, match=r"^opt/venv/lib/python3.11/site-packages/toy/data.bin: its bytes in .*toy-1.0-py3-none-any.whl"
    ):
        make_layer(Layout("3.11", "python3.11"), [_lying_wheel(tmp_path, body, body[:-1] + b"y")], EPOCH, out)
    assert not out.exists(), "a refused layer's tar was left"
    for listed in (body, None):  # the truth, or not listed: then its bytes are hashed here
        make_layer(Layout("3.11", "python3.11"), [_lying_wheel(tmp_path, body, listed)], EPOCH, out)
        with tarfile.open(out) as tar:
            data = tar.extractfile("opt/venv/lib/python3.11/site-packages/toy/data.bin")
            record = tar.extractfile("opt/venv/lib/python3.11/site-packages/toy-1.0.dist-info/RECORD")
            assert data is not None and data.read() == body
            assert record is not None and _record_line("toy/data.bin", body).encode() in record.read()


def test_a_wheel_whose_member_is_damaged_refuses_the_layer_in_one_line(tmp_path: Path) -> None:
    """A member that does not inflate to its zip CRC (the wheel changed after its sha256 was checked)."""
    body = b"0123456789abcdef" * 4096
    wheel = _lying_wheel(tmp_path, body, body)
    data = wheel.read_bytes()
    at = data.index(body[:64])  # stored, not deflated: the member's bytes are in the file as they are
    wheel.write_bytes(data[:at] + b"X" + data[at + 1 :])
    out = tmp_path / LAYER_NAME
    with pytest.raises(layer.LayerError, match=r"^opt/venv/lib/python3.11/site-packages/toy/data.bin: .*whl cannot be read \(Bad CRC-32"):
        make_layer(Layout("3.11", "python3.11"), [wheel], EPOCH, out)
    assert not out.exists()


def test_installer_refuses_a_wheel_path_outside_its_scheme_folder(tmp_path: Path) -> None:
    """The layer's destination names paths in strings (not pathlib, for speed), with installer's refusal kept."""
    layout = Layout("3.11", "python3.11")
    dest = wheel_tar._Destination(wheel_tar._Tree(), layout)
    assert dest.name_of(Scheme("purelib"), "toy/__init__.py") == "opt/venv/lib/python3.11/site-packages/toy/__init__.py"
    for outside in ("../../../../../etc/passwd", "/etc/passwd", "../site-packages-evil/x.py"):
        with pytest.raises(ValueError, match="outside of the target directory"):
            dest.name_of(Scheme("purelib"), outside)


def test_the_epoch_is_the_locks() -> None:
    lock = Lock("numba==0.68.0 --hash=sha256:aa\n", "sha256:x", (("numba", "0.68.0"),))
    epoch = source_date_epoch(lock)
    assert epoch == source_date_epoch(replace(lock))  # the same text, the same epoch
    assert epoch != source_date_epoch(replace(lock, text=lock.text + "numpy==2.4.6\n"))
    assert layer.EPOCH_FLOOR <= epoch < layer.EPOCH_FLOOR + 2**28
    assert epoch == layer.EPOCH_FLOOR + int(hashlib.sha256(lock.text.encode()).hexdigest()[:7], 16)


# -- a CUDA lock: its NVIDIA library wheels in a layer of their own, below the venv's ----------------
def library_wheel(folder: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A wheel of `files` (NVIDIA's library wheels put theirs under nvidia/), with its dist-info."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    body = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-manylinux_2_17_x86_64\n",
    }
    return _zip_wheel(folder / f"{dist}-{version}-py3-none-manylinux_2_17_x86_64.whl", body, info)


def _split(tmp_path: Path, label: str, epoch: int, other: str) -> Path:
    work = tmp_path / label
    (work / "wheels").mkdir(parents=True)
    wheels = [
        library_wheel(work / "wheels", "nvidia-cublas", "13.1.1.3", {"nvidia/cu13/lib/libcublas.so.13": b"\x7fELF cublas"}),
        library_wheel(work / "wheels", "nvidia-cuda-runtime", "13.0.96", {"nvidia/cu13/lib/libcudart.so.13": b"\x7fELF cudart"}),
        make_wheel(work / "wheels", other),  # the framework's own: another per image
    ]
    make_layers(Layout("3.11", "python3.11"), wheels, epoch, work, nvidia=True)
    return work


def test_the_nvidia_wheels_are_a_layer_of_their_own_the_same_for_every_lock(tmp_path: Path) -> None:
    one, two = _split(tmp_path, "one", EPOCH, "toy"), _split(tmp_path, "two", EPOCH + 12345, "other")
    assert (one / layer.NVIDIA_LAYER_NAME).read_bytes() == (two / layer.NVIDIA_LAYER_NAME).read_bytes(), (
        "another lock, the same NVIDIA wheels"
    )
    assert (one / LAYER_NAME).read_bytes() != (two / LAYER_NAME).read_bytes()
    with tarfile.open(one / layer.NVIDIA_LAYER_NAME) as tar:
        members = tar.getmembers()
    site = "opt/venv/lib/python3.11/site-packages"
    assert [m.name for m in members][:5] == ["opt", "opt/venv", "opt/venv/lib", "opt/venv/lib/python3.11", site]
    assert {m.mtime for m in members} == {layer.EPOCH_FLOOR}, "nothing of the lock in the NVIDIA layer"
    assert all(m.name.startswith((f"{site}/nvidia", f"{site}/nvidia_")) for m in members[5:]), [m.name for m in members]
    assert f"{site}/nvidia/cu13/lib/libcudart.so.13" in {m.name for m in members}
    with tarfile.open(one / LAYER_NAME) as tar:
        names, mtimes = tar.getnames(), {m.mtime for m in tar.getmembers()}
    assert not [n for n in names if "nvidia" in n] and f"{site}/toy/__init__.py" in names and "opt/venv/pyvenv.cfg" in names
    assert mtimes == {EPOCH}


def test_only_a_lock_with_nvidia_wheels_is_two_layers() -> None:
    assert not layer.nvidia_layer(LOCK)
    assert layer.nvidia_layer(replace(LOCK, pins=(*LOCK.pins, ("nvidia-cuda-nvrtc", "13.0.88"))))
    assert not layer.nvidia_layer(replace(LOCK, pins=(("cuda-toolkit", "13.0.3.0"), ("cuda-bindings", "13.5.0"))))
    assert [layer.is_nvidia(n) for n in ("nvidia-cudnn-cu13", "NVIDIA_NCCL_CU13", "cuda-pathfinder", "cupy-cuda13x")] == [
        True,
        True,
        False,
        False,
    ]


def test_an_nvidia_wheel_with_files_outside_nvidia_or_an_overlap_is_refused(tmp_path: Path) -> None:
    odd = library_wheel(tmp_path, "nvidia-odd", "1.0", {"nvidia/lib/libodd.so": b"x", "odd_helper.py": b"print(1)\n"})
    with pytest.raises(
        layer.LayerError, match=r"^nvidia_odd-1.0-py3-none-manylinux_2_17_x86_64.whl installs odd_helper.py, outside nvidia/"
    ):
        make_layers(Layout("3.11", "python3.11"), [odd], EPOCH, tmp_path, nvidia=True)
    lib = library_wheel(tmp_path, "nvidia-lib", "1.0", {"nvidia/lib/libx.so": b"x"})
    clash = library_wheel(tmp_path, "framework", "1.0", {"nvidia/lib/libx.so": b"y", "framework/__init__.py": b""})
    with pytest.raises(
        layer.LayerError, match=r"^opt/venv/lib/python3.11/site-packages/nvidia/lib/libx.so is installed by an NVIDIA wheel and"
    ):
        make_layers(Layout("3.11", "python3.11"), [lib, clash], EPOCH, tmp_path, nvidia=True)
    assert not (tmp_path / layer.NVIDIA_LAYER_NAME).exists() and not (tmp_path / LAYER_NAME).exists(), "nothing half-written"


def test_a_file_two_wheels_ship_alike_is_installed_once_and_other_bytes_are_refused(tmp_path: Path) -> None:
    """NVIDIA's CUDA 12 wheels each ship the empty namespace `nvidia/__init__.py` (found making
    tensorflow cu125's layer: installer refused the second copy, pip and uv overwrite it)."""
    cupti = library_wheel(
        tmp_path, "nvidia-cuda-cupti-cu12", "12.5.82", {"nvidia/__init__.py": b"", "nvidia/cuda_cupti/lib/libcupti.so.12": b"c"}
    )
    cublas = library_wheel(
        tmp_path, "nvidia-cublas-cu12", "12.5.3.2", {"nvidia/__init__.py": b"", "nvidia/cublas/lib/libcublas.so.12": b"b"}
    )
    layouts = []
    for order, wheels in (("ab", [cupti, cublas]), ("ba", [cublas, cupti])):
        (tmp_path / order).mkdir()
        make_layers(Layout("3.11", "python3.11"), wheels, EPOCH, tmp_path / order, nvidia=True)
        layouts.append((tmp_path / order / layer.NVIDIA_LAYER_NAME).read_bytes())
    assert layouts[0] == layouts[1], "the same layer whatever the order"
    with tarfile.open(fileobj=io.BytesIO(layouts[0])) as tar:
        assert tar.getnames().count("opt/venv/lib/python3.11/site-packages/nvidia/__init__.py") == 1
    other = library_wheel(tmp_path, "nvidia-odd-cu12", "1.0", {"nvidia/__init__.py": b"# not empty\n", "nvidia/odd/lib/libodd.so": b"o"})
    (tmp_path / "clash").mkdir()
    with pytest.raises(layer.LayerError, match=r"nvidia/__init__.py is installed by another wheel with other content"):
        make_layers(Layout("3.11", "python3.11"), [cupti, other], EPOCH, tmp_path / "clash", nvidia=True)


# -- the image: the config and the layers above the base normalized --------------------------------
LOCK = Lock("numba==0.68.0 \\\n    --hash=sha256:aa\n", "sha256:inputs", (("numba", "0.68.0"),), (("numba", ("aa",)),))
SPEC = ImageSpec(
    id="numba0.68.0-cpu-py3.11-debian12",
    tag="reg/x:numba0.68.0-cpu-py3.11-debian12",
    base=Base("local-debian12", "cpu", "debian12", bootstrap="debootstrap"),
    stack="numba",
    python="3.11",
    frameworks=(("numba", "0.68.0"),),
    installs=(),
    packages=("numba==0.68.0",),
    index_urls=(),
    accelerator=Accelerator("cpu", None),
    content_hash="sha256:" + "c" * 64,
    python_bin="python3.11",
    lock=LOCK,
    canonical="reproducible",
)


def test_two_saves_of_two_builds_normalize_to_one_image_id(tmp_path: Path) -> None:
    engine = FakeEngine()
    ids = []
    for n in (1, 2):
        engine.clock += 1000 * n  # another day, another build
        made = engine.add_image(f"sha256:{n}" * 1, SPEC.tag)
        engine.layers[made] = [BASE_LAYER, layer_tar({"etc/passwd": b"app:x:10001"}, engine.clock)]
        saved, out = tmp_path / f"saved{n}.tar", tmp_path / f"out{n}.tar"
        engine.save_image(SPEC.tag, saved)
        ids.append(reproducible.normalize_archive(saved, out, EPOCH, keep=1))
        with tarfile.open(out) as tar:
            manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
            config = json.loads(tar.extractfile(manifest[0]["Config"]).read())  # type: ignore[union-attr]
            base = tar.extractfile(manifest[0]["Layers"][0]).read()  # type: ignore[union-attr]
        assert base == BASE_LAYER, "the base's layers are left as they are"
        assert config["created"] == utc_stamp(EPOCH) and {h["created"] for h in config["history"]} == {utc_stamp(EPOCH)}
        assert not set(reproducible.DROPPED) & set(config)
        assert config["config"]["Image"] == "", "the build's previous step image is not the image's"
    assert ids[0] == ids[1]


def test_a_canonical_build_is_offline_and_its_id_is_the_locks(tmp_path: Path) -> None:
    engine = FakeEngine()
    engine.add_image("sha256:base", SPEC.base.from_ref)
    seen: list[bytes] = []

    def output(request: BuildRequest) -> list[Progress]:
        assert not (request.path / LAYER_NAME).exists(), "the tar is never sent as the build's context"
        seen.append((request.path / "Dockerfile").read_bytes())
        return [Progress(text="Successfully built 0123456789ab\n")]

    engine.build_output = output

    made: list[BytesLayer] = []

    def make(spec: ImageSpec, *, line: bool = False) -> dict[str, BytesLayer]:
        made.append(BytesLayer(layer_tar({"opt/venv/pyvenv.cfg": b"the venv of " + spec.id.encode()}, EPOCH)))
        return {LAYER_NAME: made[-1]}

    results = []
    for n in (1, 2):
        engine.clock += 86_400 * n
        # the second build's host has a proxy: a canonical build takes no build args (they change the history)
        settings = BuildSettings(proxies=(("HTTP_PROXY", "http://u:p@proxy.example:3128"),) if n == 2 else ())
        run = Run(settings=settings, build_dir=tmp_path / f"b{n}", lock_dir=tmp_path, revision="0" * 40, layers=make)
        dockerfile = b"FROM x\nADD venv.tar /\nRUN chmod 0755 /x\n"
        results.append(image_build.build_image(run, engine, SPEC, {"Dockerfile": dockerfile}, force=True))
    assert [r.status for r in results] == ["built", "built"], results
    assert results[0].image_id == results[1].image_id
    assert {r.base_id for r in results} == {"sha256:base"}
    assert engine.resolve(SPEC.tag) == results[0].image_id
    assert {r.network_mode for r in engine.builds} == {"none"}
    assert {r.no_cache for r in engine.builds} == {True}, "no cached step image another build's cleanup may remove"
    assert [dict(r.buildargs) for r in engine.builds] == [{}, {}], "no proxy reaches a canonical build"
    assert seen == [b"FROM x\nLABEL io.builder.layer=venv.tar\nRUN chmod 0755 /x\n"] * 2, "the ADD step marked"
    loaded = engine.inspect_image(SPEC.tag)
    assert loaded is not None and loaded.id == results[0].image_id
    venv = "sha256:" + hashlib.sha256(layer_tar({"opt/venv/pyvenv.cfg": b"the venv of " + SPEC.id.encode()}, EPOCH)).hexdigest()
    assert list(loaded.diff_ids)[1:] == [venv, *list(loaded.diff_ids)[2:]], "the host's tar is the layer, in the ADD step's place"
    config = json.loads(engine.configs[loaded.id])
    assert [h["created_by"] for h in config["history"] if not h.get("empty_layer")][1:3] == [
        "ADD venv.tar /",
        "/bin/sh -c RUN chmod 0755 /x",
    ]
    assert "io.builder.layer" not in config["config"]["Labels"], "the marker label is not the image's"
    assert [layer.reads for layer in made] == [1, 1], "each build's layer bytes made once, as the load copies them"
    assert {r.tag for r in engine.builds} == {image_build.build_tag(SPEC)} != {SPEC.tag}, "the tag moves only to the normalized image"
    built = {image_id_of(r.tag, dict(r.labels)) for r in engine.builds}
    assert not built & engine.image_ids, "the build's own image is removed once the normalized one is loaded"
    assert image_build.build_tag(SPEC) not in engine.names
    assert "sha256:base" in engine.image_ids


def test_a_base_that_moved_during_the_build_fails_it(tmp_path: Path) -> None:
    engine = FakeEngine()
    engine.add_image("sha256:base", SPEC.base.from_ref)

    def output(request: BuildRequest) -> list[Progress]:
        engine.add_image("sha256:another-base", SPEC.base.from_ref)  # a bootstrap elsewhere re-tagged the base
        return [Progress(text="Successfully built 0123456789ab\n")]

    engine.build_output = output

    def make(spec: ImageSpec, *, line: bool = False) -> dict[str, BytesLayer]:
        return {LAYER_NAME: BytesLayer(layer_tar({"opt/venv/pyvenv.cfg": b"venv"}, EPOCH))}

    run = Run(settings=BuildSettings(), build_dir=tmp_path, lock_dir=tmp_path, layers=make)
    result = image_build.build_image(run, engine, SPEC, {"Dockerfile": b"FROM x\nADD venv.tar /\n"}, force=True)
    assert result.status == "failed" and "not the image the build started from (sha256:base)" in (result.error or ""), result
    assert SPEC.tag not in engine.names and image_build.build_tag(SPEC) not in engine.names


def test_a_layer_that_cannot_be_made_fails_the_build_in_one_line(tmp_path: Path) -> None:
    def broken(spec: ImageSpec, *, line: bool = False) -> dict[str, BytesLayer]:
        raise LayerFailed("numba==0.68.0: no wheel for the target")

    run = Run(settings=BuildSettings(), build_dir=tmp_path, lock_dir=tmp_path, layers=broken)
    result = image_build.build_image(run, FakeEngine(), SPEC, {"Dockerfile": b"FROM x\n"}, force=True)
    assert result.status == "failed" and "no wheel for the target" in (result.error or "")


MATRIX = """\
registry: reg/x
bases:
  local-debian12: {vendor: cpu, os: debian12, bootstrap: debootstrap}
python: ["3.11"]
frameworks:
  numba: ["0.68.0"]
stacks:
  numba: [numba]
canonical_layers:
  - select: "%s"
    reason: "reproducible"
"""


def test_canonical_layers_are_validated_with_their_line(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX % "id=numba*")
    assert load_matrix(path).canonical_layers == (("id=numba*", "reproducible", 10),)
    path.write_text(MATRIX % "colour=blue")
    with pytest.raises(UserError, match=r"matrix.yaml:10: canonical_layers.select"):
        load_matrix(path)


# -- BuildKit's layers normalize to the classic builder's (docs/reproducible.md, "bake") -----------


def _tar(entries: list[tuple[str, int, bytes | None]], mtime: int) -> bytes:
    """A layer of (name, mode, data) entries in this order: data None is a directory."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, mode, data in entries:
            info = tarfile.TarInfo(name)
            info.mode, info.mtime, info.uname, info.gname = mode, mtime, "root", "root"
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


BASE_DIRS = _tar(
    [("etc", 0o755, None), ("etc/os-release", 0o644, b"debian"), ("usr", 0o755, None), ("usr/bin", 0o755, None)], 1_600_000_000
)
USERADD = [("etc", 0o755, None), ("etc/passwd", 0o644, b"app:x:10001")]
CHMOD = [("usr", 0o755, None), ("usr/local", 0o755, None), ("usr/local/hello", 0o755, b"hi")]


def _normalized(tmp_path: Path, name: str, layers: list[bytes]) -> tuple[list[str], list[dict[str, object]]]:
    saved, out = tmp_path / f"{name}.saved.tar", tmp_path / f"{name}.tar"
    write_archive(saved, "sha256:" + "1" * 64, [SPEC.tag], {}, [BASE_DIRS, *layers], 1_700_000_000 + len(name))
    reproducible.normalize_archive(saved, out, EPOCH, keep=1)
    with tarfile.open(out) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        config = json.loads(tar.extractfile(manifest[0]["Config"]).read())  # type: ignore[union-attr]
        assert len(manifest[0]["Layers"]) == len(config["rootfs"]["diff_ids"])
    return config["rootfs"]["diff_ids"], config["history"]


def test_buildkits_layers_normalize_to_the_classic_builders(tmp_path: Path) -> None:
    """BuildKit's RUN leaves /etc in its layer (it mounted hosts and resolv.conf there) and its
    WORKDIR an empty layer; neither says anything of the image, so both go."""
    clock = 1_765_000_000
    classic, _ = _normalized(tmp_path, "classic", [_tar(USERADD, clock), _tar(CHMOD, clock)])
    buildkit, history = _normalized(
        tmp_path, "buildkit", [_tar(USERADD, clock + 7), _tar([("etc", 0o755, None), *CHMOD], clock + 9), _tar([], clock + 9)]
    )
    assert buildkit == classic
    assert [bool(h.get("empty_layer")) for h in history] == [False, False, False, True]


@pytest.mark.parametrize(
    "extra",
    [("data", 0o755, None), ("etc", 0o700, None), ("usr/bin", 0o775, None)],
    ids=["a new folder", "a folder whose mode changed", "another"],
)
def test_a_folder_that_says_something_is_kept(tmp_path: Path, extra: tuple[str, int, bytes | None]) -> None:
    plain, _ = _normalized(tmp_path, "plain", [_tar(USERADD, 1), _tar(CHMOD, 1)])
    more, _ = _normalized(tmp_path, "more", [_tar(USERADD, 1), _tar([extra, *CHMOD], 1)])
    assert more[:2] == plain[:2] and more[2] != plain[2]


def test_a_folder_a_layer_below_removed_is_kept(tmp_path: Path) -> None:
    """/etc deleted by a whiteout and made again, empty: the folder beneath is gone, so this one says something."""
    plain, _ = _normalized(tmp_path, "plain", [_tar([(".wh.etc", 0o644, b"")], 1), _tar(CHMOD, 1)])
    again, _ = _normalized(tmp_path, "again", [_tar([(".wh.etc", 0o644, b"")], 1), _tar([("etc", 0o755, None), *CHMOD], 1)])
    assert again[2] != plain[2]


# -- the host's tars put in place of their marked steps (engine/reproducible.py `marked`, `normalize_archive(files=)`) ------


def test_each_add_of_a_host_tar_is_marked_once_or_refused() -> None:
    dockerfile = "FROM b\nADD nvidia.tar /\nRUN useradd app\nADD venv.tar /\nCOPY x /x\n"
    marked = reproducible.marked(dockerfile, ["nvidia.tar", "venv.tar"])
    assert marked == "FROM b\nLABEL io.builder.layer=nvidia.tar\nRUN useradd app\nLABEL io.builder.layer=venv.tar\nCOPY x /x\n"
    with pytest.raises(reproducible.NotAnArchive, match=r"^the Dockerfile has 0 steps `ADD venv.tar /`, not one$"):
        reproducible.marked("FROM b\nRUN true\n", ["venv.tar"])
    with pytest.raises(reproducible.NotAnArchive, match="has 2 steps"):
        reproducible.marked("FROM b\nADD venv.tar /\nADD venv.tar /\n", ["venv.tar"])


def _marked_archive(tmp_path: Path, history: list[dict[str, object]], layers: list[bytes]) -> Path:
    saved = tmp_path / "saved.tar"
    diff_ids = ["sha256:" + hashlib.sha256(data).hexdigest() for data in layers]
    config = {
        "config": {"Labels": {"io.builder.layer": "venv.tar", "keep": "1"}},
        "history": history,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }
    write_archive(saved, "sha256:" + "1" * 64, [SPEC.tag], {}, layers, 1_700_000_000, json.dumps(config).encode())
    return saved


def test_the_host_tar_is_the_layer_of_its_marked_step(tmp_path: Path) -> None:
    venv = tmp_path / "venv.tar"
    venv.write_bytes(layer_tar({"opt/venv/pyvenv.cfg": b"home = /usr/bin\n"}, EPOCH))
    history: list[dict[str, object]] = [
        {"created_by": "base"},
        {"created_by": "/bin/sh -c useradd app"},
        {"created_by": "/bin/sh -c #(nop)  LABEL io.builder.layer=venv.tar", "empty_layer": True},
        {"created_by": "/bin/sh -c #(nop)  USER app", "empty_layer": True},
    ]
    saved = _marked_archive(tmp_path, history, [BASE_DIRS, _tar(USERADD, 1_765_000_000)])
    out = tmp_path / "out.tar"
    image_id = reproducible.normalize_archive(saved, out, EPOCH, keep=1, files={"venv.tar": reproducible.FileLayer(venv)}, kept_files=False)
    with tarfile.open(out) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        config = json.loads(tar.extractfile(manifest[0]["Config"]).read())  # type: ignore[union-attr]
        names = tar.getnames()
        assert tar.extractfile(manifest[0]["Layers"][2]).read() == venv.read_bytes()  # type: ignore[union-attr]
    assert image_id == "sha256:" + hashlib.sha256(tar_member(out, manifest[0]["Config"])).hexdigest()
    assert config["rootfs"]["diff_ids"][2] == "sha256:" + hashlib.sha256(venv.read_bytes()).hexdigest()
    assert [h["created_by"] for h in config["history"]] == [
        "base",
        "/bin/sh -c useradd app",
        "ADD venv.tar /",
        "/bin/sh -c #(nop)  USER app",
    ]
    assert [bool(h.get("empty_layer")) for h in config["history"]] == [False, False, False, True]
    assert config["config"]["Labels"] == {"keep": "1"}, "the marker label goes, the others stay"
    assert manifest[0]["Layers"][0] not in names, "the base's layer is named, not carried: the engine has it"


@pytest.mark.parametrize(
    ("history", "error"),
    [
        ([{"created_by": "base"}, {"created_by": "/bin/sh -c useradd app"}], "has 0 steps that add venv.tar, not one"),
        (
            [{"created_by": "base"}, {"created_by": "LABEL io.builder.layer=venv.tar", "empty_layer": True}] * 2,
            "makes 2 layers, its manifest names 1",
        ),
        ([{"created_by": "base"}], "history makes 1 layers, its manifest names 2"),
    ],
    ids=["no marked step", "a history that is not the layers'", "a layer no step made"],
)
def test_a_saved_image_that_does_not_place_the_tar_is_refused(tmp_path: Path, history: list[dict[str, object]], error: str) -> None:
    venv = tmp_path / "venv.tar"
    venv.write_bytes(layer_tar({"opt/venv/pyvenv.cfg": b"x"}, EPOCH))
    layers = [BASE_DIRS] if "manifest names 1" in error else [BASE_DIRS, _tar(USERADD, 1)]
    saved = _marked_archive(tmp_path, history, layers)
    with pytest.raises(reproducible.NotAnArchive, match=error):
        reproducible.normalize_archive(saved, tmp_path / "out.tar", EPOCH, keep=1, files={"venv.tar": reproducible.FileLayer(venv)})


def test_a_host_tar_that_is_not_a_tar_is_refused_in_one_line(tmp_path: Path) -> None:
    venv = tmp_path / "venv.tar"
    venv.write_bytes(b"not a tar")
    history: list[dict[str, object]] = [{"created_by": "base"}, {"created_by": "LABEL io.builder.layer=venv.tar", "empty_layer": True}]
    saved = _marked_archive(tmp_path, history, [BASE_DIRS])
    with pytest.raises(reproducible.NotAnArchive, match=r"^venv.tar is not a tar \(") as caught:
        reproducible.normalize_archive(saved, tmp_path / "out.tar", EPOCH, keep=1, files={"venv.tar": reproducible.FileLayer(venv)})
    assert "\n" not in str(caught.value)


def tar_member(archive: Path, name: str) -> bytes:
    with tarfile.open(archive) as tar:
        return tar.extractfile(name).read()  # type: ignore[union-attr]


def test_a_build_the_engine_finished_as_the_run_was_stopped_leaves_no_unnormalized_tag(tmp_path: Path) -> None:
    """SIGTERM as the engine tagged the last step (seen by hand: the tag `...-unnormalized` stayed)."""
    engine = FakeEngine()
    engine.add_image("sha256:base", SPEC.base.from_ref)

    def make(spec: ImageSpec, *, line: bool = False) -> dict[str, BytesLayer]:
        return {LAYER_NAME: BytesLayer(layer_tar({"opt/venv/pyvenv.cfg": b"venv"}, EPOCH))}

    run = Run(settings=BuildSettings(), build_dir=tmp_path, lock_dir=tmp_path, layers=make)

    def output(request: BuildRequest) -> list[Progress]:
        engine.add_image("sha256:" + "7" * 64, request.tag)  # the engine finished the build and tagged it ...
        run.stop.set()  # ... as the run was stopped
        return [Progress(text="Successfully built 0123456789ab\n")]

    engine.build_output = output
    result = image_build.build_image(run, engine, SPEC, {"Dockerfile": b"FROM x\nADD venv.tar /\n"}, force=True)
    assert result.status != "built", result
    assert image_build.build_tag(SPEC) not in engine.names, "the unnormalized tag is removed"
    assert SPEC.tag not in engine.names


def _tiny_run(tmp_path: Path) -> Run:
    """A run whose layer maker gives a one-byte venv.tar."""
    return Run(
        settings=BuildSettings(), build_dir=tmp_path, lock_dir=tmp_path, layers=lambda spec, line=False: {LAYER_NAME: BytesLayer(b"x")}
    )


def test_an_interrupted_canonical_build_removes_its_own_step_images(tmp_path: Path) -> None:
    """It builds without the cache (no step image of another build's), so what it committed before
    the stop is its own: the newest step image goes, and with it (in the engine) its parents."""
    engine = FakeEngine()
    engine.add_image("sha256:base", SPEC.base.from_ref)
    run = _tiny_run(tmp_path)

    def output(request: BuildRequest) -> list[Progress]:
        engine.add_image("sha256:aaaaaaaaaaaa" + "0" * 52)
        engine.add_image("sha256:bbbbbbbbbbbb" + "0" * 52)
        return [
            Progress(text="Step 2/3 : RUN useradd app\n"),
            Progress(text=" ---> aaaaaaaaaaaa\n"),
            Progress(text="Step 3/3 : COPY hello_gpu.py /usr/local/bin/hello-gpu\n"),
            Progress(text=" ---> bbbbbbbbbbbb\n"),
            Progress(error="interrupted"),
        ]

    engine.build_output = output
    result = image_build.build_image(run, engine, SPEC, {"Dockerfile": b"FROM x\nADD venv.tar /\n"}, force=True)
    assert result.status == "failed", result
    assert "sha256:bbbbbbbbbbbb" + "0" * 52 in engine.removed_images, "the newest step image is removed"
    assert not run.steps, "nothing is left to remove later"


def test_a_step_image_the_cut_connection_could_not_remove_is_removed_by_the_interrupt(tmp_path: Path) -> None:
    """SIGTERM mid-build cuts the build's connection, so its own removal fails (seen by hand: the
    COPY step image stayed): the build hands the step to the interrupt, which removes it through a
    fresh connection before the run exits."""

    class Cut(FakeEngine):
        def remove_image(self, ref: str) -> bool:
            raise EngineFault("the connection was cut")

    cut, fresh = Cut(), FakeEngine()
    cut.add_image("sha256:base", SPEC.base.from_ref)
    run = _tiny_run(tmp_path)
    cut.build_output = lambda request: [Progress(text=" ---> cccccccccccc\n"), Progress(error="interrupted")]
    result = image_build.build_image(run, cut, SPEC, {"Dockerfile": b"FROM x\nADD venv.tar /\n"}, force=True)
    assert result.status == "failed" and run.unfinished_steps == ["cccccccccccc"]

    fresh.add_image("sha256:cccccccccccc" + "0" * 52)

    def interrupted(spec: ImageSpec, force: bool = True) -> image_build.BuildResult:
        _thread.interrupt_main()  # the Ctrl-C the main thread gets while this build runs
        time.sleep(0.5)
        return image_build.BuildResult(spec.id, "interrupted")

    builder = Builder(make_engine=lambda: fresh, run=run, contexts={SPEC.id: {}})
    builder.build_one = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        builder.build_all([replace(SPEC, base=replace(SPEC.base, bootstrap=None))], jobs=1, force=True, keep_going=False)
    assert "sha256:cccccccccccc" + "0" * 52 in fresh.removed_images


# -- a layer is made when it is copied: its size and members known before any byte is -----------------
def _odd_wheel(folder: Path) -> Path:
    """A wheel whose names need PAX headers (over 100 bytes, not ASCII) and a file over one copy buffer."""
    info = "odd-1.0.dist-info"
    files = {
        "odd/" + "a-long-folder-name/" * 6 + "module.py": b"LONG = 1\n",
        "odd/données/ünïcode.txt": "é".encode() * 100,
        "odd/big.bin": bytes(range(256)) * (wheel_tar.COPY_BUFFER // 256 * 2 + 3),
        "odd/blocks.bin": b"b" * 4096,  # a whole number of blocks: no padding after it (an empty piece is no end)
        "odd/empty.py": b"",
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: odd\nVersion: 1.0\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    return _zip_wheel(folder / "odd-1.0-py3-none-any.whl", files, info)


def test_a_layers_size_members_and_bytes_agree_however_it_is_read(tmp_path: Path) -> None:
    wheels = [make_wheel(tmp_path), _odd_wheel(tmp_path)]
    made = wheel_tar.venv_layer(Layout("3.11", "python3.11"), wheels, EPOCH)
    made.write(tmp_path / LAYER_NAME)
    data = (tmp_path / LAYER_NAME).read_bytes()
    assert made.size == len(data) and len(data) % tarfile.RECORDSIZE == 0
    for size in (512, 16 * 1024, wheel_tar.COPY_BUFFER, 3 * wheel_tar.COPY_BUFFER + 1):  # tarfile's stream reads 16 KiB
        with made.reader() as reader:
            pieces = []
            while piece := reader.read(size):
                pieces.append(piece)
        assert b"".join(pieces) == data, size
    with tarfile.open(tmp_path / LAYER_NAME) as tar:
        written = [(m.name, m.type, m.size, m.mode, m.linkname, m.mtime) for m in tar.getmembers()]
        assert tar.extractfile("opt/venv/lib/python3.11/site-packages/odd/données/ünïcode.txt").read() == "é".encode() * 100  # type: ignore[union-attr]
    assert [(m.name, m.type, m.size, m.mode, m.linkname, m.mtime) for m in made.members()] == written


def test_a_layer_read_halfway_and_closed_leaves_no_wheel_open(tmp_path: Path) -> None:
    made = wheel_tar.venv_layer(Layout("3.11", "python3.11"), [_odd_wheel(tmp_path)], EPOCH)
    before = len(os.listdir("/proc/self/fd"))
    reader = made.reader()
    reader.read(wheel_tar.COPY_BUFFER)  # into the big file: its wheel is open
    assert len(os.listdir("/proc/self/fd")) > before
    reader.close()
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_wheel_that_lies_fails_the_build_as_its_layer_is_loaded_and_loads_nothing(tmp_path: Path) -> None:
    """The layer's bytes are checked as they pass into the load: the archive is cut, the build fails
    in one line, and the engine holds neither the image nor the build's own."""
    body = b"x" * 5000
    lying = _lying_wheel(tmp_path, body, body[:-1] + b"y")
    engine = FakeEngine()
    engine.add_image("sha256:base", SPEC.base.from_ref)

    def make(spec: ImageSpec, *, line: bool = False) -> dict[str, wheel_tar.Layer]:
        return {LAYER_NAME: wheel_tar.venv_layer(Layout("3.11", "python3.11"), [lying], EPOCH)}

    run = Run(settings=BuildSettings(), build_dir=tmp_path / "b", lock_dir=tmp_path, layers=make)
    result = image_build.build_image(run, engine, SPEC, {"Dockerfile": b"FROM x\nADD venv.tar /\n"}, force=True)
    assert result.status == "failed", result
    assert "cannot make the image reproducible: opt/venv/lib/python3.11/site-packages/toy/data.bin: its bytes in" in (result.error or "")
    assert "\n" not in (result.error or "")
    assert SPEC.tag not in engine.names and image_build.build_tag(SPEC) not in engine.names
    assert engine.image_ids == {"sha256:base"}, "nothing of the build is left"
