"""Rendered build contexts: golden files for representative images, invariants over every image,
and the determinism of `builder render` / `render --check`.

Golden files live in tests/golden/<image-id>/. After an intended template change, rewrite them with
`UPDATE_GOLDEN=1 pytest tests/test_render.py` and read the diff before committing it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dockerfile
import pytest
from click.testing import Result

from builder.engine.staging import APT_CA_COPY
from builder.lock import layer, line
from builder.lock.files import parse
from builder.model.plan import ImageSpec, platform_suffix
from builder.render import templates
from builder.render.context import PROBE
from builder.render.formats import image_entry
from builder.render.labels import BUILT_BY_LABEL, BUILT_BY_VALUE
from builder.render.tree import MANIFEST, manifest_bytes
from builder.spec.matrix import load_matrix
from builder.spec.plan import make_plan
from builder.workspace import Workspace
from tests.conftest import ROOT, small_matrix_text

if TYPE_CHECKING:
    from tests.conftest import Rendered

RunCli = Callable[..., Result]
SMALL_TWO = small_matrix_text(torch=("2.4.1", "2.5.1"))
WriteMatrix = Callable[..., Path]
GOLDEN = Path(__file__).parent / "golden"
GOLDEN_MATRIX = GOLDEN / "matrix.yaml"  # a small fixture matrix, not the shipped one
GOLDEN_IMAGES = (
    "torch2.5.1-cu124-py3.11-ubuntu22.04",  # CUDA torch
    "torch2.5.1-rocm6.2-py3.11-ubuntu22.04",  # ROCm torch
    "numba0.68.0-cpu-py3.11-debian12",  # the local Debian image, NumPy pinned under numba's ceiling
    "tensorflow2.21.0-cu128-py3.12-ubuntu24.04",  # CUDA tensorflow
    "numba0.68.0-cu130-py3.11-debian12",  # CUDA from wheels: numba-cuda[cu13] under the base's constraints
)
GOLDEN_FILES = ("Dockerfile", "requirements.txt")
GOLDEN_CASES = [(i, n) for i in GOLDEN_IMAGES for n in GOLDEN_FILES] + [("numba0.68.0-cu130-py3.11-debian12", "constraints.txt")]
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[a-z0-9,-]+\])?==[0-9][A-Za-z0-9.+]*$")


# ---------------------------------------------------------------- golden files


@pytest.fixture(scope="module")
def golden_tree() -> dict[str, bytes]:
    return Workspace(GOLDEN_MATRIX).rendered_tree()


def test_golden_matrix_plans_exactly_the_golden_images(golden_tree: dict[str, bytes]) -> None:
    assert {path.split("/")[0] for path in golden_tree if "/" in path} == set(GOLDEN_IMAGES)


@pytest.mark.parametrize(("image_id", "name"), GOLDEN_CASES)
def test_golden(image_id: str, name: str, golden_tree: dict[str, bytes]) -> None:
    assert f"{image_id}/{name}" in golden_tree, f"{image_id} is no longer planned by {GOLDEN_MATRIX.name}; fix the fixture"
    actual = golden_tree[f"{image_id}/{name}"]
    path = GOLDEN / image_id / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(actual)
    assert path.is_file(), f"missing {path}; run UPDATE_GOLDEN=1 pytest {Path(__file__).name}"
    assert actual.decode() == path.read_text(encoding="utf-8"), f"{image_id}/{name} differs from {path}"
    assert actual == path.read_bytes()


def test_golden_locked_image_installs_exactly_its_lock() -> None:
    """The numba golden image with a fixture lock: the Dockerfile copies and installs requirements.lock with hashes."""
    image = "numba0.68.0-cpu-py3.11-debian12"
    lock = parse((GOLDEN / "locked" / "requirements.lock").read_text(encoding="utf-8"))
    assert lock is not None
    tree = Workspace(GOLDEN_MATRIX, lock_overrides=((image, lock),)).rendered_tree()
    path = GOLDEN / "locked" / "Dockerfile"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_bytes(tree[f"{image}/Dockerfile"])
    assert tree[f"{image}/Dockerfile"] == path.read_bytes()
    assert tree[f"{image}/requirements.lock"] == lock.text.encode()
    text = path.read_text(encoding="utf-8")
    assert "--require-hashes --no-deps -r /tmp/builder/requirements.lock" in text and "COPY requirements.lock" in text


# ---------------------------------------------------------------- invariants over every rendered image


def instructions(text: str) -> list[Any]:
    return list(dockerfile.parse_string(text))


def pairs(values: tuple[str, ...]) -> dict[str, str]:
    """ENV / LABEL values come as key, value, key, value...; values keep their quotes."""
    return {k: v.strip('"') for k, v in zip(values[::2], values[1::2], strict=True)}


def expected_sequence(spec: ImageSpec) -> list[str]:
    runtime = (
        ["FROM", "LABEL", "USER"]
        + (["ENV"] if spec.base.vendor != "cpu" else [])
        + (["COPY", "RUN"] if spec.python_packages else [])
        # a canonical CUDA image's NVIDIA wheels: their own layer right on the base, below the user's
        + (["ADD"] if layer.own_nvidia_layer(spec) else [])
        + ["RUN"]
    )
    # an unlocked image reads local.txt too; a locked one the served uv and its uv.toml
    venv = ["COPY", "ARG", "ARG", "ARG"] + (["ARG", "ARG"] if spec.lock else ["ARG"]) + ["RUN"]
    if spec.canonical:  # matrix.yaml canonical_layers: the venv is the layer `builder build` makes from the lock
        venv = ["ADD"]
    nvvm = ["RUN"] if any(r.startswith("nvidia-cuda-nvcc-cu") for r in spec.packages) else []  # numba's built-in CUDA target
    final = ["COPY", "RUN", "ENV"] + ["ENV"] * len(spec.frameworks) + nvvm + ["LABEL", "USER", "WORKDIR", "CMD"]
    return runtime + venv + final


def test_numba_on_cuda_11_links_the_nvvm_of_its_wheel_where_numba_looks(rendered: Rendered) -> None:
    # numba's built-in target finds libNVVM only as /usr/local/cuda/nvvm/lib64/libnvvm.so.N; the -runtime base has none
    builtin = [(spec, text) for spec, text in each_image(rendered) if spec.versions.get("numba") and spec.base.version == "11.8.0"]
    assert builtin
    for spec, text in builtin:
        assert "nvidia-cuda-nvcc-cu11==11.8.89" in spec.packages, spec.id
        assert "nvidia-cuda-nvcc-cu11==11.8.89" in (rendered.text(spec.id, "requirements.lock") if spec.lock else ""), spec.id
        run = [i for i in instructions(text) if i.cmd.upper() == "RUN" and "nvidia.cuda_nvcc" in i.original]
        assert len(run) == 1, spec.id
        assert 'os.symlink(nvvm, "/usr/local/cuda/nvvm")' in run[0].original and 'lib + ".4"' in run[0].original
    others = [text for spec, text in each_image(rendered) if spec.base.version != "11.8.0" or not spec.versions.get("numba")]
    assert not any("nvidia.cuda_nvcc" in text for text in others)


def each_image(rendered: Rendered) -> list[tuple[ImageSpec, str]]:
    assert rendered.plan.images
    return [(spec, rendered.text(spec.id, "Dockerfile")) for spec in rendered.plan.images]


def test_every_image_has_exactly_its_files(rendered: Rendered) -> None:
    assert set(rendered.files) == {s.id for s in rendered.plan.images}
    locked = {s.id for s in rendered.plan.images if s.lock is not None}
    assert locked, "the embedded matrix has locked images"
    constrained = {s.id for s in rendered.plan.images if s.constraints}
    assert constrained, "the embedded matrix has CUDA-from-wheels images"
    measured = {s.id for s in rendered.plan.images if s.locked_fit is not None}
    assert measured == {s.id for s in rendered.plan.images if s.lock is not None and s.base.vendor in ("cuda", "rocm")}, (
        "every locked CUDA and ROCm image is measured"
    )
    for image_id, files in rendered.files.items():
        lock = {"requirements.lock"} if image_id in locked else set()
        lock |= {"constraints.txt"} if image_id in constrained else set()
        fit = {"fit.json"} if image_id in measured else set()  # committed beside the lock, not built
        assert set(files) == {"Dockerfile", "requirements.txt", "image.json"} | lock | fit  # the probe is not committed per image
    for image_id, context in rendered.contexts.items():
        lock = {"requirements.lock"} if image_id in locked else set()
        lock |= {"constraints.txt"} if image_id in constrained else set()
        assert set(context) == {"Dockerfile", "requirements.txt", "hello_gpu.py"} | lock, image_id
        assert all(context[name] == rendered.files[image_id][name] for name in ("Dockerfile", "requirements.txt", *lock))


def test_header_says_generated(rendered: Rendered) -> None:
    for spec, text in each_image(rendered):
        first = text.splitlines()[0]
        assert "GENERATED" in first and "do not edit" in first, spec.id
        assert rendered.text(spec.id, "requirements.txt").startswith("# GENERATED"), spec.id


def test_parses_as_one_stage_in_the_expected_order(rendered: Rendered) -> None:
    """One stage: the venv is written by one RUN step of the image itself, never copied from a build
    stage (which committed the multi-GB venv twice), and no build setting is copied in: the CA
    bundle, pip.conf and local.txt are served (only an apt step copies the public CA, python.j2)."""
    for spec, text in each_image(rendered):
        parsed = instructions(text)
        assert [i.cmd.upper() for i in parsed] == expected_sequence(spec), spec.id
        froms = [i.value for i in parsed if i.cmd.upper() == "FROM"]
        assert froms == [(spec.line_image if layer.line_layer(spec) else spec.base.from_ref,)], spec.id
        assert not any(i.flags for i in parsed if i.cmd.upper() == "COPY"), spec.id
        copied = [source for i in parsed if i.cmd.upper() == "COPY" for source in i.value[:-1]]
        assert [s for s in copied if s.startswith(".builder")] == ([APT_CA_COPY.decode()] if spec.python_packages else []), spec.id
        writes = [i.original for i in parsed if i.cmd.upper() == "RUN" and "/opt/venv" in i.original and "-m venv" in i.original]
        if spec.canonical:  # nothing fetches: no served setting, no install step, the venv ADDed layers
            # a CUDA lock's NVIDIA wheels first (lock/layer.py), then the venv; a line's member has them in its FROM
            added = [("nvidia.tar", "/")] if layer.own_nvidia_layer(spec) else []
            assert writes == [] and [i.value for i in parsed if i.cmd.upper() == "ADD"] == [*added, ("venv.tar", "/")], spec.id
            assert not any(word in text for word in ("BUILDER_CA_URL", "pip install", "fetch(")), spec.id
            continue
        assert len(writes) == 1, spec.id
        for fetched in ("BUILDER_CA_URL", "BUILDER_PIP_CONF_URL", *(["BUILDER_UV_CONF_URL"] if spec.lock else ["BUILDER_LOCAL_URL"])):
            assert f'fetch "${fetched}"' in writes[0], (spec.id, fetched)
        assert ('fetch "$BUILDER_UV_URL" /tmp/builder/uv' in writes[0]) is (spec.lock is not None), spec.id  # a locked image may use uv
        assert writes[0].index("rm -rf /tmp/builder") > writes[0].index("pip check"), spec.id  # read and deleted in one layer
        assert "stage-of" not in text and "BUILDER_STAGE_OF" not in text, spec.id


def line_lock_text(spec: ImageSpec) -> str:
    assert spec.line is not None
    return (ROOT / "images" / line.rel_path(spec.line)).read_text(encoding="utf-8")


def test_from_is_the_base(rendered: Rendered) -> None:
    for spec, text in each_image(rendered):
        first_from = next(i for i in instructions(text) if i.cmd.upper() == "FROM")
        expected = spec.base.image if spec.base.bootstrap is None else f"builder-base/{spec.base.os}{platform_suffix(spec.platform)}:latest"
        if layer.line_layer(spec):  # a CUDA line's member: the base plus the line's NVIDIA layer (engine/line_image.py)
            assert spec.line_image == f"builder-line/{spec.line}:{hashlib.sha256(line_lock_text(spec).encode()).hexdigest()[:16]}"
            expected = spec.line_image
        values = list(first_from.value)
        if spec.platform != "linux/amd64":  # FROM --platform=linux/arm64 <base>: the flag is the parser's, not a value
            assert f"--platform={spec.platform}" in first_from.flags, spec.id
        assert values[0] == expected, spec.id


def test_every_step_after_the_base_carries_the_built_by_label(rendered: Rendered) -> None:
    """Issue #14 finding 20: the intermediate images of a failed build carried no label of ours,
    so `builder clean` could not tell them from anyone else's. The label comes right after the
    first FROM: every image the build commits inherits it, the build and final stages too."""
    for spec, text in each_image(rendered):
        parsed = instructions(text)
        assert parsed[0].cmd.upper() == "FROM" and parsed[1].cmd.upper() == "LABEL", spec.id
        assert pairs(parsed[1].value) == {BUILT_BY_LABEL: BUILT_BY_VALUE}, spec.id


def test_last_user_is_not_root(rendered: Rendered) -> None:
    for spec, text in each_image(rendered):
        users = [i.value[0] for i in instructions(text) if i.cmd.upper() == "USER"]
        assert users[-1] not in ("root", "0", "0:0"), spec.id
        assert users[-1] == "app"


def test_labels(rendered: Rendered, embedded_matrix_path: Path) -> None:
    source = load_matrix(embedded_matrix_path).source
    for spec, text in each_image(rendered):
        labels: dict[str, str] = {}
        for i in instructions(text):
            if i.cmd.upper() == "LABEL":
                labels.update(pairs(i.value))
        frameworks = ",".join(f"{n}={v}" for n, v in spec.frameworks)
        assert labels["org.opencontainers.image.title"] == spec.id
        assert labels["org.opencontainers.image.version"] == frameworks
        assert labels["org.opencontainers.image.source"] == source
        assert labels["io.builder.id"] == spec.id
        assert labels["io.builder.stack"] == spec.stack
        assert labels["io.builder.frameworks"] == frameworks
        assert labels["io.builder.python"] == spec.python
        assert labels["io.builder.accelerator"] == spec.base.vendor
        # the CUDA the image loads: the base's, or its lock's where matrix.yaml states an exception
        assert labels.get("io.builder.accelerator-version") == (spec.base.version if not spec.cuda_exception else spec.accelerator.version)


def env_of(text: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for i in instructions(text):
        if i.cmd.upper() == "ENV":
            env.update(pairs(i.value))
    return env


def test_cuda_images_carry_the_nvidia_runtime_settings(rendered: Rendered) -> None:
    cuda = [(spec, text) for spec, text in each_image(rendered) if spec.base.vendor == "cuda"]
    assert cuda
    for spec, text in cuda:
        env = env_of(text)
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all", spec.id
        assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility", spec.id
        assert spec.base.version is not None
        # the base's CUDA, unless matrix.yaml lets the image's wheels load another (then the lock's)
        wanted = spec.accelerator.version if spec.cuda_exception else spec.base.version
        assert wanted is not None
        major, minor = wanted.split(".")[:2]
        assert re.match(rf"^cuda>={major}\.{minor}( |$)", env["NVIDIA_REQUIRE_CUDA"]), spec.id


def test_rocm_and_cpu_images_mention_nothing_nvidia(rendered: Rendered) -> None:
    others = [(spec, text) for spec, text in each_image(rendered) if spec.base.vendor != "cuda"]
    assert {s.base.vendor for s, _ in others} == {"rocm", "cpu"}
    for spec, text in others:
        assert "NVIDIA" not in text.upper(), spec.id


def test_hello_gpu_is_installed(rendered: Rendered) -> None:
    probe = PROBE.read_bytes()
    for spec, text in each_image(rendered):
        assert rendered.contexts[spec.id]["hello_gpu.py"] == probe
        parsed = instructions(text)
        assert any(i.cmd.upper() == "COPY" and i.value == ("hello_gpu.py", "/usr/local/bin/hello-gpu") for i in parsed), spec.id
        assert parsed[-1].cmd.upper() == "CMD" and parsed[-1].value == ("hello-gpu",)


def test_requirements_are_exact_pins(rendered: Rendered) -> None:
    for spec in rendered.plan.images:
        pins = [text for text in rendered.text(spec.id, "requirements.txt").splitlines() if not text.startswith("#")]
        assert pins == list(spec.packages), spec.id
        assert pins == sorted(pins)  # a CUDA line's member: its own pins and its line's, in one sorted list
        for pin in pins:
            assert PIN.match(pin), f"{spec.id}: {pin!r} is not an exact pin"
        if "numba" in spec.versions:
            assert any(pin.startswith("numpy==") for pin in pins), f"{spec.id} has numba but no numpy pin"


def test_no_command_substitution_in_run_lines(rendered: Rendered) -> None:
    for spec, text in each_image(rendered):
        for i in instructions(text):
            if i.cmd.upper() == "RUN":
                assert "`" not in i.original and "$(" not in i.original, f"{spec.id}: {i.original}"


def test_image_json_is_the_plan_entry(rendered: Rendered) -> None:
    for spec in rendered.plan.images:
        assert json.loads(rendered.files[spec.id]["image.json"]) == json.loads(json.dumps(image_entry(spec).to_json()))


def test_content_hash_is_the_hash_of_the_build_context(rendered: Rendered) -> None:
    for spec in rendered.plan.images:
        files = rendered.contexts[spec.id]
        digest = hashlib.sha256()
        for name in sorted(files):
            digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
        assert spec.content_hash == "sha256:" + digest.hexdigest(), spec.id


def test_digest_pins_the_from_line(write_matrix: WriteMatrix) -> None:
    digest = "sha256:" + "0123456789abcdef" * 4
    path = write_matrix(small_matrix_text(base_extra=f"    digest: {digest}\n"))
    (spec,) = make_plan(load_matrix(path)).images
    text = templates.dockerfile(spec, templates.environment(), "https://example.com/src")
    first_from = next(i for i in instructions(text) if i.cmd.upper() == "FROM")
    assert first_from.value == (f"nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04@{digest}",)
    assert f'org.opencontainers.image.base.name="nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04@{digest}"' in text


# ---------------------------------------------------------------- builder render / render --check


def tree_of(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(folder)): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode)) for p in sorted(folder.rglob("*")) if p.is_file()}


def render_into(cli: RunCli, matrix: Path, out: Path, *extra: str) -> Result:
    return cli("--matrix", str(matrix), "render", "--out", str(out), *extra)


def test_render_twice_is_byte_identical(cli: RunCli, embedded_matrix_path: Path, tmp_path: Path, rendered: Rendered) -> None:
    first, second = tmp_path / "a" / "images", tmp_path / "b" / "images"
    assert render_into(cli, embedded_matrix_path, first).exit_code == 0
    assert render_into(cli, embedded_matrix_path, second).exit_code == 0
    tree = tree_of(first)
    assert tree == tree_of(second)
    files = {**{f"{i}/{n}": d for i, files in rendered.files.items() for n, d in files.items()}, **rendered.lines}
    assert {path: data for path, (data, _) in tree.items()} == {**files, MANIFEST: manifest_bytes(files)}
    assert not [p for p in (tmp_path / "a").iterdir() if p.name != "images"]  # no temporary folders left behind
    mask = os.umask(0)
    os.umask(mask)
    for folder in [first, *(p for p in first.iterdir() if p.is_dir())]:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~mask, folder  # not mkdtemp's 0700


def test_render_then_check_is_current(cli: RunCli, embedded_matrix_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "images"
    result = render_into(cli, embedded_matrix_path, out)
    assert result.exit_code == 0, result.output
    check = render_into(cli, embedded_matrix_path, out, "--check")
    assert check.exit_code == 0, check.output
    assert check.stdout == ""
    assert "is current" in check.stderr
    again = render_into(cli, embedded_matrix_path, out)
    assert "0 files changed" in again.stderr


def test_check_lists_an_edited_file_and_writes_nothing(cli: RunCli, embedded_matrix_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "images"
    assert render_into(cli, embedded_matrix_path, out).exit_code == 0
    edited = out / "torch2.5.1-cu124-py3.11-ubuntu22.04" / "Dockerfile"
    edited.write_text(edited.read_text() + "RUN echo hand edit\n")
    before = tree_of(out)
    check = render_into(cli, embedded_matrix_path, out, "--check")
    assert check.exit_code == 1
    assert check.stdout.splitlines() == ["stale: images/torch2.5.1-cu124-py3.11-ubuntu22.04/Dockerfile"]
    assert "1 stale files" in check.stderr
    assert tree_of(out) == before


def test_check_lists_a_stray_folder_and_writes_nothing(cli: RunCli, embedded_matrix_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "images"
    assert render_into(cli, embedded_matrix_path, out).exit_code == 0
    (out / "torch1.0.0-cu80-py2.7-ubuntu16.04").mkdir()
    (out / "torch1.0.0-cu80-py2.7-ubuntu16.04" / "Dockerfile").write_text("FROM scratch\n")
    before = tree_of(out)
    check = render_into(cli, embedded_matrix_path, out, "--check")
    assert check.exit_code == 1
    assert check.stdout.splitlines() == ["stale: images/torch1.0.0-cu80-py2.7-ubuntu16.04/Dockerfile"]
    assert tree_of(out) == before


def test_check_lists_an_empty_stray_folder_and_render_keeps_it(cli: RunCli, embedded_matrix_path: Path, tmp_path: Path) -> None:
    """A folder render did not make is stale for --check, and render refuses to delete it."""
    out = tmp_path / "images"
    assert render_into(cli, embedded_matrix_path, out).exit_code == 0
    (out / "torch1.0.0-cu80-py2.7-ubuntu16.04").mkdir()
    check = render_into(cli, embedded_matrix_path, out, "--check")
    assert (out / "torch1.0.0-cu80-py2.7-ubuntu16.04").is_dir()  # --check writes nothing
    assert check.exit_code == 1, check.output
    assert "torch1.0.0-cu80-py2.7-ubuntu16.04" in check.stdout
    refused = render_into(cli, embedded_matrix_path, out)
    assert refused.exit_code == 2
    assert refused.stderr.splitlines() == [
        f"error: {out}/torch1.0.0-cu80-py2.7-ubuntu16.04 is an empty folder that `builder render` did not make; "
        "move it out of images/ or delete it, then render again"
    ]
    assert (out / "torch1.0.0-cu80-py2.7-ubuntu16.04").is_dir()


def test_check_on_a_missing_folder_lists_everything(cli: RunCli, embedded_matrix_path: Path, tmp_path: Path, rendered: Rendered) -> None:
    out = tmp_path / "images"
    check = render_into(cli, embedded_matrix_path, out, "--check")
    assert check.exit_code == 1
    assert len(check.stdout.splitlines()) == sum(len(f) for f in rendered.files.values()) + len(rendered.lines) + 1  # + the manifest
    assert not out.exists()


def test_render_removes_an_image_folder_it_rendered_for_an_older_plan(cli: RunCli, write_matrix: WriteMatrix, tmp_path: Path) -> None:
    out = tmp_path / "images"
    wider = write_matrix(SMALL_TWO, name="wide.yaml")
    assert render_into(cli, wider, out).exit_code == 0
    assert (out / "torch2.4.1-cu124-py3.11-ubuntu22.04").is_dir()
    narrower = write_matrix(name="matrix.yaml")
    result = render_into(cli, narrower, out)
    assert result.exit_code == 0, result.output
    assert not (out / "torch2.4.1-cu124-py3.11-ubuntu22.04").exists()  # render's own, listed in its manifest
    assert render_into(cli, narrower, out, "--check").exit_code == 0


def test_render_refuses_a_hand_edit_unless_forced(cli: RunCli, embedded_matrix_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "images"
    assert render_into(cli, embedded_matrix_path, out).exit_code == 0
    edited = out / "torch2.5.1-cu124-py3.11-ubuntu22.04" / "requirements.txt"
    edited.write_text("torch\n")
    refused = render_into(cli, embedded_matrix_path, out)
    assert refused.exit_code == 2 and "was edited by hand" in refused.stderr and "--force" in refused.stderr
    assert edited.read_text() == "torch\n"
    forced = render_into(cli, embedded_matrix_path, out, "--force")
    assert forced.exit_code == 0 and "1 files changed" in forced.stderr
    assert render_into(cli, embedded_matrix_path, out, "--check").exit_code == 0


def test_render_defaults_to_images_beside_the_matrix(
    cli: RunCli, write_matrix: WriteMatrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    matrix = write_matrix(folder=tmp_path / "repo")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = cli("--matrix", str(matrix), "render")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "repo" / "images").iterdir()) == [MANIFEST, "torch2.5.1-cu124-py3.11-ubuntu22.04"]
    assert not any(elsewhere.iterdir())
    assert cli("--matrix", str(matrix), "render", "--check").exit_code == 0
