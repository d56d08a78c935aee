"""Each locked CUDA image's fit, measured from its locked wheels (images/<id>/fit.json, issue 38):
which wheel a lock installs, a wheel's device code read from the file, the readings put together
and judged by the rules of a built image's measure, the claims made from them, `fit --planned`.

Offline: the committed fit.json files are the measurement (done once, by `builder lock`); these tests
hold them current, equal to the in-image scans of the images built here (tests/fixtures/fit/), and
every claim to them. The cross-check with NVIDIA's cuobjdump on real wheels is
tests/integration/test_wheel_fit_real.py (it reads wheels).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import Result
from packaging.utils import canonicalize_name

from builder.compat import gpu_arch
from builder.compat.rules import Nvrtc, framework, table
from builder.fit import fatbin, scan, wheels
from builder.lock.claims import cc_floor
from builder.lock.wheels import IndexFile, Pin, pick, target_tags, twin_of
from builder.model.locked_fit import FIT_NAME, WheelCode, from_json, lock_digest, reading_from_json, scan_output, variant_properties
from builder.model.measured_fit import KNOWN_CCS
from builder.model.plan import ImageSpec
from builder.model.versions import cc_tuple
from builder.render.formats import ROCM_RUNS_ON
from builder.updates.wheelfiles import FetchFailed, WheelFiles, parse_listing
from builder.usecases import lock as locking
from builder.usecases import measure as measuring
from builder.workspace import Workspace
from tests.conftest import ROOT, RunCli
from tests.fake_index import serve_index

IMAGES = ROOT / "images"
SCANS = Path(__file__).parent / "fixtures" / "fit"
PROBE = Path(__file__).parent / "fixtures" / "cuobjdump" / "probe.o"  # a real ELF with a fatbin (sm_75 sm_86 compute_86 ...)
NVRTC_13 = Path("/opt/pypi-more/files/nvidia_cuda_nvrtc-13.0.88-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl")


def workspace() -> Workspace:
    return Workspace(ROOT / "matrix.yaml")


def measured_specs() -> list[ImageSpec]:
    return [spec for spec in workspace().decided.images if measuring.measured(spec)]


def spec_of(image: str) -> ImageSpec:
    return next(spec for spec in workspace().decided.images if spec.id == image)


# -- which wheel of a pin the image installs ------------------------------------------------------


def files(*names: str) -> list[IndexFile]:
    return [IndexFile(name, f"https://files.example/{name}", hashlib.sha256(name.encode()).hexdigest()) for name in names]


def sha(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


LISTED = files(
    "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl",
    "torch-2.14.1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "torch-2.14.1-cp311-cp311-manylinux_2_28_aarch64.whl",
    "torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl",
    "torch-2.14.1-cp311-cp311-win_amd64.whl",
    "torch-2.14.1.tar.gz",
)
TORCH = Pin("torch", "2.14.1", tuple(f.sha256 or "" for f in LISTED))


def test_the_wheel_is_the_one_whose_tags_rank_first_for_the_target() -> None:
    assert pick(LISTED, TORCH, target_tags("3.11", "x86_64-manylinux_2_36")) == LISTED[0]
    assert pick(LISTED, TORCH, target_tags("3.11", "x86_64-manylinux_2_27")) == LISTED[1], "glibc 2.27 cannot take a 2_28 wheel"
    assert pick(LISTED, TORCH, target_tags("3.11", "aarch64-manylinux_2_36")) == LISTED[2]
    assert pick(LISTED, TORCH, target_tags("3.12", "x86_64-manylinux_2_39")) == LISTED[3]
    assert pick(LISTED, TORCH, target_tags("3.13", "x86_64-manylinux_2_39")) is None, "no cp313 wheel: no file"


def test_only_a_file_the_lock_allows_is_taken() -> None:
    only_old = dataclasses.replace(TORCH, hashes=(LISTED[1].sha256 or "",))
    assert pick(LISTED, only_old, target_tags("3.11", "x86_64-manylinux_2_36")) == LISTED[1]
    renamed = [dataclasses.replace(LISTED[0], filename="evil-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl")]
    assert pick(renamed, TORCH, target_tags("3.11", "x86_64-manylinux_2_36")) is None, "a file of another project, even with the hash"
    with pytest.raises(ValueError, match="not a manylinux target"):
        target_tags("3.11", "win_amd64")


def test_an_aarch64_wheel_has_its_x86_64_twin() -> None:
    twin = twin_of(LISTED, LISTED[2].filename, "x86_64")
    assert twin is not None and twin.filename.endswith("x86_64.whl") and "cp311" in twin.filename
    assert (
        twin_of(
            files("nvidia_cuda_nvrtc-13.0.88-py3-none-manylinux_2_17_aarch64.whl"),
            "nvidia_cuda_nvrtc-13.0.88-py3-none-manylinux_2_17_aarch64.whl",
            "x86_64",
        )
        is None
    )


# -- a wheel's device code, read from the file --------------------------------------------------------


def make_wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_a_wheel_is_read_as_its_files_are_installed(tmp_path: Path) -> None:
    probe = PROBE.read_bytes()
    wheel = make_wheel(
        tmp_path / "pkg-1.0-py3-none-manylinux_2_28_x86_64.whl",
        {
            "pkg/lib/libkernels.so": probe,
            "pkg-1.0.data/platlib/other/libmore.so.2": probe,
            "pkg-1.0.data/scripts/libnot-installed-in-site-packages.so": probe,
            "../escape/libevil.so": probe,
            "pkg/lib/libplain.so": b"\x7fELF not really",
            "pkg/__init__.py": b"",
        },
    )
    code = wheels.read_wheel(wheel, "a" * 64, wheel.name, tmp_path)
    rows = tuple(sorted((*key, 1) for key in scan.read(str(PROBE))))
    assert [(lib.path, lib.entries) for lib in code.libraries] == [("other/libmore.so.2", rows), ("pkg/lib/libkernels.so", rows)]
    assert code.tops == ("other", "pkg") and code.machine == "x86_64" and code.foreign == ()
    assert fatbin.embedded(((kind, sm, flags, isa), n) for kind, sm, flags, isa, n in rows) == fatbin.read(PROBE)
    assert not list(tmp_path.glob("member*")), "the one member copied out at a time is deleted"


def test_what_cannot_be_loaded_here_is_left_to_the_twin(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "nvidia_cuda_nvrtc-13.0.88-py3-none-manylinux_2_17_aarch64.whl", {"nvidia/cu13/lib/libnvrtc.so.13": b"x"})
    code = wheels.read_wheel(wheel, "b" * 64, wheel.name, tmp_path)
    assert code.machine == "aarch64" and code.foreign == ("nvidia/cu13/lib/libnvrtc.so.13",) and code.nvrtc == ()


def test_a_wheel_that_is_not_one_or_unpacks_too_far_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "x-1.0-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(wheels.BadWheel, match="is not a readable zip"):
        wheels.read_wheel(bad, "c" * 64, bad.name, tmp_path)
    big = make_wheel(tmp_path / "big-1.0-py3-none-manylinux_2_28_x86_64.whl", {"big/libhuge.so": b"\0" * 4096})
    monkeypatch.setattr(wheels, "MAX_MEMBER", 1024)
    with pytest.raises(wheels.BadWheel, match="would unpack past"):
        wheels.read_wheel(big, "d" * 64, big.name, tmp_path)


@pytest.mark.skipif(not NVRTC_13.is_file(), reason=f"{NVRTC_13} is on every machine of this kind (ENVIRONMENT.md), not here")
def test_nvrtc_is_asked_for_its_version_and_architectures(tmp_path: Path) -> None:
    """The real nvidia-cuda-nvrtc 13.0.88 wheel: what numba-cuda's @cuda.jit compiles with."""
    code = wheels.read_wheel(NVRTC_13, "e" * 64, NVRTC_13.name, tmp_path)
    [compiler] = code.nvrtc
    assert (compiler.path, compiler.version) == ("nvidia/cu13/lib/libnvrtc.so.13", "13.0")
    assert compiler.archs == (75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121)
    committed = spec_of("numba0.68.0-cu130-py3.11-debian12").locked_fit
    assert committed is not None and committed.fit is not None and committed.fit.jit is not None
    assert committed.fit.jit.archs == tuple(f"sm_{a}" for a in compiler.archs), "the committed reading is this library's"


