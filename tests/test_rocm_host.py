"""AMD on the host (issue 43 part 2): what a ROCm image runs on (one cell, fit/runs_on.py, for doctor,
pull, catalog and report), whether this host's gfx targets are covered, the kernel-driver check
from AMD's published KMD support, and the one table of ROCm device flags. Offline, no Docker."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from builder.catalog import records
from builder.catalog.records import MeasuredAccelerator
from builder.compat import rocm_driver
from builder.compat.rocm import RocmFacts
from builder.compat.rules import load_table, table
from builder.fit.host import FitHost
from builder.fit.runs_on import gfx_targets, rocm_runs_on, runs_on
from builder.host import doctor
from builder.host.facts import AmdInfo, DeviceNode, EngineFacts, HostInfo, NvidiaInfo, amdgpu_version
from builder.model import amd_fit
from builder.model.amd_fit import AmdFit, AmdFramework, AmdLibrary
from builder.model.plan import Plan
from builder.report.model import build_report
from builder.smoke import args as smoke_args
from builder.usecases import doctor as doctoring
from builder.usecases.fit import gfx_verdict, judge
from builder.util.errors import UserError
from builder.workspace import Workspace
from tests.catalog_fixtures import record

ROOT = Path(__file__).resolve().parents[1]
CUPY = "cupy14.2.0-rocm7.0-py3.12-ubuntu24.04"
JAX = "jax0.10.2-rocm7.0-py3.12-ubuntu24.04"
ROCM7 = MeasuredAccelerator("rocm", "7.0", rocm="7.0")
CUPY_TARGETS = "gfx908 gfx90a gfx942 gfx950 gfx1030 gfx1100 gfx1101 gfx1200 gfx1201"


def committed_fit(image_id: str) -> AmdFit:
    """The AMD part of the image's fit.json, measured from its locked wheels by `builder lock`."""
    doc = json.loads((ROOT / "images" / image_id / "fit.json").read_text(encoding="utf-8"))
    return amd_fit.from_json(doc["amd"], image_id, ValueError)


def rocm_record(amd: AmdFit | None = None, image_id: str = CUPY) -> records.KnownGood:
    return record(image_id, frameworks={"cupy": "14.2.0"}, accelerator=ROCM7, amd=amd)


def amd_host(*gfx: str, kernel: str | None = None, amdgpu: str | None = None) -> FitHost:
    return FitHost("amd64", "amd", gfx, None, ("arch",), kernel=kernel, amdgpu=amdgpu)


# -- the kernel-driver check (compat/rocm_driver.py) ---------------------------------------------------------


def with_module(module: str, kmd: str) -> RocmFacts:
    return dataclasses.replace(table().rocm, amdgpu_modules=((module, kmd),))


def test_the_kernel_driver_check_fits_only_on_a_named_tested_kmd() -> None:
    facts = with_module("6.8.5", "6.2")
    found = rocm_driver.check("6.2", "6.8.0-45-generic", "6.8.5", facts)
    assert found.status == "fits" and found.reason == "Linux 6.8 >= 4.18; amdgpu module 6.8.5 is KMD 6.2, which AMD tests ROCm 6.2 with"
    outside = rocm_driver.check("7.0", "6.8.0-45-generic", "6.8.5", facts)
    assert outside.status == "does not fit"
    assert outside.reason.startswith("amdgpu module 6.8.5 is KMD 6.2; ROCm 7.0 is tested with amdgpu KMD 30.30")


def test_an_old_kernel_is_refused_before_the_module_is_asked() -> None:
    found = rocm_driver.check("5.7.1", "5.4.0-150-generic", None, table().rocm)
    assert found.status == "does not fit" and "Linux 5.4 is older than every kernel AMD supports ROCm 5.7 on (>= 5.15)" in found.reason


@pytest.mark.parametrize(
    ("rocm", "kernel", "module", "says"),
    [
        (None, "6.8.0", None, "the image's ROCm release is not recorded"),
        ("6.9", "6.8.0", None, "compat.yaml rocm.releases has no row for ROCm 6.9"),
        ("7.0", None, None, "the host's kernel is not known (not detected): ROCm 7.0 needs Linux >= 4.18"),
        ("7.0", "weird", None, "is not major.minor"),
        ("7.0", "6.8.0", None, "its amdgpu driver has no version (/sys/module/amdgpu/version"),
        ("7.0", "6.8.0", "6.99.1", "amdgpu module 6.99.1 is not in compat.yaml rocm.amdgpu_modules"),
    ],
)
def test_what_the_table_cannot_say_stays_unknown_with_its_reason(
    rocm: str | None, kernel: str | None, module: str | None, says: str
) -> None:
    found = rocm_driver.check(rocm, kernel, module, table().rocm)
    assert found.status == "unknown" and says in found.reason


