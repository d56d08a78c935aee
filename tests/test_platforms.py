"""Platform as a matrix axis (issue 19): bases declare linux/amd64 and linux/arm64, an arm64 image has
its own id and tag, the compat table says which releases publish arm64 wheels, the plan, --explain,
the GitHub matrix and the bake file carry the platform, locks resolve per platform, and doctor says
whether this host runs arm64 binaries. Offline: no engine, no index."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from builder.compat.platforms import platform_reason
from builder.compat.rules import table
from builder.engine import bootstrap
from builder.engine.staging import fits
from builder.fit.runs_on import record_arch
from builder.host import doctor, facts
from builder.host.facts import AmdInfo, EmulationFacts, EngineFacts, HostInfo, NvidiaGpu, NvidiaInfo, gather_emulation
from builder.lock.target import platform_for, target_for
from builder.model.plan import AMD64, ARM64, Base, Plan, platform_of_id
from builder.render import bake
from builder.render.formats import github_matrix, image_entry, plan_json
from builder.spec.matrix import load_matrix
from builder.spec.plan import make_plan
from builder.workspace import Workspace

RunCli = Callable[..., Result]
WriteMatrix = Callable[..., Path]

TWO_PLATFORMS = """\
registry: ghcr.io/example/gpu-images
bases:
  cuda13-debian12:
    vendor: cuda
    version: "13.0"
    os: debian12
    bootstrap: debootstrap
    platforms: [linux/amd64, linux/arm64]
  cpu-debian12:
    vendor: cpu
    os: debian12
    bootstrap: debootstrap
    platforms: [linux/arm64, linux/amd64]
  cuda12-debian12:
    vendor: cuda
    version: "12.5"
    os: debian12
    bootstrap: debootstrap
  cuda12.4-ubuntu22.04:
    vendor: cuda
    version: "12.4.1"
    os: ubuntu22.04
    image: nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04
    platforms: [linux/amd64, linux/arm64]
python: ["3.11"]
frameworks:
  torch: ["2.5.1", "2.14.1"]
  tensorflow: ["2.21.0"]
  cupy: ["14.0.0"]
stacks:
  torch: [torch]
  tensorflow: [tensorflow]
  cupy: [cupy]