# -- the readings put together and judged --------------------------------------------------------------


def test_every_locked_cuda_image_has_its_fit_measured_and_current() -> None:
    """What `builder lock --check` holds in CI: one fit.json per locked CUDA image, of its lock, and
    what today's rules make of its readings."""
    specs = measured_specs()
    assert len(specs) >= 40
    results = locking.check(specs)
    assert [(r.id, r.file, r.detail) for r in results if r.status != "current"] == []
    for spec in specs:
        assert spec.locked_fit is not None and spec.lock is not None
        assert spec.locked_fit.lock == lock_digest(spec.lock.text)
        text = (IMAGES / spec.id / FIT_NAME).read_text(encoding="utf-8")
        assert spec.locked_fit.text() == text, f"{spec.id}: fit.json is not the canonical text `builder lock` writes"


def test_a_fit_of_another_lock_or_edited_by_hand_is_stale() -> None:
    spec = spec_of("torch2.14.1-cu130-py3.11-debian12")
    assert spec.locked_fit is not None and spec.locked_fit.fit is not None
    assert measuring.stale(spec, table()) is None
    edited = dataclasses.replace(spec.locked_fit, fit=dataclasses.replace(spec.locked_fit.fit, frameworks=()))
    assert "not what its wheels' readings give" in (measuring.stale(dataclasses.replace(spec, locked_fit=edited), table()) or "")
    other = dataclasses.replace(spec.locked_fit, lock=lock_digest("another lock"))
    assert "another lock" in (measuring.stale(dataclasses.replace(spec, locked_fit=other), table()) or "")
    assert "no fit.json" in (measuring.stale(dataclasses.replace(spec, locked_fit=None), table()) or "")
    [result] = locking.check([dataclasses.replace(spec, locked_fit=None)])
    assert (result.status, result.file) == ("missing", FIT_NAME) and f"builder lock --select id={spec.id}" in result.detail