def test_the_kmd_rows_are_sourced_and_guarded(tmp_path: Path) -> None:
    rocm = table().rocm
    assert [(r.rocm, r.kmd) for r in rocm.releases] == [
        ("5.7", ("5.5", "5.6", "5.7", "6.0", "6.1")),
        ("6.2", ("6.0", "6.1", "6.2", "6.3")),
        ("7.0", ("30.30",)),
        ("7.2", ("30.30",)),
    ]
    text = (ROOT / "builder/compat/data/compat.yaml").read_text(encoding="utf-8")
    for old, new, match in (
        ('kmd: ["6.0", "6.1", "6.2", "6.3"]', 'kmd: ["6.1", "6.0", "6.2", "6.3"]', "sorted"),
        ('kmd: ["6.0", "6.1", "6.2", "6.3"]', 'kmd: ["6.x"]', "major.minor"),
    ):
        bad = tmp_path / "compat.yaml"
        bad.write_text(text.replace(old, new, 1), encoding="utf-8")
        with pytest.raises(UserError, match=match):
            load_table(bad)


def test_the_module_version_file_is_read_only_when_it_is_a_version(tmp_path: Path) -> None:
    assert amdgpu_version(tmp_path) is None  # the kernel's own in-tree amdgpu has no such file
    (tmp_path / "sys/module/amdgpu").mkdir(parents=True)
    (tmp_path / "sys/module/amdgpu/version").write_text("6.8.5\n")
    assert amdgpu_version(tmp_path) == "6.8.5"
    (tmp_path / "sys/module/amdgpu/version").write_text("$(rm -rf /)\n")
    assert amdgpu_version(tmp_path) is None


# -- what a ROCm image runs on: one cell ------------------------------------------------------------------------


def test_the_cupy_image_runs_on_the_targets_of_its_code_objects() -> None:
    cell = runs_on(rocm_record(committed_fit(CUPY)), table())
    assert cell.label == f"{CUPY_TARGETS}, Linux >= 4.18, amd64 (measured)"
    assert cell.to_json()["kernel"] == "4.18" and cell.source == "measured"


def test_compressed_bundles_are_said_not_guessed() -> None:
    cell = rocm_runs_on(committed_fit(JAX), "7.0", "amd64", table())
    assert cell.gpus == "gfx ? (compressed code objects (zstd) not read)"


def test_a_record_without_its_code_objects_says_so() -> None:
    assert runs_on(rocm_record(None), table()).label == "gfx ? (its code objects are not measured), Linux >= 4.18, amd64 (table)"


def test_gfx_targets_intersect_frameworks_expand_generics_and_leave_out_one_xnack_mode() -> None:
    """A generic code object covers every processor it runs on (LLVM's table); a processor only one
    xnack mode runs is `unknown` for a GPU named without one, so it is not listed as a yes."""
    fit = AmdFit(
        "wheels",
        "7.0",
        (
            AmdLibrary("a/one.so", (("gfx11-generic", 1), ("gfx90a:xnack+", 1), ("gfx942", 1))),
            AmdLibrary("a/two.so", (("gfx1100", 1), ("gfx1101", 1), ("gfx90a:xnack+", 1), ("gfx942", 1))),
            AmdLibrary("b/three.so", (("gfx1100", 1),)),
        ),
        (AmdFramework("a", ("a/one.so", "a/two.so")), AmdFramework("b", ("b/three.so",))),
    )
    assert gfx_targets(fit, table()) == ("gfx1100",)
    alone = dataclasses.replace(fit, frameworks=fit.frameworks[:1])
    assert gfx_targets(alone, table()) == ("gfx942", "gfx1100", "gfx1101")
    base = dataclasses.replace(fit, frameworks=())  # a base's libraries: no framework says which it loads, so their union
    assert gfx_targets(base, table()) == ("gfx90a", "gfx942", "gfx1100", "gfx1101", "gfx11-generic")


# -- whether this host's gfx targets are covered: the same rule as `fit` ----------------------------------------