"""


@pytest.fixture
def two(write_matrix: WriteMatrix) -> Plan:
    return make_plan(load_matrix(write_matrix(TWO_PLATFORMS)))


LAST = len(TWO_PLATFORMS.splitlines())  # an entry appended after `include:`/`exclude:` is on LAST + 2


def _error(result: Result, line: int, *words: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    message = result.stderr.strip()
    assert "\n" not in message and "Traceback" not in message
    assert message.startswith(f"error: matrix.yaml:{line}: "), message
    for word in words:
        assert word in message, message


# --- the matrix ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "line", "words"),
    [
        ("[linux/arm]", 8, ("unknown platform 'linux/arm'", "did you mean 'linux/arm64'")),
        ("[windows/amd64]", 8, ("unknown platform 'windows/amd64'", "linux/amd64")),
        ("[]", 8, ("platforms is empty",)),
        ("[linux/arm64, linux/arm64]", 8, ("lists 'linux/arm64' twice",)),
        ("linux/arm64", 8, ("must be a list",)),
    ],
)
def test_bad_platforms_are_one_line_errors(in_tmp: Path, cli: RunCli, value: str, line: int, words: tuple[str, ...]) -> None:
    text = TWO_PLATFORMS.replace("platforms: [linux/amd64, linux/arm64]", f"platforms: {value}", 1)
    (in_tmp / "matrix.yaml").write_text(text, encoding="utf-8")
    _error(cli("--matrix", "matrix.yaml", "plan"), line, *words)
    assert not (in_tmp / "images").exists()


def test_an_include_for_a_platform_its_base_lacks_is_refused(in_tmp: Path, cli: RunCli) -> None:
    text = TWO_PLATFORMS + 'include:\n  - {base: cuda12-debian12, platform: linux/arm64, stack: cupy, cupy: "14.0.0", python: "3.11"}\n'
    (in_tmp / "matrix.yaml").write_text(text, encoding="utf-8")
    _error(cli("--matrix", "matrix.yaml", "plan"), LAST + 2, "include is for linux/arm64", "cuda12-debian12", "platforms: linux/amd64")


def test_an_exclude_naming_an_unknown_platform_is_refused(in_tmp: Path, cli: RunCli) -> None:
    (in_tmp / "matrix.yaml").write_text(TWO_PLATFORMS + "exclude:\n  - {platform: linux/arm}\n", encoding="utf-8")
    _error(cli("--matrix", "matrix.yaml", "plan"), LAST + 2, "unknown platform 'linux/arm'")


def test_a_base_without_platforms_is_amd64_only(write_matrix: WriteMatrix) -> None:
    matrix = load_matrix(write_matrix(TWO_PLATFORMS))
    assert matrix.base("cuda12-debian12").platforms == (AMD64,)
    assert matrix.base("cpu-debian12").platforms == (AMD64, ARM64)  # declaration order does not matter: amd64 first


# --- the plan --------------------------------------------------------------------------------


def test_ids_and_tags_are_unique_per_platform(two: Plan) -> None:
    ids = [s.id for s in two.images]
    assert len(ids) == len(set(ids)) and len({s.tag for s in two.images}) == len(ids)
    arm = {s.id for s in two.images if s.platform == ARM64}
    amd = {s.id for s in two.images if s.platform == AMD64}
    assert arm and all(i.endswith("-arm64") for i in arm)
    assert not any(i.endswith("-arm64") for i in amd)
    assert "torch2.14.1-cu130-py3.11-debian12-arm64" in arm and "torch2.14.1-cu130-py3.11-debian12" in amd
    for spec in two.images:
        assert spec.tag.endswith(":" + spec.id)
        assert platform_of_id(spec.id) == spec.platform


def test_the_rules_skip_releases_without_wheels_for_the_platform(two: Plan) -> None:
    arm = {s.id for s in two.images if s.platform == ARM64}
    assert "cupy14.0.0-cu130-py3.11-debian12-arm64" in arm
    assert "torch2.5.1-cpu-py3.11-debian12-arm64" in arm  # torch's CPU aarch64 wheels are older than its CUDA ones
    reasons = {(s.base, s.platform, dict(s.frameworks).get("torch") or dict(s.frameworks).get("tensorflow")): s.reason for s in two.skipped}
    assert "torch2.5.1-cu124-py3.11-ubuntu22.04" in {s.id for s in two.images}
    torch = reasons[("cuda12.4-ubuntu22.04", ARM64, "2.5.1")]
    assert "2.5.1 publishes no linux/arm64 wheels for a cuda base; the first is 2.9.0" in torch
    assert "builder/compat/data/compat.yaml platforms, line " in torch
    assert "tensorflow-cpu" in reasons[("cpu-debian12", ARM64, "2.21.0")]
    # the same combinations on amd64 are decided as before
    assert "tensorflow2.21.0-cpu-py3.11-debian12" in {s.id for s in two.images}


def test_a_framework_without_a_row_is_skipped_with_the_row_to_add() -> None:
    base = Base(name="b", vendor="rocm", os="ubuntu22.04", version="6.2", image="x", platforms=(AMD64, ARM64), platform=ARM64)
    reason = platform_reason(table().platform_wheels, "torch", "2.5.1", base, "compat.yaml")
    assert reason is not None and "no linux/arm64 wheels of torch for a rocm base are known" in reason and "compat.yaml platforms" in reason
    assert platform_reason(table().platform_wheels, "torch", "2.5.1", replace(base, platform=AMD64), "compat.yaml") is None


def test_an_include_names_its_platform(write_matrix: WriteMatrix) -> None:
    text = TWO_PLATFORMS + (
        "exclude:\n  - {base: cuda13-debian12}\n"
        'include:\n  - {base: cuda13-debian12, platform: linux/arm64, stack: torch, torch: "2.14.1", python: "3.11"}\n'
    )
    plan = make_plan(load_matrix(write_matrix(text)))
    on_base = sorted(s.id for s in plan.images if s.base.name == "cuda13-debian12")
    assert on_base == ["torch2.14.1-cu130-py3.11-debian12-arm64"]


def test_an_include_that_cannot_work_on_its_platform_is_an_error(in_tmp: Path, cli: RunCli) -> None:
    text = (
        TWO_PLATFORMS + 'include:\n  - {base: cuda12.4-ubuntu22.04, platform: linux/arm64, stack: torch, torch: "2.5.1", python: "3.11"}\n'
    )
    (in_tmp / "matrix.yaml").write_text(text, encoding="utf-8")
    _error(cli("--matrix", "matrix.yaml", "plan"), LAST + 2, "this include cannot work", "the first is 2.9.0")


def test_select_and_exclude_know_the_platform(write_matrix: WriteMatrix, cli: RunCli) -> None:
    path = write_matrix(TWO_PLATFORMS + "exclude:\n  - {platform: linux/arm64, stack: cupy}\n")
    plan = make_plan(load_matrix(path))
    assert not any(s.platform == ARM64 and s.stack == "cupy" for s in plan.images)
    assert any(s.platform == AMD64 and s.stack == "cupy" for s in plan.images)
    result = cli("--matrix", str(path), "plan", "--format", "json", "--select", "platform=linux/arm64")
    assert result.exit_code == 0, result.output
    images = json.loads(result.stdout)["images"]
    assert images and {i["platform"] for i in images} == {ARM64}


# --- what the plan says: JSON, --explain, GitHub matrix, bake --------------------------------


def test_plan_json_and_explain_carry_the_platform(write_matrix: WriteMatrix, cli: RunCli, two: Plan) -> None:
    doc = plan_json(two.images, two.skipped)
    assert {e["id"]: e["platform"] for e in doc["images"]} == {s.id: s.platform for s in two.images}
    assert {s["platform"] for s in doc["skipped"]} == {AMD64, ARM64}
    result = cli("--matrix", str(write_matrix(TWO_PLATFORMS)), "plan", "--explain")
    assert result.exit_code == 0, result.output
    assert "platform" in result.stdout
    row = next(line for line in result.stdout.splitlines() if "the first is 2.9.0" in line)
    assert "linux/arm64" in row


def test_image_json_names_the_platform_only_off_amd64(two: Plan) -> None:
    for spec in two.images:
        entry = image_entry(spec).to_json()
        assert ("platform" in entry) == (spec.platform != AMD64)
        if spec.platform != AMD64:
            assert entry["platform"] == spec.platform


def test_github_matrix_carries_the_platform_and_an_arm64_runner(two: Plan) -> None:
    legs = github_matrix(two.images)["include"]
    for leg, spec in zip(legs, two.images, strict=True):
        assert leg["platform"] == spec.platform
        arm_runner = "arm64" in leg["runs_on"] or "ubuntu-24.04-arm" in leg["runs_on"]
        assert arm_runner == (spec.platform == ARM64), leg


def test_bake_targets_carry_the_platform(two: Plan) -> None:
    hashed = [replace(s, content_hash="sha256:" + "0" * 64) for s in two.images]
    doc = bake.bake_file(hashed)
    for spec in hashed:
        assert doc["target"][bake.target_name(spec.id)]["platforms"] == [spec.platform]


def test_the_dockerfile_names_the_platform_and_its_own_base(two: Plan, write_matrix: WriteMatrix) -> None:
    ws = Workspace(write_matrix(TWO_PLATFORMS))
    files = ws.contexts(ws.plan.images)
    arm = files["torch2.14.1-cu130-py3.11-debian12-arm64"]["Dockerfile"].decode()
    amd = files["torch2.14.1-cu130-py3.11-debian12"]["Dockerfile"].decode()
    assert "FROM --platform=linux/arm64 builder-base/debian12-arm64:latest" in arm
    assert "FROM builder-base/debian12:latest" in amd and "--platform" not in amd


# --- amd64 stays as it was -------------------------------------------------------------------


def test_amd64_images_are_byte_identical_without_the_arm64_axis(embedded_workspace: Workspace, root: Path, tmp_path: Path) -> None:
    """Strip every `platforms:` and arm64 include from the embedded matrix: each amd64 image's
    images/<id>/ files (Dockerfile, requirements, constraints, lock, image.json with its content hash)
    are the same bytes, and the amd64 image set is the same."""
    text = (root / "matrix.yaml").read_text(encoding="utf-8")
    assert "linux/arm64" in text, "the embedded matrix declares arm64 somewhere"
    stripped = "\n".join(line for line in text.splitlines() if "platforms:" not in line and "platform: linux/arm64" not in line) + "\n"
    (tmp_path / "matrix.yaml").write_text(stripped, encoding="utf-8")
    shutil.copytree(root / "images", tmp_path / "images")
    shutil.copytree(root / "templates", tmp_path / "templates")
    before = Workspace(tmp_path / "matrix.yaml")
    assert not any(s.platform != AMD64 for s in before.plan.images)
    amd_ids = {s.id for s in embedded_workspace.plan.images if s.platform == AMD64}
    assert amd_ids == {s.id for s in before.plan.images}
    now = embedded_workspace.rendered_tree()
    old = before.rendered_tree()
    compared = 0
    for rel, data in old.items():
        if "/" in rel:
            assert now[rel] == data, f"{rel} changed"
            compared += 1
    assert compared >= 3 * len(amd_ids)


def test_the_embedded_default_selection_has_no_arm64_image(embedded_workspace: Workspace) -> None:
    assert all(s.platform == AMD64 for s in embedded_workspace.selected(None, use_default=True))


def test_the_embedded_arm64_images_are_locked_for_aarch64(embedded_plan: Plan) -> None:
    arm = [s for s in embedded_plan.images if s.platform == ARM64]
    assert {s.base.vendor for s in arm} == {"cpu", "cuda"}, "matrix.yaml plans the arm64 CUDA-from-wheels slice and a CPU image"
    for spec in arm:
        if spec.unlocked:  # torch's CPU build: download.pytorch.org only (matrix.yaml unlocked:)
            assert spec.index_urls == ("https://download.pytorch.org/whl/cpu",) and spec.lock is None, spec.id
            continue
        assert spec.lock is not None, f"{spec.id} is not locked"
        assert f"target: python {spec.python}, aarch64-manylinux_" in spec.lock.text
        if spec.base.vendor == "cuda":
            assert spec.constraints, "CUDA-from-wheels: the constraints hold the CUDA wheels on the base's CUDA"


# --- locks, build staging, fit ---------------------------------------------------------------


def test_the_lock_target_is_the_image_platform(two: Plan) -> None:
    compat = table()
    assert platform_for("debian12", compat) == "x86_64-manylinux_2_36"
    assert platform_for("debian12", compat, ARM64) == "aarch64-manylinux_2_36"
    amd = next(s for s in two.images if s.id == "torch2.14.1-cu130-py3.11-debian12")
    arm = next(s for s in two.images if s.id == "torch2.14.1-cu130-py3.11-debian12-arm64")
    assert target_for(amd, compat).platform == "x86_64-manylinux_2_36"
    assert target_for(arm, compat).platform == "aarch64-manylinux_2_36"
    assert target_for(arm, compat).constraints == target_for(amd, compat).constraints != ()
    assert target_for(arm, compat).inputs != target_for(amd, compat).inputs


def test_local_wheels_fit_the_image_architecture() -> None:
    from packaging.version import Version

    x86 = "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"
    arm = "torch-2.14.1-cp311-cp311-manylinux_2_28_aarch64.whl"
    assert fits(x86, Version("2.14.1"), "3.11", "x86_64") and not fits(arm, Version("2.14.1"), "3.11", "x86_64")
    assert fits(arm, Version("2.14.1"), "3.11", "aarch64") and not fits(x86, Version("2.14.1"), "3.11", "aarch64")


def test_bootstrap_recipe_follows_the_base_platform() -> None:
    base = Base(name="d", vendor="cpu", os="debian12", bootstrap="debootstrap", platforms=(AMD64, ARM64))
    assert bootstrap.recipe_for(base, "http://m").arch == "amd64"
    assert bootstrap.recipe_for(replace(base, platform=ARM64), "http://m").arch == "arm64"
    assert replace(base, platform=ARM64).local_tag == "builder-base/debian12-arm64:latest"
    assert base.local_tag == "builder-base/debian12:latest"


def test_a_recipe_label_reads_back_as_its_recipe_and_nothing_else_does() -> None:
    base = Base(name="d", vendor="cpu", os="debian12", bootstrap="debootstrap", platforms=(AMD64, ARM64))
    recipe = bootstrap.recipe_for(replace(base, platform=ARM64), "http://m")
    label = bootstrap.canonical_json(recipe)
    assert bootstrap.Recipe.from_label(label) == recipe
    schema_as_text = label.replace(f'"schema":{bootstrap.RECIPE_SCHEMA}', f'"schema":"{bootstrap.RECIPE_SCHEMA}"')
    assert schema_as_text != label
    for bad in ("{", "[]", '{"arch": 1}', schema_as_text):
        with pytest.raises(ValueError, match="io.builder.recipe label is not a bootstrap recipe"):
            bootstrap.Recipe.from_label(bad)


def test_a_record_arch_follows_its_recorded_platform() -> None:
    from tests.catalog_fixtures import record

    assert record_arch(record("torch2.14.1-cu130-py3.11-debian12")) == "amd64"
    assert record_arch(record("torch2.14.1-cu130-py3.11-debian12-arm64", platform=ARM64, emulated=True)) == "arm64"


# --- doctor: arm64 emulation -----------------------------------------------------------------


def _binfmt(root: Path, handler: str | None) -> Path:
    folder = root / "proc/sys/fs/binfmt_misc"
    folder.mkdir(parents=True)
    (folder / "status").write_text("enabled\n")
    if handler is not None:
        (folder / "qemu-aarch64").write_text(handler)
    return root


F_HANDLER = "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: PF\noffset 0\nmagic 7f454c46\n"


@pytest.mark.parametrize(
    ("handler", "mounted", "machine", "state", "status", "fix"),
    [
        (F_HANDLER, True, "x86_64", "enabled", "ok", ""),
        (F_HANDLER.replace("flags: PF", "flags: P"), True, "x86_64", "enabled", "warn", "F"),
        (F_HANDLER.replace("enabled", "disabled", 1), True, "x86_64", "disabled", "warn", "echo 1 > /proc/sys/fs/binfmt_misc/qemu-aarch64"),
        (None, True, "x86_64", "absent", "warn", "qemu-user-static"),
        (None, False, "x86_64", "unmounted", "warn", "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc"),
        (None, False, "aarch64", "native", "ok", ""),
    ],
)
def test_doctor_reports_arm64_emulation(
    tmp_path: Path, handler: str | None, mounted: bool, machine: str, state: str, status: str, fix: str
) -> None:
    root = _binfmt(tmp_path, handler) if mounted else tmp_path
    facts = gather_emulation(root, machine)
    assert facts.state == state
    check = doctor.emulation_check(facts)
    assert check.status == status and check.name == "arm64 emulation"
    assert fix in check.fix
    if status == "ok":
        assert not check.fix


def test_doctor_says_another_cpu_architecture_and_notes_building_here_apart(two: Plan) -> None:
    """doctor answers what this host runs: an arm64 image is `n/a` on an amd64 host, with or without
    binfmt, and a GPU image is never offered emulation as its fix (qemu-user has no GPU, issue 39).
    Building it here under emulation is a note of its own, with binfmt's fix where it is missing."""
    engine = EngineFacts(True, "20.10.24", ("nvidia", "runc"))
    gpu = NvidiaInfo(status="ok", driver="580.159.04", gpus=(NvidiaGpu(0, "NVIDIA H200", "9.0", 143771),))
    without = HostInfo(engine, gpu, AmdInfo(), EmulationFacts("x86_64", "absent"))
    with_f = replace(without, emulation=EmulationFacts("x86_64", "enabled", "PF"))
    arm = next(s for s in two.images if s.platform == ARM64 and s.accelerator.kind == "cuda")
    amd = next(s for s in two.images if s.platform == AMD64 and s.accelerator.kind == "cuda")
    for host in (without, with_f):
        verdict = doctor.image_verdict(host, arm)
        assert verdict.status == "n/a", verdict
        assert verdict.reason == "another CPU architecture: a linux/arm64 image; this host is amd64 (qemu-user emulation has no GPU)"
        assert verdict.fix == "run it on an arm64 host" and "qemu" not in verdict.fix and "binfmt" not in verdict.fix
    assert doctor.image_verdict(without, arm).note.startswith("not buildable here: no qemu-aarch64 binfmt handler is registered")
    assert "qemu-user-static" in doctor.image_verdict(without, arm).note
    assert doctor.image_verdict(with_f, arm).note == "builds and its CPU checks run here under qemu-aarch64 emulation (slow)"
    cpu_arm = next(s for s in two.images if s.platform == ARM64 and s.accelerator.kind == "cpu")
    assert doctor.image_verdict(with_f, cpu_arm).reason == "another CPU architecture: a linux/arm64 image; this host is amd64"
    assert doctor.image_verdict(without, amd) == doctor.image_verdict(with_f, amd)
    assert doctor.image_verdict(without, amd).status != "n/a" and not doctor.image_verdict(without, amd).note
    arm_host = replace(without, emulation=EmulationFacts("aarch64", "native"))
    assert doctor.image_verdict(arm_host, amd).reason.startswith("another CPU architecture: a linux/amd64 image; this host is arm64")
    assert doctor.image_verdict(arm_host, arm).status != "n/a"
    names = [c.name for c in doctor.host_checks(without)]
    assert names[-1] == "arm64 emulation"
    assert "arm64 emulation" not in [c.name for c in doctor.host_checks(replace(without, emulation=None))]