@pytest.mark.parametrize("scan_file", sorted(SCANS.glob("*.scan.json")), ids=lambda p: p.name.removesuffix(".scan.json"))
def test_the_wheels_say_what_the_built_image_said(scan_file: Path) -> None:
    """fit/scan.py's output inside each image built here (tests/fixtures/fit/) equals the readings of
    its locked wheels, library by library: the same files, the same fatbin entries, the same
    libcudart and NVRTC, the same framework folders."""
    image = scan_file.name.removesuffix(".scan.json")
    found = spec_of(image).locked_fit
    assert found is not None
    built = json.loads(scan_file.read_text(encoding="utf-8"))
    mine = scan_output(found.wheels, found.folders)
    assert {lib["path"]: lib["entries"] for lib in mine["libraries"]} == {lib["path"]: lib["entries"] for lib in built["libraries"]}
    assert (mine["cudart"], mine["nvrtc"], mine["frameworks"]) == (built["cudart"], built["nvrtc"], built["frameworks"])


def test_readings_are_checked_when_read_back() -> None:
    committed = spec_of("numba0.68.0-cu130-py3.11-debian12").locked_fit
    assert committed is not None
    code = committed.wheels[0].code.to_json()

    def fail(what: str) -> ValueError:
        return ValueError(what)

    assert reading_from_json(code, fail) == committed.wheels[0].code
    for broken, words in (
        ({**code, "schema": 99}, "schema"),
        ({**code, "sha256": "x"}, "64 hex digits"),
        ({**code, "libraries": [{"path": "a.so", "entries": [[2, 75, 0, 0]]}]}, "rows of whole numbers"),
        ({**code, "nvrtc": [{"path": "n.so", "version": "13.0", "archs": ["sm_75"]}]}, "numbers like 75"),
        ({**code, "filename": 1}, r"^'reading\.filename' must be text$"),
        ({k: v for k, v in code.items() if k != "machine"}, r"^'reading\.machine' must be text$"),
        ({**code, "cudart": {"libcudart.so": 13}}, r"^'reading\.cudart\.libcudart\.so' must be text$"),
        ({**code, "offload": {"a.so": {"sm_75": 1}}}, r"^'reading\.offload' must map each library to target IDs"),
    ):
        with pytest.raises(ValueError, match=words) as caught:
            reading_from_json(broken, fail)
        assert "\n" not in str(caught.value)
    whole = committed.to_json()
    wheel = whole["wheels"][0]
    for broken, words in (
        ({**whole, "wheels": [{**wheel, "name": 1}]}, r"^'wheels\[\]\.name' must be text$"),
        ({**whole, "wheels": [{**wheel, "role": "mine"}]}, "a wheel's role must be one of locked, twin, base"),
        ({**whole, "folders": {"torch": "torch"}}, r"^'folders\.torch' must be a list of text$"),
        ({**whole, "image": None}, r"^'image' must be text$"),
    ):
        with pytest.raises(ValueError, match=words) as caught:
            from_json(broken, fail)
        assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="'unknown' does not say why"):
        from_json({**whole, "fit": None, "unknown": None}, fail)
    with pytest.raises(ValueError, match="schema"):
        from_json({**whole, "extra": 1}, fail)


class Listed(WheelFiles):
    """The readings a committed fit.json holds, listed as an index would list their files: measuring
    again from them fetches nothing (each reading is found by its sha256)."""

    def __init__(self, readings: list[WheelCode]) -> None:
        super().__init__([])
        self.listed = [IndexFile(r.filename, f"https://files.example/{r.filename}", r.sha256) for r in readings]
        self.fetched: list[str] = []

    def files(self, project: str) -> list[IndexFile]:
        return [f for f in self.listed if canonicalize_name(f.filename.split("-", 1)[0]) == canonicalize_name(project)]

    def fetch(self, file: IndexFile, sha256: str, folder: Path) -> Path:
        self.fetched.append(file.filename)
        raise FetchFailed(f"{file.filename} is not here")


@pytest.mark.parametrize(
    "image",
    [
        "torch2.14.1-cu130-py3.11-debian12-arm64",  # twins: aarch64 NVRTC and libcudart read from x86_64
        "cupy13.6.0-cu124-py3.11-ubuntu22.04",  # base: NVRTC and libcudart of the nvidia/cuda base's CUDA
        "numba0.68.0-cu124-py3.11-ubuntu22.04",
    ],
)
def test_measuring_again_from_the_same_readings_gives_the_committed_fit(image: str, tmp_path: Path) -> None:
    spec = spec_of(image)
    assert spec.locked_fit is not None
    readings = [w.code for w in spec.locked_fit.wheels]
    listed = Listed(readings)
    done: list[measuring.MeasureResult] = []
    results, made = measuring.measure_images([spec], listed, measuring.Readings(tmp_path, readings), done.append, force=True)
    assert [(r.id, r.status, r.fetched) for r in results] == [(image, "measured", 0)] and listed.fetched == []
    assert made[image] == spec.locked_fit


def test_a_pin_without_a_wheel_for_the_target_is_one_line(tmp_path: Path) -> None:
    spec = spec_of("numba0.68.0-cu130-py3.11-debian12")
    assert spec.locked_fit is not None
    readings = [w.code for w in spec.locked_fit.wheels]
    listed = Listed(readings[1:])
    [result], made = measuring.measure_images([spec], listed, measuring.Readings(tmp_path), lambda r: None, force=True)
    assert result.status == "failed" and made == {}
    assert "no file the index lists with the lock's hashes is a wheel for x86_64-manylinux_2_36" in result.detail