def test_a_rocm_record_with_its_fit_is_judged_from_its_code_objects() -> None:
    """Before, every ROCm record was `unknown` (no gfx targets in the tables): now pull and fit judge it."""
    rec = rocm_record(committed_fit(CUPY))
    yes = judge(rec, amd_host("gfx942"), table())
    assert yes.status == "fits" and "cupy 14.2.0 runs on gfx942" in yes.reason
    assert "kernel driver not checked: the host's kernel is not known" in yes.reason  # a described host: only noted
    no = judge(rec, amd_host("gfx906"), table())
    assert no.status == "does not fit" and "cub.cpython-312-x86_64-linux-gnu.so" in no.reason and "none for gfx906" in no.reason
    assert judge(rocm_record(None), amd_host("gfx942"), table()).status == "unknown"


def test_a_detected_kernel_decides_or_leaves_it_unknown_never_a_pass() -> None:
    rec = rocm_record(committed_fit(CUPY))
    old = judge(rec, amd_host("gfx942", kernel="4.15.0-20-generic"), table())
    assert old.status == "does not fit" and "Linux 4.15 is older than every kernel AMD supports ROCm 7.0 on" in old.reason
    in_tree = judge(rec, amd_host("gfx942", kernel="6.8.0-45-generic"), table())
    assert in_tree.status == "unknown" and "the kernel driver: Linux 6.8 >= 4.18, but its amdgpu driver has no version" in in_tree.reason


def test_doctor_gfx_finding_names_the_cell_and_the_library(embedded_plan: Plan) -> None:
    spec = next(s for s in embedded_plan.images if s.id == CUPY)
    yes = gfx_verdict(spec, amd_host("gfx90a"), table())
    assert yes.status == "fits" and yes.reason.startswith(
        f"{CUPY} runs on {CUPY_TARGETS}, Linux >= 4.18, amd64 (measured); this host's gfx90a: "
    )
    assert yes.runs_on == f"{CUPY_TARGETS}, Linux >= 4.18, amd64 (measured)"
    no = gfx_verdict(spec, amd_host("gfx803"), table())
    assert no.status == "does not fit" and "cub.cpython-312-x86_64-linux-gnu.so" in no.reason
    node = DeviceNode("/dev/kfd", 109, "render", True)
    facts = HostInfo(
        EngineFacts(True),
        NvidiaInfo(status="absent"),
        AmdInfo(kfd=node, render_nodes=(dataclasses.replace(node, path="/dev/dri/renderD128"),)),
    )
    (verdict,) = doctor.image_verdicts(facts, [spec], lambda s: gfx_verdict(s, amd_host("gfx803"), table()))
    assert verdict.status == "fail" and "none for gfx803" in verdict.reason


def test_the_report_shows_a_planned_rocm_images_gfx_cell(embedded_plan: Plan) -> None:
    specs = [s for s in embedded_plan.images if s.id in (CUPY, JAX)]
    rows = {r.id: r for r in build_report(embedded_plan, specs, {}, [], {}).rows}
    assert rows[CUPY].runs_on == f"{CUPY_TARGETS}, Linux >= 4.18, amd64 (measured)"
    assert rows[JAX].runs_on.startswith("gfx ? (compressed code objects (zstd) not read)")


def test_a_record_carries_its_amd_fit_and_old_records_keep_their_form() -> None:
    fit = committed_fit(CUPY)
    rec = rocm_record(fit)
    data = rec.to_json()
    assert data["amd"] == fit.to_json()
    assert records.from_json(json.loads(json.dumps(data)), "catalog").amd == fit
    assert "amd" not in rocm_record(None).to_json()
    with pytest.raises(records.RecordError, match="amd"):
        records.from_json({**data, "amd": {**fit.to_json(), "libraries": "x"}}, "catalog")


# -- the one table of ROCm device flags ------------------------------------------------------------------------


def rocm_host(gid: int | None = None) -> HostInfo:
    amd = AmdInfo(kfd=DeviceNode("/dev/kfd", gid, "render", True)) if gid is not None else AmdInfo()
    return HostInfo(EngineFacts(True), NvidiaInfo(status="absent"), amd)


def test_pull_and_env_shell_get_required_and_recommended_flags_from_the_table() -> None:
    assert smoke_args.gpu_flags("rocm", rocm_host()) == [
        "--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video", "--group-add", "render", "--ipc=host", "--shm-size", "8G",
    ]  # fmt: skip
    assert smoke_args.gpu_flags("rocm", rocm_host(109))[4:6] == ["--group-add", "109"]  # the group this host's nodes have
    line = smoke_args.docker_run_line("rocm", "r@sha256:x", rocm_host())
    assert line.startswith("docker run --rm -it --device /dev/kfd --device /dev/dri --group-add video --group-add render --ipc=host")