def test_doctor_on_a_gpu_host_exits_0_for_its_arm64_images(in_tmp: Path, cli: RunCli, monkeypatch: pytest.MonkeyPatch) -> None:
    (in_tmp / "matrix.yaml").write_text(TWO_PLATFORMS, encoding="utf-8")
    engine = EngineFacts(True, "20.10.24", ("nvidia", "runc"))
    gpu = NvidiaInfo(status="ok", driver="580.159.04", gpus=(NvidiaGpu(0, "NVIDIA H200", "9.0", 143771),))
    monkeypatch.setattr(facts, "gather", lambda **kwargs: HostInfo(engine, gpu, AmdInfo(), EmulationFacts("x86_64", "absent")))
    result = cli("--matrix", "matrix.yaml", "doctor", "--format", "json")
    assert result.exit_code == 0, result.output  # the arm64 images are n/a here, not failures
    images = json.loads(result.stdout)["images"]
    arm = [i for i in images if i["image"].endswith("-arm64")]
    assert arm and all(i["status"] == "n/a" and i["reason"].startswith("another CPU architecture") for i in arm)
    assert not any("binfmt" in i["fix"] or "qemu" in i["fix"] for i in images)
    table = cli("--matrix", "matrix.yaml", "doctor")
    assert "Building here (another CPU architecture):" in table.stdout