def test_numba_of_its_builtin_target_says_what_the_wheels_cannot_tell() -> None:
    found = spec_of("numba0.68.0-cu118-py3.11-ubuntu22.04").locked_fit
    assert found is not None and found.fit is None and "NVVM" in (found.unknown or "")
    entry = json.loads((IMAGES / found.image / "image.json").read_text(encoding="utf-8"))
    assert entry["runs_on"]["gpus"] is None and "cc_min" not in entry


# -- each framework's rule for what it compiles at run time ----------------------------------------------------

NVRTC_124 = Nvrtc("12.4", (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90))
NVRTC_128 = Nvrtc("12.8", (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 120))
NVRTC_130 = Nvrtc("13.0", (75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121))


@pytest.mark.parametrize(
    ("nvrtc", "device", "refused"),
    [
        (NVRTC_124, (9, 0), False),
        (NVRTC_124, (8, 6), False),
        (NVRTC_124, (10, 0), True),  # compute_100a: NVRTC 12.4 has no sm_100
        (NVRTC_124, (12, 0), True),
        (NVRTC_128, (12, 0), False),
        (NVRTC_128, (10, 3), True),  # compute_103a came with 12.9
        (NVRTC_128, (12, 1), True),  # no fallback to sm_120 with an arch-specific target
        (NVRTC_130, (7, 0), True),  # below NVRTC 13's lowest
        (NVRTC_130, (12, 1), False),
    ],
)
def test_numba_cuda_asks_nvrtc_for_the_gpus_own_arch_specific_target(nvrtc: Nvrtc, device: tuple[int, int], refused: bool) -> None:
    why = framework("numba").jit_refusal(device, nvrtc, "0.68.0", table())
    assert (why is not None) == refused, why


@pytest.mark.parametrize(
    ("release", "nvrtc", "device", "words"),
    [
        ("14.0.0", NVRTC_124, (9, 0), None),
        ("14.0.0", NVRTC_124, (10, 0), "for sm_90 at most"),  # capped sm_90 code never runs on 10.0
        ("14.2.0", NVRTC_128, (12, 0), None),
        ("14.2.0", NVRTC_128, (12, 1), None),  # capped at sm_120: runs within the 12.x family
        ("14.2.0", NVRTC_128, (10, 3), "does not know sm_103"),
        ("13.6.0", NVRTC_130, (12, 1), None),  # 13.6 caps at 12.0 even with NVRTC 13
        ("13.6.0", NVRTC_130, (7, 0), "targets 7.5 and newer"),
    ],
)
def test_cupy_compiles_a_capped_cubin_for_the_gpu(release: str, nvrtc: Nvrtc, device: tuple[int, int], words: str | None) -> None:
    why = framework("cupy").jit_refusal(device, nvrtc, release, table())
    assert (why is None) if words is None else (words in (why or "")), why


# -- every claim from the measurement ----------------------------------------------------------------------


@pytest.mark.parametrize("spec", measured_specs(), ids=lambda s: s.id)
def test_every_claim_is_the_measurement(spec: ImageSpec) -> None:
    entry = json.loads((IMAGES / spec.id / "image.json").read_text(encoding="utf-8"))
    dockerfile = (IMAGES / spec.id / "Dockerfile").read_text(encoding="utf-8")
    found = spec.locked_fit
    assert found is not None
    if found.fit is None:  # what the wheels cannot tell, or a ROCm image's gfx targets (fit.json's amd part): a reason either way
        why = ROCM_RUNS_ON if found.amd is not None else found.unknown
        assert why and entry["runs_on"] == {"gpus": None, "unknown": why, "source": "wheels"}, spec.id
        assert "io.builder.cc-min" not in dockerfile and "io.builder.runs-on" not in dockerfile
        return
    runs_on = found.fit.runs_on
    assert entry["runs_on"]["gpus"] == list(runs_on) and runs_on, spec.id
    assert entry["cc_min"] == runs_on[0] and f'io.builder.cc-min="{runs_on[0]}"' in dockerfile
    assert f'io.builder.runs-on="{" ".join(runs_on)}"' in dockerfile
    loaded = {path for f in found.fit.frameworks for path in f.libraries}
    own = [lib for lib in found.fit.libraries if lib.path in loaded and not lib.path.startswith("nvidia/")]
    assert entry["runs_on"]["ptx"] == found.ptx == (bool(own) and all(lib.ptx for lib in own))
    assert entry["variant_properties"] == list(variant_properties(runs_on, spec.accelerator.require_cuda))
    cuda = (spec.accelerator.require_cuda or "").split()[0].removeprefix("cuda>=")
    assert entry["variant_properties"][0] == f"nvidia :: cuda_version_lower_bound :: {cuda}"
    # the smoke checks read `variants` as framework -> wheel variant (torch: cu130): the properties
    # once took that key, and every CUDA image's smoke test failed on a list where a mapping was
    assert entry["variants"] == {i.framework: i.variant for i in spec.installs}


