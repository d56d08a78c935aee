"""The plan of the embedded matrix.yaml and of small matrices: ids, selection, JSON shapes, content hash."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from builder.model.plan import Plan, platform_suffix
from builder.spec import grammar
from builder.spec.matrix import load_matrix
from builder.spec.plan import make_plan
from builder.spec.select import parse_select, select
from builder.util.errors import UserError
from builder.workspace import Workspace

RunCli = Callable[..., Result]
WriteMatrix = Callable[..., Path]
DOCKER_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
HASH = re.compile(r"^sha256:[0-9a-f]{64}$")

LOCAL_IMAGES = {
    "torch2.13.0-cpu-py3.11-debian12": ["torch==2.13.0+cpu"],
    "tensorflow2.21.0-cpu-py3.11-debian12": ["tensorflow-cpu==2.21.0"],
    "jax0.10.2-cpu-py3.11-debian12": ["jax==0.10.2", "jaxlib==0.10.2"],
    "numba0.68.0-cpu-py3.11-debian12": ["numba==0.68.0", "numpy==2.4.6"],
}
# matrix.yaml's defaults.select: Debian 13's newest tensorflow, jax and numba, and torch on Debian 12
# (its cp313 CPU wheel is on download.pytorch.org only, so the Debian 13 torch image is unlocked)
DEFAULT_IMAGES = {
    "jax0.12.0.1-cpu-py3.13-debian13": ["jax==0.12.0.1", "jaxlib==0.12.0.1"],
    "numba0.68.1-cpu-py3.13-debian13": ["numba==0.68.1", "numpy==2.5.5"],
    "tensorflow2.21.0-cpu-py3.13-debian13": ["tensorflow-cpu==2.21.0"],
    "torch2.13.0-cpu-py3.11-debian12": ["torch==2.13.0+cpu"],
}

TWO_BASES = """\
registry: ghcr.io/example/gpu-images
bases:
  cuda12.4-ubuntu22.04:
    vendor: cuda
    version: "12.4.1"
    os: ubuntu22.04
    image: nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04
  cpu-ubuntu24.04:
    vendor: cpu
    os: ubuntu24.04
    image: ubuntu:24.04
python: ["3.11", "3.12"]
frameworks:
  torch: ["2.5.1"]
  numba: ["0.60.0"]
stacks:
  torch: [torch]
  numba: [numba]