def _table_rows(text: str) -> list[dict[str, Any]]:
    return [dict(m.groupdict()) for m in re.finditer(r"\{platform: (?P<platform>[^,]+), framework: (?P<framework>[^,]+)", text)]


def test_the_platform_table_is_guarded(tmp_path: Path) -> None:
    from builder.compat.rules import load_table
    from builder.compat.tables import DATA_DIR
    from builder.util.errors import UserError

    text = (DATA_DIR / "compat.yaml").read_text(encoding="utf-8")
    assert _table_rows(text), "compat.yaml has platform rows"
    cases = {
        "unsorted": text.replace(
            '  - {platform: linux/arm64, framework: cupy, kind: cuda, from: "13.6.0", source: PYPI_ARM64}\n', "", 1
        ).replace(
            "platforms:\n", 'platforms:\n  - {platform: linux/arm64, framework: zzz, kind: cuda, from: "1.0", source: PYPI_ARM64}\n', 1
        ),
        "both": text.replace('framework: cupy, kind: cuda, from: "13.6.0"', 'framework: cupy, kind: cuda, from: "13.6.0", none: "x"', 1),
        "kind": text.replace("framework: cupy, kind: cuda", "framework: cupy, kind: gpu", 1),
        "amd64": text.replace("{platform: linux/arm64, framework: cupy", "{platform: linux/amd64, framework: cupy", 1),
    }
    for name, broken in cases.items():
        assert broken != text, name
        path = tmp_path / f"{name}.yaml"
        path.write_text(broken, encoding="utf-8")
        with pytest.raises(UserError, match=r"line|sorted|exactly one|kind|amd64"):
            load_table(path)


def test_the_report_tells_an_arm64_skip_from_the_amd64_one(two: Plan) -> None:
    from builder.report.model import build_report

    report = build_report(two, two.images, {}, [], {})
    skipped = [(r.base, r.stack, r.id) for r in report.rows if r.status == "skipped"]
    assert len(skipped) == len(set(skipped)), "each skipped combination has its own row in its base x stack cell"
    assert any(label.endswith("-arm64") for _, _, label in skipped)
    assert {r.id for r in report.rows if r.status != "skipped"} == {s.id for s in two.images}