def test_the_audits_cases_are_what_the_measurement_says() -> None:
    """Issue 38's audit, from the committed fit.json: aarch64 torch starts at 8.0, x86 torch cu130
    has no 7.5 (linalg) and no 11.0 (a set, not a range), torch cu130/cu132 carries no PTX, jax
    0.4.35 (kept for older GPUs) is held at 6.0 by its NCCL."""

    def runs(image: str) -> tuple[str, ...]:
        found = spec_of(image).locked_fit
        assert found is not None and found.runs_on is not None
        return found.runs_on

    assert runs("torch2.14.1-cu130-py3.11-debian12-arm64")[0] == "8.0"
    x86 = runs("torch2.14.1-cu130-py3.11-debian12")
    assert x86[0] == "8.0" and "11.0" not in x86 and "12.0" in x86 and "10.0" in x86
    for image in ("torch2.14.1-cu130-py3.11-debian12", "torch2.15.0-cu132-py3.11-debian12"):
        assert json.loads((IMAGES / image / "image.json").read_text())["runs_on"]["ptx"] is False
    assert "12.0" not in runs("numba0.68.0-cu124-py3.11-ubuntu22.04") and "9.0" in runs("numba0.68.0-cu124-py3.11-ubuntu22.04")
    assert "10.3" not in runs("numba0.68.0-cu128-py3.12-ubuntu24.04")
    assert runs("jax0.4.35-cu124-py3.11-ubuntu22.04")[0] == "6.0"


# -- `builder fit --planned` ------------------------------------------------------------------------------------


def planned(cli: RunCli, *args: str) -> Result:
    return cli("--matrix", str(ROOT / "matrix.yaml"), "fit", "--planned", *args, "--format", "json")


def verdicts(result: Result) -> dict[str, str]:
    return {row["id"]: row["status"] for row in json.loads(result.stdout)["records"]}


ARM64_TORCH = "torch2.14.1-cu130-py3.11-debian12-arm64"


@pytest.mark.parametrize(
    ("image", "cc", "status"),
    [
        (ARM64_TORCH, "7.5", "does not fit"),  # PyPI's aarch64 torch starts at sm_80: a T4G (Graviton2) no
        (ARM64_TORCH, "9.0", "fits"),  # a GH200 yes
        ("torch2.14.1-cu130-py3.11-debian12", "7.5", "does not fit"),  # x86: libtorch_cuda_linalg.so starts at sm_80
        ("numba0.68.0-cu124-py3.11-ubuntu22.04", "12.0", "does not fit"),  # NVRTC 12.4 knows no compute_120a
        ("numba0.68.0-cu124-py3.11-ubuntu22.04", "9.0", "fits"),
        ("numba0.68.0-cu128-py3.12-ubuntu24.04", "10.3", "does not fit"),  # NVRTC 12.8 knows no compute_103a (B300)
    ],
)
def test_planned_images_are_judged_from_their_measured_wheels(cli: RunCli, image: str, cc: str, status: str) -> None:
    arm64 = image == ARM64_TORCH
    query = ["torch=2.14.1", "platform=linux/arm64"] if arm64 else [f"id={image}"]  # the audit's query, and one image's
    result = planned(cli, *query, "--arch", "arm64" if arm64 else "amd64", "--gpu-cc", cc, "--vendor", "nvidia", "--driver", "580.65.06")
    assert verdicts(result)[image] == status, result.output
    assert result.exit_code == (0 if status == "fits" else 1), result.output
    row = next(r for r in json.loads(result.stdout)["records"] if r["id"] == image)
    assert row["measured"] and "measured from its locked wheels" in row["reason"]
    assert json.loads(result.stdout)["planned"] is True


def test_a_planned_verdict_names_the_cause(cli: RunCli) -> None:
    numba = planned(cli, "id=numba0.68.0-cu124-py3.11-ubuntu22.04", "--vendor", "nvidia", "--arch", "amd64", "--gpu-cc", "12.0")
    reason = json.loads(numba.stdout)["records"][0]["reason"]
    assert "compute_120a" in reason and "NVRTC 12.4" in reason, reason
    linalg = planned(cli, "id=torch2.14.1-cu130-py3.11-debian12", "--vendor", "nvidia", "--arch", "amd64", "--gpu-cc", "7.5")
    assert "libtorch_cuda_linalg.so" in json.loads(linalg.stdout)["records"][0]["reason"]
    table_text = cli(
        "--matrix",
        str(ROOT / "matrix.yaml"),
        "fit",
        "--planned",
        "id=torch2.14.1-cu130-py3.11-debian12",
        "--vendor",
        "nvidia",
        "--arch",
        "amd64",
        "--gpu-cc",
        "9.0",
    )
    assert table_text.exit_code == 0 and "builder build --select id=torch2.14.1-cu130-py3.11-debian12" in table_text.stdout