def test_the_smoke_containers_stay_locked_down() -> None:
    """Only the required device rows reach a smoke container: no shared IPC, no lifted seccomp filter."""
    smoke = [f for f in smoke_args.ROCM_FLAGS if f.smoke]
    assert {f.need for f in smoke} == {"required"}
    assert not any("seccomp=unconfined" in " ".join(f.args) for f in smoke)
    assert smoke_args.rocm_flags(rocm_host(), smoke=True) == [
        "--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video", "--group-add", "render",
    ]  # fmt: skip
    assert "seccomp" not in " ".join(smoke_args.gpu_flags("rocm", rocm_host()))


def test_the_note_says_which_flags_are_required_recommended_and_optional() -> None:
    note = smoke_args.rocm_flags_note()
    required, recommended, optional = note.split(" - ", 1)[1].split(" | ")
    assert required.startswith("required: --device /dev/kfd") and "--group-add render" in required
    assert recommended.startswith("recommended: --ipc=host") and "--shm-size 8G" in recommended
    assert optional.startswith("optional: --security-opt seccomp=unconfined") and "never adds it" in optional


# -- `builder doctor --image` on a local ROCm image ---------------------------------------------------------------


def test_doctor_image_judges_a_rocm_image_from_its_planned_fit(embedded_workspace: Workspace) -> None:
    """The labels say which planned image it was built from (id and content hash): that image's
    fit.json `amd` part is its measured fit. A build of other content gets no fit, and says so."""
    from tests.fake_engine import FakeEngine, connect_to
    from tests.test_usecase_fit import rendered_labels

    [spec] = embedded_workspace.selected(f"id={CUPY}", use_default=False)
    built = {**rendered_labels(CUPY), "io.builder.content-hash": spec.content_hash}
    engine = FakeEngine()
    engine.add_image("sha256:cupy", "local/cupy:rocm", labels=built)
    engine.add_image("sha256:other", "local/cupy:other", labels={**built, "io.builder.content-hash": "sha256:" + "0" * 64})
    yes = doctoring.image_fit("local/cupy:rocm", amd_host("gfx1100"), connect_to(engine), ws=embedded_workspace)
    assert yes.fit.status == "fits" and "cupy 14.2.0 runs on gfx1100" in yes.fit.reason
    assert yes.runs_on.label == f"{CUPY_TARGETS}, Linux >= 4.18, amd64 (measured)"
    no = doctoring.image_fit("local/cupy:rocm", amd_host("gfx906"), connect_to(engine), ws=embedded_workspace)
    assert no.fit.status == "does not fit" and not no.ok
    other = doctoring.image_fit("local/cupy:other", amd_host("gfx1100"), connect_to(engine), ws=embedded_workspace)
    assert other.fit.status == "unknown" and other.runs_on.gpus == "gfx ? (its code objects are not measured)"


# -- `builder pull` of a ROCm record ---------------------------------------------------------------------------------


def test_pull_judges_a_rocm_record_says_what_it_runs_on_and_prints_the_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.catalog.store import Catalog
    from builder.host import facts as hostinfo
    from builder.usecases import pull as pulling
    from tests.catalog_fixtures import SHA
    from tests.fake_engine import FakeEngine, connect_to

    monkeypatch.setattr(hostinfo, "gather", lambda **kwargs: rocm_host(109))
    repo = "127.0.0.1:5000/gpu-images"
    store = Catalog(tmp_path / "catalog")
    store.add([dataclasses.replace(rocm_record(committed_fit(CUPY)), tag=f"{repo}:{CUPY}", digest=f"{repo}@sha256:{SHA}")], {})
    fake = FakeEngine()
    with pytest.raises(Exception, match="none for gfx906"):
        pulling.pull(
            store, "cupy=14.2.0", log=lambda line: None, wait_s=0.001, connect=connect_to(fake), check=pulling.FitCheck(amd_host("gfx906"))
        )
    assert fake.pulls == [], "refused before anything is pulled"
    pulled = pulling.pull(
        store, "cupy=14.2.0", log=lambda line: None, wait_s=0.001, connect=connect_to(fake), check=pulling.FitCheck(amd_host("gfx942"))
    )
    assert pulled.fit.startswith("fits this host: cupy 14.2.0 runs on gfx942 through the code objects of its 3 libraries")
    assert pulled.runs_on == f"{CUPY_TARGETS}, Linux >= 4.18, amd64 (measured)"
    assert pulled.run_line.startswith("docker run --rm -it --device /dev/kfd --device /dev/dri --group-add 109 --ipc=host --shm-size 8G ")
    assert smoke_args.rocm_flags_note() in pulled.note.splitlines()