"""


def plan_json(cli: RunCli, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    result = cli(*args, env=env)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


# ---------------------------------------------------------------- ids


def test_ids_are_unique_valid_tags_and_readable(embedded_plan: Plan) -> None:
    ids = [spec.id for spec in embedded_plan.images]
    assert len(ids) == len(set(ids)) > 0
    for spec in embedded_plan.images:
        assert DOCKER_TAG.match(spec.id) and len(spec.id) <= 128, spec.id
        assert grammar.DOCKER_TAG.match(spec.id)
        repository, _, tag = spec.tag.rpartition(":")
        assert (repository, tag) == ("ghcr.io/example/gpu-images", spec.id)
        for name, version in spec.frameworks:
            assert f"{name}{version}" in spec.id
        accel = {"cuda": "cu" + "".join((spec.base.version or "").split(".")[:2]), "rocm": f"rocm{spec.base.version}", "cpu": "cpu"}
        assert f"-{accel[spec.base.vendor]}-" in spec.id
        assert spec.id.endswith(f"-py{spec.python}-{spec.base.os}{platform_suffix(spec.platform)}")


def test_plan_is_deterministic(embedded_matrix_path: Path) -> None:
    first = Workspace(embedded_matrix_path).plan
    second = Workspace(embedded_matrix_path).plan
    assert first == second
    assert all(s.content_hash.startswith("sha256:") for s in first.images)
    assert [s.id for s in first.images] == sorted(s.id for s in first.images)


def test_documented_example_id(embedded_plan: Plan) -> None:
    spec = next(s for s in embedded_plan.images if s.id == "torch2.5.1-cu124-py3.11-ubuntu22.04")
    assert spec.packages == ("torch==2.5.1",)  # PyPI's own 2.5.1 wheel is the cu124 build: no extra index
    assert spec.index_urls == ()
    other = next(s for s in embedded_plan.images if s.id == "torch2.5.1-cu118-py3.11-ubuntu22.04")
    assert (other.packages, other.index_urls) == (("torch==2.5.1+cu118",), ("https://download.pytorch.org/whl/cu118",))


def test_every_skipped_combination_has_a_reason(embedded_plan: Plan) -> None:
    assert embedded_plan.skipped
    for skip in embedded_plan.skipped:
        assert skip.reason.strip(), skip


def test_excluded_combinations_name_the_exclude_line(embedded_plan: Plan, embedded_matrix_path: Path) -> None:
    text = embedded_matrix_path.read_text().splitlines()
    lines = {n for n, row in enumerate(text, 1) if re.fullmatch(r"  - \{base: [\w.-]+\}", row)}
    assert len(lines) == 4, "matrix.yaml excludes its four Debian bases whole"
    # and two combinations whose CUDA wheels cannot be held on their base's CUDA (one CUDA per image)
    lines |= {n for n, row in enumerate(text, 1) if re.fullmatch(r"  - \{base: cuda[\w.-]+, stack: \w+, \w+: \"[\d.]+\"\}", row)}
    # and one stack kept off a ROCm base (its frameworks' ROCm wheels are on the other)
    lines |= {n for n, row in enumerate(text, 1) if re.fullmatch(r"  - \{base: rocm[\w.-]+, stack: \w+\}", row)}
    # and the stacks each Debian 13 CUDA-from-wheels base does not carry (one base per CUDA the newest releases bring)
    lines |= {n for n, row in enumerate(text, 1) if re.fullmatch(r"  - \{base: cuda[\w.]*-debian13, stack: \w+\}", row)}
    assert len(lines) == 13
    excluded = [s for s in embedded_plan.skipped if s.reason.startswith("excluded by")]
    assert excluded
    assert {int(s.reason.rsplit(":", 1)[1]) for s in excluded} == lines
    # an include takes its combination back out of the skipped list (on its platform: linux/amd64 unless it names one)
    assert not any(
        s.base == "local-debian12"
        and s.stack == "numba"
        and dict(s.frameworks) == {"numba": "0.68.0"}
        and s.python == "3.11"
        and s.platform == "linux/amd64"
        for s in excluded
    )


def test_default_selection_is_debian13_and_torch_on_debian12(embedded_workspace: Workspace) -> None:
    images = embedded_workspace.selected(None, use_default=True)
    assert {s.id: list(s.packages) for s in images} == DEFAULT_IMAGES
    for spec in images:
        assert (spec.base.name, spec.python) == (("local-debian12", "3.11") if spec.stack == "torch" else ("local-debian13", "3.13"))
        assert spec.base.bootstrap == "debootstrap"


def test_the_embedded_default_selects_only_locked_images(embedded_workspace: Workspace) -> None:
    """The main job runs on a fresh machine: every image it builds installs its lock, none resolves
    against an index (download.pytorch.org) that the machines that lock this matrix cannot reach."""
    images = embedded_workspace.selected(None, use_default=True)
    assert [s.id for s in images if s.lock is None] == []
    planned = {s.id: s for s in embedded_workspace.decided.images}
    assert planned["torch2.15.0-cpu-py3.13-debian13"].lock is None, "the Debian 13 CPU torch got a lock: move torch's default to it"


def test_torch_cpu_index_on_the_local_image(embedded_workspace: Workspace) -> None:
    (torch,) = [s for s in embedded_workspace.selected(None, use_default=True) if s.stack == "torch"]
    assert torch.index_urls == ("https://download.pytorch.org/whl/cpu",)


# ---------------------------------------------------------------- --select


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (
            "stack=torch,base=cuda12.*",
            {
                "torch2.5.1-cu124-py3.11-ubuntu22.04",
                "torch2.5.1-cu124-on-cu128-py3.12-ubuntu24.04",  # the id names the wheel variant and the base
                "torch2.13.0-cu126-on-cu128-py3.12-ubuntu24.04",
                "torch2.14.1-cu126-on-cu128-py3.12-ubuntu24.04",
            },
        ),
        ("torch=2.5.*,vendor=rocm", set()),  # the torch 2.5.1 ROCm 6 images are retired (matrix.yaml)
        ("index=https://download.pytorch.org/whl/rocm*", {"torch2.13.0-rocm7.2-py3.12-ubuntu24.04"}),
        (
            "id=numba*-cu13*",
            {
                "numba0.60.0-cu130-py3.12-ubuntu24.04",
                "numba0.68.0-cu130-py3.12-ubuntu24.04",
                "numba0.68.1-cu130-py3.12-ubuntu24.04",
                "numba0.68.0-cu130-py3.11-debian12",
                "numba0.68.0-cu130-py3.11-debian12-arm64",
                "numba0.68.1-cu130-py3.13-debian13",  # Debian 13's newest numba (matrix.yaml newest:)
                "numba0.68.1-cu130-py3.13-debian13-arm64",
            },
        ),
        ("tensorflow=*,os=debian12", {"tensorflow2.21.0-cpu-py3.11-debian12", "tensorflow2.21.0-cu125-py3.11-debian12"}),
        ("python=3.11, base=local-debian12 ,stack=jax", {"jax0.10.2-cpu-py3.11-debian12"}),
        ("base=nothing-like-this", set()),
    ],
)
def test_select_globs_and_framework_keys(expr: str, expected: set[str], embedded_plan: Plan) -> None:
    assert {s.id for s in select(embedded_plan.images, parse_select(expr))} == expected


def test_framework_term_does_not_match_images_without_it(embedded_plan: Plan) -> None:
    chosen = select(embedded_plan.images, parse_select("numba=*"))
    assert chosen and all(s.stack == "numba" for s in chosen)
    assert len(chosen) == sum(1 for s in embedded_plan.images if "numba" in s.versions)


def test_empty_select_is_everything(embedded_plan: Plan) -> None:
    assert select(embedded_plan.images, parse_select("")) == embedded_plan.images


def test_select_on_the_command_line(cli: RunCli, embedded_matrix_path: Path) -> None:
    data = plan_json(cli, "--matrix", str(embedded_matrix_path), "plan", "--format", "json", "--select", "stack=torch,base=cuda12.*")
    assert len(data["images"]) == 4
    assert all(i["stack"] == "torch" and i["base"]["name"].startswith("cuda12.") for i in data["images"])


@pytest.mark.parametrize(
    ("expr", "words"),
    [("flavour=cuda", "unknown select key 'flavour'"), ("stak=torch", "did you mean 'stack'?"), ("torch", "must look like key=value")],
)
def test_bad_select_is_an_error(expr: str, words: str, cli: RunCli, embedded_matrix_path: Path) -> None:
    result = cli("--matrix", str(embedded_matrix_path), "plan", "--select", expr)
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], result.stderr
    with pytest.raises(UserError):
        parse_select(expr)


# ---------------------------------------------------------------- output formats


def test_plan_json_shape(cli: RunCli, embedded_matrix_path: Path, embedded_plan: Plan) -> None:
    data = plan_json(cli, "--matrix", str(embedded_matrix_path), "plan", "--format", "json")
    assert set(data) == {"images", "skipped"}
    assert [i["id"] for i in data["images"]] == [s.id for s in embedded_plan.images]
    documented = {"id", "tag", "base", "stack", "python", "frameworks", "packages", "index_urls", "content_hash"}
    for entry in data["images"]:
        assert documented <= set(entry), documented - set(entry)
        assert {"name", "vendor"} <= set(entry["base"])
        if entry["base"]["vendor"] != "cpu":
            assert "version" in entry["base"]
            assert ("image" in entry["base"]) != ("bootstrap" in entry["base"])  # a pulled base or a bootstrapped one
        assert isinstance(entry["frameworks"], dict) and entry["frameworks"]
        assert all(isinstance(p, str) for p in entry["packages"])
        assert all(isinstance(u, str) for u in entry["index_urls"])
        assert HASH.match(entry["content_hash"])
    for skip in data["skipped"]:
        assert set(skip) == {"base", "platform", "stack", "python", "frameworks", "reason"}
        assert isinstance(skip["frameworks"], dict) and skip["reason"]
    assert len(data["skipped"]) == len(embedded_plan.skipped)


def test_plan_json_documented_example(cli: RunCli, embedded_matrix_path: Path) -> None:
    data = plan_json(
        cli, "--matrix", str(embedded_matrix_path), "plan", "--format", "json", "--select", "id=torch2.5.1-cu124-py3.11-ubuntu22.04"
    )
    (entry,) = data["images"]
    assert entry["id"] == "torch2.5.1-cu124-py3.11-ubuntu22.04"
    assert entry["tag"] == "ghcr.io/example/gpu-images:torch2.5.1-cu124-py3.11-ubuntu22.04"
    assert {k: entry["base"][k] for k in ("name", "vendor", "version", "image")} == {
        "name": "cuda12.4-ubuntu22.04",
        "vendor": "cuda",
        "version": "12.4.1",
        "image": "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04",
    }
    assert (entry["stack"], entry["python"], entry["frameworks"]) == ("torch", "3.11", {"torch": "2.5.1"})
    assert entry["packages"] == ["torch==2.5.1"]
    assert entry["index_urls"] == []
    assert entry["lock"] in ("locked", "stale", "missing", "unlocked")


def test_plan_github_matrix(cli: RunCli, embedded_matrix_path: Path, embedded_plan: Plan) -> None:
    result = cli("--matrix", str(embedded_matrix_path), "plan", "--format", "github")
    assert result.exit_code == 0, result.output
    assert len(result.stdout.strip().splitlines()) == 1  # one line, for $GITHUB_OUTPUT
    data = json.loads(result.stdout)
    assert set(data) == {"include"}
    assert [e["id"] for e in data["include"]] == [s.id for s in embedded_plan.images]
    for entry, spec in zip(data["include"], embedded_plan.images, strict=True):
        assert entry["select"] == f"id={spec.id}"
        assert entry["gpu"] is (spec.base.vendor != "cpu")
    selected = json.loads(
        cli(
            "--matrix", str(embedded_matrix_path), "plan", "--format", "github", "--select", "base=local-debian12,platform=linux/amd64"
        ).stdout
    )
    assert {e["id"] for e in selected["include"]} == set(LOCAL_IMAGES)


def test_plan_table_lists_every_image(cli: RunCli, embedded_matrix_path: Path, embedded_plan: Plan) -> None:
    result = cli("--matrix", str(embedded_matrix_path), "plan")
    assert result.exit_code == 0, result.output
    assert f"{len(embedded_plan.images)} images" in result.stdout
    for spec in embedded_plan.images:
        assert spec.id in result.stdout
    assert "--explain" in result.stdout


# ---------------------------------------------------------------- content hash and templates beside the matrix


def hashes(cli: RunCli, matrix: Path) -> dict[str, str]:
    data = plan_json(cli, "--matrix", str(matrix), "plan", "--format", "json")
    return {i["id"]: i["content_hash"] for i in data["images"]}


def test_content_hash_follows_the_templates(cli: RunCli, write_matrix: WriteMatrix, tmp_path: Path) -> None:
    matrix = write_matrix(TWO_BASES)
    before = hashes(cli, matrix)
    assert len(before) == 4 and len(set(before.values())) == 4

    # a template beside the matrix that these images do not use: nothing changes
    (tmp_path / "templates" / "frameworks").mkdir(parents=True)
    (tmp_path / "templates" / "frameworks" / "jax.j2").write_text("ENV SOMETHING_ELSE=1\n")
    assert hashes(cli, matrix) == before

    # override the torch partial: exactly the torch images change
    (tmp_path / "templates" / "frameworks" / "torch.j2").write_text("# a team's own torch settings\nENV TORCH_HOME=/opt/torch\n")
    after = hashes(cli, matrix)
    assert after.keys() == before.keys()
    for image_id in before:
        assert (after[image_id] != before[image_id]) == image_id.startswith("torch"), image_id

    # and the rendered Dockerfile uses the override
    out = tmp_path / "images"
    assert cli("--matrix", str(matrix), "render").exit_code == 0
    dockerfile = (out / "torch2.5.1-cu124-py3.11-ubuntu22.04" / "Dockerfile").read_text()
    assert "ENV TORCH_HOME=/opt/torch" in dockerfile and "ENV TORCH_HOME=/tmp/torch" not in dockerfile


def test_content_hash_ignores_what_is_not_in_the_build_context(cli: RunCli, write_matrix: WriteMatrix) -> None:
    before = hashes(cli, write_matrix(TWO_BASES))
    renamed = hashes(cli, write_matrix(TWO_BASES.replace("ghcr.io/example/gpu-images", "registry.example.com/ml/images")))
    assert renamed == before  # the registry is only in the tag
    grown = hashes(cli, write_matrix(TWO_BASES.replace('numba: ["0.60.0"]', 'numba: ["0.60.0", "0.68.0"]')))
    assert {k: v for k, v in grown.items() if k in before} == before  # other images keep their hash


def test_content_hash_follows_the_base_and_the_labels(cli: RunCli, write_matrix: WriteMatrix) -> None:
    before = hashes(cli, write_matrix(TWO_BASES))
    digest = "sha256:" + "a" * 64
    pinned = hashes(cli, write_matrix(TWO_BASES.replace("    image: ubuntu:24.04\n", f"    image: ubuntu:24.04\n    digest: {digest}\n")))
    for image_id in before:
        assert (pinned[image_id] != before[image_id]) == image_id.endswith("ubuntu24.04"), image_id
    sourced = hashes(cli, write_matrix("source: https://git.example.com/ml/images\n" + TWO_BASES))
    assert all(sourced[k] != before[k] for k in before)  # the source label is in every Dockerfile


def test_index_url_override(write_matrix: WriteMatrix) -> None:
    text = TWO_BASES + 'indexes:\n  torch-cu124: "https://mirror.example.com/pytorch/cu124"\n'
    plan = make_plan(load_matrix(write_matrix(text)))
    urls = {s.id: s.index_urls for s in plan.images if s.stack == "torch"}
    assert urls == {
        "torch2.5.1-cu124-py3.11-ubuntu22.04": ("https://mirror.example.com/pytorch/cu124",),
        "torch2.5.1-cpu-py3.12-ubuntu24.04": ("https://download.pytorch.org/whl/cpu",),
    }


def test_index_url_override_with_variant_placeholder(write_matrix: WriteMatrix) -> None:
    # The validation message itself offers `https://mirror.example.com/pytorch/{variant}` as the example.
    text = TWO_BASES + 'indexes:\n  torch-cu*: "https://mirror.example.com/pytorch/{variant}"\n'
    plan = make_plan(load_matrix(write_matrix(text)))
    urls = {s.id: s.index_urls for s in plan.images if s.stack == "torch"}
    assert urls == {
        "torch2.5.1-cu124-py3.11-ubuntu22.04": ("https://mirror.example.com/pytorch/cu124",),
        "torch2.5.1-cpu-py3.12-ubuntu24.04": ("https://download.pytorch.org/whl/cpu",),
    }


def test_bases_that_would_share_an_id_are_an_error(write_matrix: WriteMatrix) -> None:
    text = TWO_BASES.replace(
        "  cpu-ubuntu24.04:",
        '  cuda12.4.0-ubuntu22.04:\n    vendor: cuda\n    version: "12.4.0"\n    os: ubuntu22.04\n    image: nvidia/cuda:12.4.0-runtime-ubuntu22.04\n  cpu-ubuntu24.04:',
    )
    with pytest.raises(UserError, match="produce the same image id torch2.5.1-cu124-py3.11-ubuntu22.04"):
        make_plan(load_matrix(write_matrix(text)))


def test_include_adds_a_combination_the_expansion_lacks(write_matrix: WriteMatrix) -> None:
    text = TWO_BASES + 'include:\n  - {base: cuda12.4-ubuntu22.04, stack: torch, torch: "2.4.1", python: "3.11"}\n'
    plan = make_plan(load_matrix(write_matrix(text)))
    spec = next(s for s in plan.images if s.id == "torch2.4.1-cu124-py3.11-ubuntu22.04")
    assert spec.packages == ("torch==2.4.1+cu124",)


# ---------------------------------------------------------------- where the matrix is found


def test_matrix_option_from_another_folder(
    cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embedded_matrix_path: Path, embedded_plan: Plan
) -> None:
    monkeypatch.chdir(tmp_path)
    data = plan_json(cli, "--matrix", str(embedded_matrix_path), "plan", "--format", "json")
    assert [i["id"] for i in data["images"]] == [s.id for s in embedded_plan.images]
    assert [i["content_hash"] for i in data["images"]] == [s.content_hash for s in embedded_plan.images]


def test_matrix_from_environment_in_another_folder(
    cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embedded_matrix_path: Path, embedded_plan: Plan
) -> None:
    monkeypatch.chdir(tmp_path)
    data = plan_json(cli, "plan", "--format", "json", env={"BUILDER_MATRIX": str(embedded_matrix_path)})
    assert [i["id"] for i in data["images"]] == [s.id for s in embedded_plan.images]


def test_matrix_option_wins_over_environment(cli: RunCli, write_matrix: WriteMatrix, embedded_matrix_path: Path) -> None:
    small = write_matrix(TWO_BASES)
    data = plan_json(cli, "--matrix", str(small), "plan", "--format", "json", env={"BUILDER_MATRIX": str(embedded_matrix_path)})
    assert len(data["images"]) == 4


def test_real_executable_from_another_folder(tmp_path: Path, root: Path, embedded_plan: Plan) -> None:
    env = {"PATH": "/usr/bin:/bin", "BUILDER_MATRIX": str(root / "matrix.yaml")}
    proc = subprocess.run(
        [str(root / ".venv" / "bin" / "builder"), "plan", "--format", "github"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["include"]) == len(embedded_plan.images)
    assert not any(tmp_path.iterdir())  # plan writes nothing