def test_a_planned_image_without_a_measured_fit_is_unknown_never_a_guess(cli: RunCli) -> None:
    result = planned(cli, "id=torch2.14.1-cu126-on-cu128-py3.12-ubuntu24.04", "--vendor", "nvidia", "--arch", "amd64", "--gpu-cc", "9.0")
    [row] = json.loads(result.stdout)["records"]
    assert row["status"] == "unknown" and "no lock" in row["reason"] and result.exit_code == 1
    builtin = planned(cli, "id=numba0.68.0-cu118-py3.11-ubuntu22.04", "--vendor", "nvidia", "--arch", "amd64", "--gpu-cc", "8.6")
    assert json.loads(builtin.stdout)["records"][0]["status"] == "unknown"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--planned", "nosuchkey=1"], ["query key 'nosuchkey' is in no planned image"]),
        (["--planned", "torch=2.14.1", "--gpu-cc", "sm_86"], ["compute capability 'sm_86'"]),
        (["--planned", "--library", str(PROBE)], ["not both"]),
        (["--planned", "--catalog", "x", "torch=2.14.1"], ["--planned judges the matrix's planned images"]),
    ],
)
def test_bad_planned_input_is_one_line_exit_2(cli: RunCli, args: list[str], words: list[str]) -> None:
    result = cli("--matrix", str(ROOT / "matrix.yaml"), "fit", *args, "--vendor", "nvidia")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and all(w in line for w in words), line


def test_no_planned_match_is_exit_1(cli: RunCli) -> None:
    result = planned(cli, "torch=9.9", "--vendor", "nvidia", "--gpu-cc", "9.0")
    assert result.exit_code == 1 and "no planned image matches" in result.output


# -- the hand table, cross-checked -----------------------------------------------------------------------------

# Where compat/data/gpu_arch.yaml (with compat.yaml's cuDNN floor, lock/claims.py `cc_floor`) says
# something else than an image's locked wheels: each disagreement (a pattern over the lines
# `disagreements` makes) and why. The table stays the floor of what nothing measured (unlocked
# images, records published before fits were measured); every claim of a measured image is its
# fit.json. A new disagreement fails here until it is explained or the table fixed; an explanation
# nothing matches any more fails too.
EXPLAINED = {
    r"^torch 2\.1[34]\.\d cu130 linux/amd64: floor 7\.5 in the table, 8\.0 measured$": "torch/lib/libtorch_cuda_linalg.so has no sm_75 cubin and no PTX; the table's S7 lists the build of libtorch_cuda.so",
    r"^torch 2\.1[34]\.\d cu130 linux/amd64: the table says it runs on 7\.5 11\.0, its wheels do not$": "7.5: libtorch_cuda_linalg.so (above); 11.0 (Thor): no torch library has sm_110 code or PTX, the table's range 7.5-12.0 assumes every CC between",
    r"^torch 2\.15\.0 cu132 linux/amd64: the table says it runs on 11\.0, its wheels do not$": "no torch library has sm_110 code or PTX (a set, not the table's range)",
    r"^torch 2\.1[45]\.\d cu13[02] linux/arm64: floor 7\.5 in the table, 8\.0 measured$": "PyPI's aarch64 torch wheels start at sm_80 (PyTorch builds its aarch64 CUDA wheels without Turing); the table has no rows per platform",
    r"^torch 2\.1[45]\.\d cu13[02] linux/arm64: the table says it runs on 7\.5, its wheels do not$": "the aarch64 floor above",
    r"^torch 2\.1[345]\.\d cu13[02] linux/(amd64|arm64): no PTX measured, the table says \+PTX$": "S7 says 12.0+PTX for Linux; no torch library of PyPI's cu130/cu132 wheels carries PTX, so no GPU newer than 12.x JIT-compiles them",
    r"^torch 2\.5\.1 cu124 linux/amd64: floor 5\.0 in the table, 5\.2 measured$": "the cuFFT 11.2 wheel torch 2.5.1 pins (nvidia-cufft-cu12 11.2.1.3) starts at sm_52, and NVIDIA's libraries are judged by their lowest target (fit/measure.py)",
    r"^torch 2\.5\.1 cu124 linux/amd64: the table says it runs on 5\.0, its wheels do not$": "the cuFFT floor above",
    r"^jax 0\.4\.35 cuda12 linux/amd64: floor 5\.2 in the table, 6\.0 measured$": "NCCL 2.32.3, which the lock pins, has no kernels below sm_60; the table's 5.2 is jaxlib's own (keep_older_gpus holds cuDNN, not NCCL)",
    r"^jax 0\.4\.35 cuda12 linux/amd64: the table says it runs on 5\.2 5\.3, its wheels do not$": "the NCCL floor above",
    r"^jax 0\.(10\.2|12\.0\.1) cuda12 linux/amd64: the table says it runs on 11\.0, its wheels do not$": "jax's CUDA 12.8 plugins name Thor sm_101 (its name before CUDA 13) and carry PTX for compute_120 only: no code for 11.0; the table's jax rows have no upper bound",
    r"^jax [\d.]+ cuda1[23] linux/(amd64|arm64): \+PTX measured, the table says none$": "every jax plugin library carries compute_120 PTX; the table's jax rows state no PTX (an understatement, not a wrong yes)",
    r"^numba 0\.(60\.0|68\.[01]) cu12 linux/amd64: the table says it runs on 10\.0 10\.3 11\.0 12\.0 12\.1, its wheels do not$": "numba-cuda asks NVRTC for compute_XYa on CC >= 9.0 and the NVRTC 12.4 of the cu124 locks has no Blackwell target; the table's 5.0-12.1 is numba-cuda's own",
    r"^numba 0\.(60\.0|68\.[01]) cu12 linux/amd64: the table says it runs on 10\.3 11\.0 12\.1, its wheels do not$": "the same rule with NVRTC 12.8 (cu128 locks): it knows sm_100, sm_101 and sm_120, not sm_103, sm_110 or sm_121",
}


def disagreements(specs: list[ImageSpec]) -> set[str]:
    """One line per way the table and an image's measured fit differ (repeats across Pythons and bases merged)."""
    compat = table()
    found: set[str] = set()
    for spec in specs:
        measured = spec.locked_fit
        rows = [row for i in spec.installs if (row := gpu_arch.lookup(i.framework, i.variant, i.version))]
        if measured is None or measured.fit is None or not rows:
            continue  # tensorflow and cupy have no rows: the table says nothing, the wheels do
        what = " ".join(f"{i.framework} {i.version} {i.variant}" for i in spec.installs) + f" {spec.platform}"
        floor = cc_floor(spec, compat)
        claimed = {
            cc
            for cc in KNOWN_CCS
            if all(r.contains(cc) or r.jit_only(cc) for r in rows) and (floor is None or cc_tuple(cc) >= cc_tuple(floor))
        }
        runs_on = set(measured.runs_on or ())
        if floor is not None and floor != measured.cc_min:
            found.add(f"{what}: floor {floor} in the table, {measured.cc_min} measured")
        if claimed - runs_on:
            found.add(f"{what}: the table says it runs on {' '.join(sorted(claimed - runs_on, key=cc_tuple))}, its wheels do not")
        if runs_on - claimed:
            found.add(f"{what}: its wheels run on {' '.join(sorted(runs_on - claimed, key=cc_tuple))}, the table does not say so")
        if all(r.ptx for r in rows) != measured.ptx:
            found.add(f"{what}: {'+PTX' if measured.ptx else 'no PTX'} measured, the table says {'none' if measured.ptx else '+PTX'}")
    return found


def test_every_disagreement_between_the_table_and_the_wheels_is_explained() -> None:
    found = disagreements(measured_specs())
    assert len(found) >= 20, "the audit's cases are among them"
    unexplained = sorted(line for line in found if not any(re.search(pattern, line) for pattern in EXPLAINED))
    assert unexplained == [], "explain each in EXPLAINED (or fix gpu_arch.yaml):\n" + "\n".join(unexplained)
    stale = sorted(pattern for pattern in EXPLAINED if not any(re.search(pattern, line) for line in found))
    assert stale == [], f"explanations of disagreements that are gone: {stale}"
    twice = sorted(line for line in found if sum(bool(re.search(p, line)) for p in EXPLAINED) > 1)
    assert twice == [], f"explained twice: {twice}"


# -- the index's files, fetched by their sha256 -----------------------------------------------------------------


def test_a_listing_is_read_as_pep_691_json_or_pep_503_html() -> None:
    page = "https://pypi.example/simple/torch/"
    doc = {
        "files": [
            {
                "filename": "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl",
                "url": "../../f/t.whl",
                "hashes": {"sha256": "ab" * 32},
                "size": 5,
            }
        ]
    }
    [found] = parse_listing(json.dumps(doc).encode(), "application/vnd.pypi.simple.v1+json", page)
    assert found == IndexFile("torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", "https://pypi.example/f/t.whl", "ab" * 32, 5)
    html = b'<a href="/files/x-1.0-py3-none-any.whl#sha256=' + b"cd" * 32 + b'">x-1.0-py3-none-any.whl</a><a href="/files/y.whl">y.whl</a>'
    one, two = parse_listing(html, "text/html", page)
    assert (one.url, one.sha256, two.sha256) == ("https://pypi.example/files/x-1.0-py3-none-any.whl", "cd" * 32, None)
    with pytest.raises(ValueError, match="no `files` list"):
        parse_listing(b"{}", "application/vnd.pypi.simple.v1+json", page)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[WheelFiles, Path]]:
    folder = tmp_path / "files"
    folder.mkdir()
    make_wheel(folder / "pkg-1.0-py3-none-manylinux_2_28_x86_64.whl", {"pkg/lib/libk.so": PROBE.read_bytes()})
    with serve_index(files_dir=folder) as index:
        yield WheelFiles([index.simple_url.rstrip("/")]), folder


def test_a_wheel_is_fetched_from_the_index_and_kept_only_with_the_locks_hash(served: tuple[WheelFiles, Path], tmp_path: Path) -> None:
    source, folder = served
    [listed] = source.files("pkg")
    right = hashlib.sha256((folder / listed.filename).read_bytes()).hexdigest()
    assert listed.sha256 == right and source.files("nothing-here") == []
    work = tmp_path / "work"
    work.mkdir()
    path = source.fetch(listed, right, work)
    assert path.read_bytes() == (folder / listed.filename).read_bytes()
    with pytest.raises(FetchFailed, match="is not the file the lock pins"):
        source.fetch(listed, "0" * 64, work)
    assert not (work / "wheel.whl").exists(), "bytes that are not the lock's are not kept"


def test_a_failing_index_is_tried_again_then_one_line(tmp_path: Path) -> None:
    with serve_index(files_dir=tmp_path) as index:
        index.fail(times=1, status=503)
        assert WheelFiles([index.simple_url.rstrip("/")]).files("pkg") == []  # 503, then 404: no such project
        index.fail(times=9, status=503)
        with pytest.raises(FetchFailed, match=r"cannot fetch .*/simple/pkg/ \(HTTP 503; 4 tries\)"):
            WheelFiles([index.simple_url.rstrip("/")]).files("pkg")


def test_a_local_folder_is_read_where_it_is(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "pkg-1.0-py3-none-manylinux_2_28_x86_64.whl", {"pkg/__init__.py": b""})
    source = WheelFiles([], [tmp_path])
    [listed] = source.files("pkg")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert listed.sha256 == digest and source.fetch(listed, digest, tmp_path) == wheel
    with pytest.raises(FetchFailed, match="is not the file the lock pins"):
        source.fetch(listed, "1" * 64, tmp_path)


# -- doctor's verdict per planned image -------------------------------------------------------------------------


def test_doctor_judges_a_measured_image_by_its_set() -> None:
    from builder.host.doctor import image_verdict
    from builder.host.facts import AmdInfo, EngineFacts, HostInfo, NvidiaGpu, NvidiaInfo

    spec = spec_of("torch2.14.1-cu130-py3.11-debian12")

    def on(*ccs: str) -> str:
        gpus = tuple(NvidiaGpu(i, "GPU", cc, 80_000) for i, cc in enumerate(ccs))
        host = HostInfo(
            EngineFacts(reachable=True, runtimes=("nvidia",)), NvidiaInfo("ok", "580.95.05", gpus, device_nodes=True), AmdInfo()
        )
        verdict = image_verdict(host, spec)
        return f"{verdict.status}: {verdict.reason}"

    assert on("9.0").startswith("ok")
    assert on("11.0").startswith("fail") and "measured from its locked wheels" in on("11.0")
    assert on("7.5", "9.0").startswith("warn"), "one GPU it runs on: restrict to it"


def test_a_record_carries_its_variant_properties_and_an_old_one_keeps_its_form() -> None:
    from builder.catalog.records import from_json as record_from_json
    from tests.catalog_fixtures import record

    old = record("torch2.14.1-cu130-py3.11-debian12")
    assert "variant_properties" not in old.to_json(), "records published before variants keep the form their signatures cover"
    properties = variant_properties(("8.0", "9.0"), "cuda>=13.0 brand=tesla,driver>=535,driver<536")
    assert properties == ("nvidia :: cuda_version_lower_bound :: 13.0", "nvidia :: sm_arch :: 80_real", "nvidia :: sm_arch :: 90_real")
    new = dataclasses.replace(old, variant_properties=properties)
    assert record_from_json(new.to_json(), "catalog") == new
    with pytest.raises(ValueError, match="variant_properties"):
        record_from_json({**new.to_json(), "variant_properties": "nvidia :: sm_arch :: 80_real"}, "catalog")


def test_a_remote_index_cannot_point_at_this_machines_files(tmp_path: Path) -> None:
    listing = json.dumps(
        {
            "files": [
                {"filename": "pkg-1.0-py3-none-any.whl", "url": "file:///etc/passwd", "hashes": {"sha256": "ab" * 32}},
                {"filename": "pkg-1.0-py3-none-any.whl", "url": "ftp://elsewhere/pkg.whl", "hashes": {"sha256": "ab" * 32}},
                {"filename": "pkg-1.0-py3-none-any.whl", "url": "/files/pkg.whl", "hashes": {"sha256": "ab" * 32}},
            ]
        }
    ).encode()
    with serve_index(files_dir=tmp_path) as index:
        index.answer(listing, "application/vnd.pypi.simple.v1+json")
        found = WheelFiles([index.simple_url.rstrip("/")]).files("pkg")
    assert [f.url for f in found] == [f"{index.url}/files/pkg.whl"]


def test_a_fit_json_is_read_only_when_it_is_this_locks_and_refused_in_one_line_when_broken(tmp_path: Path) -> None:
    from builder.util.errors import UserError
    from builder.workspace import current_fit

    spec = spec_of("numba0.68.0-cu130-py3.11-debian12")
    assert spec.lock is not None and spec.locked_fit is not None
    path = tmp_path / FIT_NAME
    path.write_text(spec.locked_fit.text(), encoding="utf-8")
    assert current_fit(spec.id, spec.lock, path) == spec.locked_fit
    assert current_fit("another-image", spec.lock, path) is None, "another image's fit is not this one's"
    assert current_fit(spec.id, None, path) is None
    assert current_fit(spec.id, spec.lock, tmp_path / "absent.json") is None
    link = tmp_path / "link.json"
    link.symlink_to(path)
    assert current_fit(spec.id, spec.lock, link) is None, "a link is not a file render wrote"
    path.write_text('{"schema": 1, "fit": ', encoding="utf-8")
    with pytest.raises(UserError, match="not valid JSON") as caught:
        current_fit(spec.id, spec.lock, path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)
    path.write_text(json.dumps({**spec.locked_fit.to_json(), "lock": "md5:x"}), encoding="utf-8")
    with pytest.raises(UserError, match="'lock' must be sha256"):
        current_fit(spec.id, spec.lock, path)
