"""builder updates: the index client against a real HTTP server on 127.0.0.1 (tests/fake_index.py),
placing new releases against the compatibility rules, and adding the plannable ones to matrix.yaml."""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import shutil
import stat
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

from builder.compat.requires import Meta
from builder.compat.rules import decide, framework, table
from builder.model.plan import Matrix
from builder.spec.matrix import load_matrix
from builder.spec.plan import make_plan
from builder.updates import apply as apply_mod
from builder.updates import releases as rel
from builder.updates import wheelmeta
from builder.updates.index import IndexClient, IndexFailure, ProjectNotFound
from builder.updates.metadata import is_linux_wheel
from builder.util.errors import RunFailure, UserError
from tests.fake_index import PURE, FakeIndex, closed_port_url, self_signed, serve_index, wheel

MATRIX = """\
# A small matrix for the updates tests: one base of each kind the rules treat differently.
registry: ghcr.io/example/gpu-images
bases:
  cuda12.4-ubuntu22.04:   # CUDA 12, Python 3.11 from the OS
    vendor: cuda
    version: "12.4.1"
    os: ubuntu22.04
    image: nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04
  cuda13.0-ubuntu24.04:
    vendor: cuda
    version: "13.0.0"
    os: ubuntu24.04
    image: nvidia/cuda:13.0.0-cudnn-runtime-ubuntu24.04
  cpu-ubuntu24.04:
    vendor: cpu
    os: ubuntu24.04
    image: ubuntu:24.04
python: ["3.11", "3.12"]
frameworks:
  torch: ["2.14.1"]   # the newest listed is the baseline
  tensorflow: ["2.21.0"]
  jax: ["0.10.2"]
  cupy: ["14.0.0"]
  numba: ["0.68.0"]
stacks:
  torch: [torch]
  tensorflow: [tensorflow]
  jax: [jax]
  cupy: [cupy]
  numba: [numba]
"""

# torch's Linux wheel metadata: cu130 from PyPI (cuda-toolkit 13.0), or a cu132 build
TORCH_CU130 = [
    "filelock",
    "typing-extensions>=4.10.0",
    'cuda-toolkit[cublas,cudart,cufft,curand,cusolver,cusparse,nvjitlink,nvrtc]==13.0.2; platform_system == "Linux"',
    'nvidia-cudnn-cu13==9.24.0.43; platform_system == "Linux"',
]
TORCH_CU132 = [
    "filelock",
    'nvidia-cuda-runtime==13.2.51; platform_system == "Linux"',
    'nvidia-cudnn-cu13==9.24.0.43; platform_system == "Linux"',
]


def tf_dist(cuda_runtime: str) -> list[str]:
    return [
        f'nvidia-cuda-runtime-cu12=={cuda_runtime}; extra == "and-cuda"',
        'nvidia-cudnn-cu12==9.3.0.75; extra == "and-cuda"',
        "numpy<2.2.0,>=1.26.0",
    ]


def jax_dist(version: str, majors: tuple[str, ...]) -> list[str]:
    extras = [f'jax-cuda{m}-plugin[with-cuda]<={version},>={version}; extra == "cuda{m}"' for m in majors]
    extras += [f'jaxlib<={version},>={version}; extra == "cuda{m}"' for m in majors]
    return [f"jaxlib<={version},>={version}", "ml_dtypes>=0.5.0", "numpy>=2.0", *extras]


def pure(project: str, version: str) -> list[object]:
    """A pure-Python release's files on PyPI: one `py3-none-any` wheel and the sdist."""
    return [wheel(project, version, PURE), f"{project}-{version}.tar.gz"]


NUMBA_NUMPY = ["llvmlite<0.51,>=0.50.0dev0"]
WriteMatrix = Callable[..., Path]  # conftest.py's write_matrix fixture
RunCli = Callable[..., Result]


def fill(index: FakeIndex) -> None:
    """What the tests' index carries: per framework, releases each rule outcome is about."""
    index.add("torch", "2.0.0", ">=3.8", TORCH_CU130)  # older than the matrix lists
    index.add("torch", "2.14.1", ">=3.10", TORCH_CU130)  # the newest listed
    index.add("torch", "2.14.2", ">=3.10", TORCH_CU130)  # the rules know it: plannable
    index.add("torch", "2.14.3", ">=3.10", TORCH_CU132)  # PyPI wheel for another CUDA than the table says
    index.add("torch", "2.14.4", ">=3.10", TORCH_CU130, yanked=True)
    index.add("torch", "2.14.5", ">=3.10", TORCH_CU130, files=["torch-2.14.5-cp312-none-macosx_11_0_arm64.whl", "torch-2.14.5.tar.gz"])
    index.add("torch", "2.14.6", ">=3.12", TORCH_CU130)  # Requires-Python narrower than the table's row
    index.add(
        "torch",
        "2.14.7",
        ">=3.10",
        TORCH_CU130,
        files=[wheel("torch", "2.14.7", yanked=True), wheel("torch", "2.14.7", "cp312-cp312-manylinux_2_28_x86_64")],
    )
    index.add("torch", "2.17.0", ">=3.10", TORCH_CU130)  # no row in the table
    index.add("torch", "2.16.0rc1", ">=3.10", TORCH_CU130)
    index.add("torch", "2.16.0.dev20261201", ">=3.10", TORCH_CU130)
    index.add("tensorflow", "2.21.1", ">=3.10", tf_dist("12.5.82"))
    index.add("tensorflow", "2.21.2", ">=3.10", tf_dist("12.8.90"))  # [and-cuda] moved to CUDA 12.8; the row says 12.5
    # jax is pure Python: its releases have only a py3-none-any wheel (and an sdist), as on PyPI
    index.add("jax", "0.10.3", ">=3.11", jax_dist("0.10.3", ("12", "13")), files=pure("jax", "0.10.3"))
    index.add(
        "jax", "0.10.4", ">=3.11", jax_dist("0.10.4", ("12", "13")), files=pure("jax", "0.10.4")
    )  # its jaxlib is not on the index yet
    index.add(
        "jax", "0.10.5", ">=3.11", jax_dist("0.10.5", ("12",)), files=pure("jax", "0.10.5")
    )  # no cuda13 extra, the band plans CUDA 13
    for version in ("0.10.2", "0.10.3", "0.10.5"):
        index.add("jaxlib", version, ">=3.11", ["numpy>=2.0", "scipy>=1.13"])
    for project in ("cupy-cuda12x", "cupy-cuda13x"):
        index.add(project, "14.0.0", ">=3.10", ["numpy<2.6,>=2.0"])
        index.add(project, "14.0.1", ">=3.10", ["numpy<2.6,>=2.0"])
    index.add("cupy-cuda13x", "14.0.2", ">=3.10", ["numpy<2.6,>=2.0"])  # not built for CUDA 12
    index.add("cupy-cuda11x", "14.0.3", ">=3.10", ["numpy<2.6,>=2.0"])  # no CUDA 11 base, and the table maps none: never asked
    index.add("numba", "0.68.1", ">=3.10", [*NUMBA_NUMPY, "numpy<2.6,>=1.22"])
    index.add("numba", "0.68.2", ">=3.10", [*NUMBA_NUMPY, "numpy<2.5,>=1.22"])  # refuses the NumPy 2.5 the rules would pin
    index.add("numba", "0.69.0", ">=3.10", [*NUMBA_NUMPY, "numpy<2.7,>=1.22"])  # newer than the table


@pytest.fixture
def index() -> Iterator[FakeIndex]:
    with serve_index() as served:
        yield served


@pytest.fixture
def filled(index: FakeIndex) -> FakeIndex:
    fill(index)
    return index


@pytest.fixture
def matrix(write_matrix: WriteMatrix) -> Matrix:
    path = write_matrix(MATRIX)
    return load_matrix(path)


def client(index: FakeIndex | str, **kwargs: object) -> IndexClient:
    url = index.json_url if isinstance(index, FakeIndex) else index
    options: dict[str, object] = {"timeout_s": 2.0, "backoff_s": 0.0, **kwargs}
    return IndexClient(url, **options)  # type: ignore[arg-type]


def found(matrix: Matrix, index: FakeIndex) -> dict[tuple[str, str], rel.Release]:
    report = rel.find_updates(matrix, table(), client(index))
    return {(r.framework, r.version): r for r in report.releases}


# --- which releases are candidates --------------------------------------------------------------


def test_only_final_installable_releases_newer_than_the_matrix_are_candidates(matrix: Matrix, filled: FakeIndex) -> None:
    report = rel.find_updates(matrix, table(), client(filled))
    torch = [r.version for r in report.releases if r.framework == "torch"]
    # 2.0.0 and 2.14.1 are not newer; 2.14.4 is yanked; 2.14.5 has no Linux x86_64 wheel; rc1/dev are pre-releases.
    # 2.14.7 keeps one wheel that is not yanked.
    assert torch == ["2.14.2", "2.14.3", "2.14.6", "2.14.7", "2.17.0"]
    order = [(r.framework, r.version) for r in report.releases]
    assert [fw for fw, _ in order] == sorted((fw for fw, _ in order), key=["torch", "tensorflow", "jax", "cupy", "numba"].index)
    assert dict(report.newest_listed) == {"torch": "2.14.1", "tensorflow": "2.21.0", "jax": "0.10.2", "cupy": "14.0.0", "numba": "0.68.0"}
    assert not any("cupy-cuda11x" in path for path in filled.requests)  # the matrix has no CUDA 11 base


def test_a_pure_python_project_has_candidates_too(matrix: Matrix, filled: FakeIndex) -> None:
    # jax ships only `py3-none-any` wheels: a filter that wants a manylinux name never saw a jax release
    report = rel.find_updates(matrix, table(), client(filled))
    assert [r.version for r in report.releases if r.framework == "jax"] == ["0.10.3", "0.10.4", "0.10.5"]


@pytest.mark.parametrize(
    ("filename", "usable"),
    [
        ("jax-0.12.0-py3-none-any.whl", True),
        ("six-1.0-py2.py3-none-any.whl", True),
        ("torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl", True),
        ("cupy_cuda12x-14.0.0-cp311-cp311-manylinux2014_x86_64.whl", True),
        ("jaxlib-0.9.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", True),
        ("a-1-cp311-abi3-linux_x86_64.whl", True),
        ("old-1-py2-none-any.whl", False),  # Python 2 only
        ("a-1-cp311-cp311-musllinux_1_2_x86_64.whl", False),  # musl: the images are glibc
        ("a-1-cp311-cp311-manylinux_2_28_aarch64.whl", False),
        ("a-1-py3-none-macosx_11_0_arm64.whl", False),
        ("a-1-cp311-cp311-win_amd64.whl", False),
        ("a-1-py3-none-any-junk.whl", False),  # not a wheel name
        ("jax-0.12.0.tar.gz", False),
    ],
)
def test_a_usable_wheel_is_read_from_its_platform_tags(filename: str, usable: bool) -> None:
    assert is_linux_wheel({"filename": filename, "packagetype": "bdist_wheel" if filename.endswith(".whl") else "sdist"}) is usable
    assert is_linux_wheel({"filename": filename, "yanked": True}) is False


def test_a_version_over_4300_digits_in_the_index_is_not_a_release(cli: RunCli, write_matrix: WriteMatrix, filled: FakeIndex) -> None:
    """Issue 37: a wheel named with a 4,400-digit version crashed `updates` (int() refuses more than
    4,300 digits with a bare ValueError no `except InvalidVersion` caught). Such a name is no wheel
    and such a release no release, as any other unparsable one: skipped, the rest reported."""
    huge = "2." + "1" * 4400
    assert not is_linux_wheel({"filename": f"torch-{huge}-cp311-cp311-manylinux_2_28_x86_64.whl"})
    filled.add("torch", "2.14.8", ">=3.10", TORCH_CU130, files=[wheel("torch", huge)])
    filled.add("torch", huge, ">=3.10", TORCH_CU130)
    result = cli("--matrix", str(write_matrix(MATRIX)), "updates", "--index-json-url", filled.json_url, "--format", "json")
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    torch = [r["version"] for r in json.loads(result.stdout)["releases"] if r["framework"] == "torch"]
    assert torch == ["2.14.2", "2.14.3", "2.14.6", "2.14.7", "2.17.0"], torch


def test_the_metadata_of_a_pure_python_release_is_read_from_its_wheel() -> None:
    # where the index serves no release document, the wheel read by ranges may be jax's only (pure) one
    files = [{"filename": "jax-0.12.0.tar.gz", "url": "s", "size": 1}, {"filename": "jax-0.12.0-py3-none-any.whl", "url": "w", "size": 1}]
    chosen = wheelmeta.linux_wheel(files)
    assert chosen is not None and chosen["url"] == "w"


def test_report_json_has_every_release_with_its_metadata(matrix: Matrix, filled: FakeIndex) -> None:
    report = rel.find_updates(matrix, table(), client(filled))
    doc = report.to_json()
    first = doc["releases"][0]
    assert first == {
        "framework": "torch",
        "project": "torch",
        "version": "2.14.2",
        "requires_python": ">=3.10",
        "cuda": "cu130",
        "numpy": None,
        "status": "plannable",
        "reason": first["reason"],
        "accepted": ["cuda13.0-ubuntu24.04/py3.12", "cpu-ubuntu24.04/py3.12"],
        "companion": None,
    }
    assert len(doc["releases"]) == len(report.releases)


# --- torch ----------------------------------------------------------------------------------------


def test_a_torch_release_the_rules_know_is_plannable_with_the_images_it_gets(matrix: Matrix, filled: FakeIndex) -> None:
    release = found(matrix, filled)[("torch", "2.14.2")]
    assert release.status == rel.PLANNABLE
    assert (release.cuda, release.requires_python) == ("cu130", ">=3.10")
    # CUDA 12.4 has no torch 2.14 wheel (cu126 is the oldest); Ubuntu 24.04 packages Python 3.12 only
    assert release.accepted == ("cuda13.0-ubuntu24.04/py3.12", "cpu-ubuntu24.04/py3.12")
    assert "2 base/Python pairs" in release.reason


def test_a_torch_release_without_a_table_row_needs_rules_naming_compat_yaml(matrix: Matrix, filled: FakeIndex) -> None:
    release = found(matrix, filled)[("torch", "2.17.0")]
    assert release.status == rel.NEEDS_RULES
    assert 'add a torch.releases row for "2.17"' in release.reason
    assert "builder/compat/data/compat.yaml" in release.reason
    assert "its PyPI wheel is cu130" in release.reason and "Requires-Python >=3.10" in release.reason
    assert release.accepted == ()


def test_a_torch_wheel_built_for_another_cuda_than_the_table_says_needs_rules(matrix: Matrix, filled: FakeIndex) -> None:
    release = found(matrix, filled)[("torch", "2.14.3")]
    assert release.status == rel.NEEDS_RULES
    assert release.cuda == "cu132"
    assert "PyPI wheel is cu132" in release.reason and "pypi: cu130" in release.reason
    assert "torch.releases 2.14 in builder/compat/data/compat.yaml" in release.reason


def test_requires_python_narrower_than_the_table_row_needs_rules(matrix: Matrix, filled: FakeIndex) -> None:
    release = found(matrix, filled)[("torch", "2.14.6")]
    assert release.status == rel.NEEDS_RULES
    assert "requires Python >=3.12 (its metadata)" in release.reason
    assert "allows Python 3.11 (python: [3.10, 3.14])" in release.reason


# --- tensorflow, jax, cupy, numba -----------------------------------------------------------------


def test_tensorflow_cuda_comes_from_the_and_cuda_extra(matrix: Matrix, filled: FakeIndex) -> None:
    got = found(matrix, filled)
    ok, moved = got[("tensorflow", "2.21.1")], got[("tensorflow", "2.21.2")]
    assert (ok.status, ok.cuda, ok.numpy) == (rel.PLANNABLE, "12.5", ">=1.26.0,<2.2.0")
    # TF needs CUDA 12.5+ wheels: a CUDA 13 base gets none, nor a 12.4 one (one CUDA per image, issue 15)
    assert ok.accepted == ("cpu-ubuntu24.04/py3.12",)
    assert (moved.status, moved.cuda) == (rel.NEEDS_RULES, "12.8")
    assert (
        'pins CUDA 12.8 (nvidia-cuda-runtime), but tensorflow.releases 2.21 in builder/compat/data/compat.yaml says cuda: "12.5"'
        in moved.reason
    )


def test_jax_reports_its_jaxlib_and_waits_for_a_missing_one(matrix: Matrix, filled: FakeIndex) -> None:
    got = found(matrix, filled)
    ready, waiting = got[("jax", "0.10.3")], got[("jax", "0.10.4")]
    assert (ready.status, ready.companion, ready.cuda) == (rel.PLANNABLE, rel.CompanionPin("jaxlib", "0.10.3", False), "12, 13")
    assert ready.accepted == ("cuda12.4-ubuntu22.04/py3.11", "cuda13.0-ubuntu24.04/py3.12", "cpu-ubuntu24.04/py3.12")
    assert (waiting.status, waiting.companion) == (rel.WAITING, rel.CompanionPin("jaxlib", "0.10.4", True))
    assert "jaxlib 0.10.4" in waiting.reason and "not on the index" in waiting.reason


def test_jax_without_the_cuda_extra_the_rules_plan_needs_rules(matrix: Matrix, filled: FakeIndex) -> None:
    release = found(matrix, filled)[("jax", "0.10.5")]
    assert (release.status, release.cuda) == (rel.NEEDS_RULES, "12")
    assert "no cuda13 extra (it has: cuda12)" in release.reason and "jax.bands from 0.7.2" in release.reason


def test_jax_whose_extras_pin_an_older_jaxlib_than_the_table_needs_a_pin_row(matrix: Matrix, index: FakeIndex) -> None:
    dist = ["jaxlib<=0.10.6,>=0.10.5", "numpy>=2.0"]
    dist += [f'jax-cuda{m}-plugin[with-cuda]<=0.10.6,>=0.10.5; extra == "cuda{m}"' for m in ("12", "13")]
    dist += [f'jaxlib==0.10.5; extra == "cuda{m}"' for m in ("12", "13")]
    fill(index)
    index.add("jax", "0.10.6", ">=3.11", dist, files=pure("jax", "0.10.6"))
    index.add("jaxlib", "0.10.5", ">=3.11")
    release = found(matrix, index)[("jax", "0.10.6")]
    assert (release.status, release.companion) == (rel.NEEDS_RULES, rel.CompanionPin("jaxlib", "0.10.5", False))
    assert 'add {jax: "0.10.6", jaxlib: "0.10.5"} to jax.jaxlib_pins' in release.reason


def test_cupy_is_the_union_of_its_cuda_packages(matrix: Matrix, filled: FakeIndex) -> None:
    got = found(matrix, filled)
    both, one = got[("cupy", "14.0.1")], got[("cupy", "14.0.2")]
    assert (both.status, both.project, both.cuda, both.numpy) == (rel.PLANNABLE, "cupy-cuda12x, cupy-cuda13x", "12, 13", ">=2.0,<2.6")
    assert both.accepted == ("cuda12.4-ubuntu22.04/py3.11", "cuda13.0-ubuntu24.04/py3.12")  # no CPU build
    assert (one.status, one.project, one.cuda) == (rel.NEEDS_RULES, "cupy-cuda13x", "13")
    assert "not on the index as cupy-cuda12x" in one.reason and "maps CUDA 12 to it" in one.reason
    assert ("cupy", "14.0.3") not in got


def test_numba_beyond_the_table_and_below_its_numpy_ceiling_need_rules(matrix: Matrix, filled: FakeIndex) -> None:
    got = found(matrix, filled)
    ok, low, new = got[("numba", "0.68.1")], got[("numba", "0.68.2")], got[("numba", "0.69.0")]
    assert (ok.status, ok.cuda, ok.numpy) == (rel.PLANNABLE, None, ">=1.22,<2.6")
    assert ok.accepted == ("cuda12.4-ubuntu22.04/py3.11", "cuda13.0-ubuntu24.04/py3.12", "cpu-ubuntu24.04/py3.12")
    assert low.status == rel.NEEDS_RULES
    assert "requires numpy >=1.22,<2.5 (its metadata)" in low.reason and "pin numpy 2.5.5 for its Python 3.12 images" in low.reason
    assert new.status == rel.NEEDS_RULES
    assert 'add a numba.releases row for "0.69.0"' in new.reason and "numpy >=1.22,<2.7" in new.reason


def test_a_new_series_the_newest_row_would_silently_cover_needs_rules(matrix: Matrix, index: FakeIndex) -> None:
    """The rules accept cupy 14.3 (rows apply from here on), but nobody has read its support yet."""
    fill(index)
    for project in ("cupy-cuda12x", "cupy-cuda13x"):
        index.add(project, "14.3.0", ">=3.10", ["numpy<2.6,>=2.0"])
    assert decide("cupy", matrix.base("cuda13.0-ubuntu24.04"), "3.12", "14.3.0", table()).ok
    release = found(matrix, index)[("cupy", "14.3.0")]
    assert release.status == rel.NEEDS_RULES
    assert "newer than the newest cupy row (14.2.0" in release.reason and 'add a cupy.releases row for "14.3.0"' in release.reason


def test_no_image_here_when_the_rules_refuse_every_base(write_matrix: WriteMatrix, index: FakeIndex) -> None:
    rocm_only = MATRIX.split("bases:")[0] + (
        'bases:\n  rocm6.4-ubuntu22.04: {vendor: rocm, version: "6.4", os: ubuntu22.04, image: "rocm/dev-ubuntu-22.04:6.4"}\n'
        'python: ["3.11"]\nframeworks:\n  torch: ["2.14.1"]\nstacks:\n  torch: [torch]\n'
    )
    index.add("torch", "2.14.2", ">=3.10", TORCH_CU130)
    release = found(load_matrix(write_matrix(rocm_only)), index)[("torch", "2.14.2")]
    assert release.status == rel.NO_IMAGE
    assert "rocm6.4-ubuntu22.04, Python 3.11" in release.reason and "no confirmed index name" in release.reason


def test_no_image_here_when_the_matrix_excludes_what_the_rules_accept(write_matrix: WriteMatrix, filled: FakeIndex) -> None:
    index = filled
    path = write_matrix(MATRIX + "exclude:\n  - {stack: torch}\n")
    release = found(load_matrix(path), index)[("torch", "2.14.2")]
    assert release.status == rel.NO_IMAGE
    assert "but the matrix makes no image of it: excluded by" in release.reason


def test_a_framework_the_matrix_does_not_list_is_not_asked_for(write_matrix: WriteMatrix, index: FakeIndex) -> None:
    only_torch = MATRIX.replace('  tensorflow: ["2.21.0"]\n', "").replace("  tensorflow: [tensorflow]\n", "")
    fill(index)
    report = rel.find_updates(load_matrix(write_matrix(only_torch)), table(), client(index))
    assert "tensorflow" not in {r.framework for r in report.releases}
    assert index.hits("/pypi/tensorflow/") == 0


def test_accepted_is_what_the_plan_gains_when_the_version_is_added(matrix: Matrix, filled: FakeIndex) -> None:
    plannable = rel.find_updates(matrix, table(), client(filled)).plannable
    assert plannable, "the filled index has plannable releases, or the loop below checks nothing"
    for release in plannable:
        grown = [(n, (*vs, release.version) if n == release.framework else vs) for n, vs in matrix.frameworks]
        from dataclasses import replace

        plan = make_plan(replace(matrix, frameworks=tuple(grown)), table())
        images = {f"{s.base.name}/py{s.python}" for s in plan.images if s.versions.get(release.framework) == release.version}
        assert set(release.accepted) == images, release


def test_check_reads_the_index_url_and_env(matrix: Matrix, filled: FakeIndex) -> None:
    report = rel.check(matrix, env={"BUILDER_INDEX_JSON_URL": filled.json_url})
    assert ("torch", "2.14.2") in {(r.framework, r.version) for r in report.releases}
    filled.fail(times=1, status=404)
    with pytest.raises(ProjectNotFound) as missing:  # what the index says reaches the caller as a RunFailure
        rel.check(matrix, base_url=filled.json_url, env={})
    assert isinstance(missing.value, RunFailure)


# --- the index client -------------------------------------------------------------------------------


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text, text
    return text


def test_503_twice_then_an_answer_succeeds(index: FakeIndex) -> None:
    index.add("torch", "2.14.2", ">=3.10", TORCH_CU130)
    index.fail(times=2, status=503)
    doc = client(index, attempts=3)("torch")
    assert "2.14.2" in doc["releases"]
    assert index.hits("/pypi/torch/json") == 3


def test_429_is_retried_too(index: FakeIndex) -> None:
    index.add("torch", "2.14.2")
    index.fail(times=1, status=429)
    assert client(index)("torch", "2.14.2")["info"]["version"] == "2.14.2"
    assert index.hits("/pypi/torch/2.14.2/json") == 2


def test_5xx_on_every_try_is_one_line_naming_the_index(index: FakeIndex) -> None:
    index.fail(times=10, status=502)
    with pytest.raises(IndexFailure) as failed:
        client(index, attempts=3)("torch")
    text = one_line(failed.value)
    assert text.startswith(f"cannot reach the package index {index.json_url} (HTTP 502")
    assert "3 tries" in text and "--index-json-url" in text
    assert index.hits() == 3


def test_404_is_not_found_and_not_retried(index: FakeIndex) -> None:
    with pytest.raises(ProjectNotFound) as missing:
        client(index)("no-such-project")
    text = one_line(missing.value)
    assert text.startswith(f"project 'no-such-project' not found on the package index {index.json_url}")
    assert index.hits() == 1


def test_other_4xx_is_not_retried(index: FakeIndex) -> None:
    index.fail(times=5, status=403)
    with pytest.raises(IndexFailure) as refused:
        client(index)("torch")
    assert "answered HTTP 403" in one_line(refused.value) and "credentials" in str(refused.value)
    assert index.hits() == 1


def test_an_index_that_is_down_is_one_line_with_the_url() -> None:
    url = closed_port_url()
    with pytest.raises(IndexFailure) as down:
        client(url, attempts=2)("torch")
    assert one_line(down.value) == (
        f"cannot reach the package index {url} (connection refused; 2 tries): check the network, "
        "or point --index-json-url (or $BUILDER_INDEX_JSON_URL) at a mirror"
    )


def test_a_hanging_index_times_out_in_one_line(index: FakeIndex) -> None:
    index.hang(seconds=5, times=5)
    with pytest.raises(IndexFailure) as slow:
        client(index, timeout_s=0.3, attempts=2)("torch")
    assert f"cannot reach the package index {index.json_url} (timed out after 0.3 s; 2 tries)" in one_line(slow.value)


def test_a_dropped_connection_is_retried(index: FakeIndex) -> None:
    index.add("numba", "0.68.1")
    index.drop(times=1)
    assert "0.68.1" in client(index)("numba")["releases"]
    index.drop(times=5)
    with pytest.raises(IndexFailure) as dropped:
        client(index, attempts=2)("numba")
    assert "closed without an answer; 2 tries" in one_line(dropped.value)


def test_a_body_that_is_not_json_is_one_line_and_not_retried(index: FakeIndex) -> None:
    index.answer(b"<!DOCTYPE html><html><body>Sign in</body></html>", "text/html; charset=utf-8", times=5)
    with pytest.raises(IndexFailure) as html:
        client(index)("torch")
    text = one_line(html.value)
    assert "answered something that is not JSON" in text and "(text/html," in text and "not a simple index" in text
    assert index.hits() == 1
    index.clear_faults()
    index.answer(b"[1, 2]", "application/json")
    with pytest.raises(IndexFailure, match="JSON that is not an object"):
        client(index)("torch")


def test_a_response_past_the_size_bound_is_refused(index: FakeIndex) -> None:
    index.add("torch", "2.14.2", ">=3.10", TORCH_CU130)
    with pytest.raises(IndexFailure, match="answered more than 0 MiB"):
        client(index, max_bytes=100)("torch")


def test_a_project_document_without_releases_is_refused(index: FakeIndex, matrix: Matrix) -> None:
    index.answer(b'{"info": {}}', "application/json", match="/pypi/torch/json")
    with pytest.raises(RunFailure, match="has no `releases` mapping"):
        rel.find_updates(matrix, table(), client(index))


def test_a_malformed_index_url_is_a_user_error() -> None:
    for url in ("ftp://mirror.example.com/pypi", "pypi.org/pypi", "https:///pypi", "https://pypi.org/pypi?x=1"):
        with pytest.raises(UserError, match="package index URL"):
            IndexClient(url)


def test_credentials_in_the_url_go_in_a_header_and_never_in_messages(index: FakeIndex) -> None:
    index.add("torch", "2.14.2")
    url = index.json_url.replace("http://", "http://ci:s3cret@")
    client(url)("torch")
    assert index.headers[-1]["Authorization"] == "Basic Y2k6czNjcmV0"
    index.fail(times=5, status=500)
    with pytest.raises(IndexFailure) as failed:
        client(url, attempts=1)("torch")
    assert "s3cret" not in str(failed.value) and "****@" in str(failed.value)


def test_a_ca_bundle_that_is_not_pem_is_a_user_error(tmp_path: Path) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    with pytest.raises(UserError, match="holds no usable PEM certificates"):
        IndexClient("https://pypi.org/pypi", ca_bundle=bad)
    IndexClient("https://pypi.org/pypi", ca_bundle=Path(__file__).parent / "fixtures" / "test-ca.pem")  # a real one loads


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_tls_the_ca_bundle_trusts_and_an_untrusted_certificate_is_one_line_not_retried(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    with serve_index(tls=(cert, key)) as index:
        index.add("torch", "2.14.2")
        with pytest.raises(IndexFailure) as untrusted:
            client(index, attempts=3)("torch")
        text = one_line(untrusted.value)
        assert text.startswith(f"cannot reach the package index {index.json_url} (TLS: ") and "--ca-bundle" in text
        assert index.connections == 1  # a certificate does not change between tries
        assert "2.14.2" in client(index, ca_bundle=cert)("torch")["releases"]


def test_the_cli_prints_one_error_line_when_the_index_is_down(cli: RunCli, write_matrix: WriteMatrix) -> None:
    path = write_matrix(MATRIX)
    result = cli("--matrix", str(path), "updates", "--index-json-url", closed_port_url())
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach the package index http://127.0.0.1:"), result.output
    assert "Traceback" not in result.output


def test_the_fake_index_serves_a_simple_index_over_a_folder(tmp_path: Path) -> None:
    """tests/fake_index.py's PEP 503 pages, which the nightly test installs from."""
    (tmp_path / "numba-0.68.1-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"wheel bytes")
    (tmp_path / "Foo_Bar-1.0.tar.gz").write_bytes(b"sdist bytes")
    with serve_index(files_dir=tmp_path) as index:
        root = urllib.request.urlopen(index.simple_url).read().decode()
        assert 'href="/simple/foo-bar/"' in root and 'href="/simple/numba/"' in root
        page = urllib.request.urlopen(index.simple_url + "numba/").read().decode()
        found = re.search(r'href="([^"#]+)#sha256=([0-9a-f]{64})"', page)
        assert found is not None, page
        data = urllib.request.urlopen(index.url + found.group(1)).read()
        assert data == b"wheel bytes" and hashlib.sha256(data).hexdigest() == found.group(2)
        assert "Foo_Bar-1.0.tar.gz" in urllib.request.urlopen(index.simple_url + "Foo.Bar/").read().decode()
        for missing in ("/simple/torch/", "/files/..%2Fsecret", "/files/nope.whl"):
            with pytest.raises(urllib.error.HTTPError) as status:
                urllib.request.urlopen(index.url + missing)
            assert status.value.code == 404


# --- apply -------------------------------------------------------------------------------------


def plannable(framework: str, version: str, status: str = rel.PLANNABLE) -> rel.Release:
    return rel.Release(framework, framework, version, None, None, None, status, "test")


@pytest.fixture
def repo_matrix(embedded_matrix_path: Path, in_tmp: Path) -> Path:
    target = in_tmp / "matrix.yaml"
    shutil.copyfile(embedded_matrix_path, target)
    return target


def test_apply_changes_only_the_framework_lines_and_keeps_every_comment(repo_matrix: Path) -> None:
    original = repo_matrix.read_text(encoding="utf-8")
    edits = apply_mod.apply(
        repo_matrix,
        [
            plannable("torch", "2.14.3"),
            plannable("torch", "2.14.2"),
            plannable("numba", "0.68.2"),
            plannable("torch", "2.17.0", rel.NEEDS_RULES),
        ],
    )
    assert edits == [
        "matrix.yaml: frameworks.numba += 0.68.2",
        "matrix.yaml: frameworks.torch += 2.14.2",
        "matrix.yaml: frameworks.torch += 2.14.3",
    ]
    after = repo_matrix.read_text(encoding="utf-8")
    torch_line = next(line for line in original.splitlines() if line.startswith("  torch: ["))
    numba_line = next(line for line in original.splitlines() if line.startswith("  numba: ["))
    expected = original.replace(torch_line, torch_line[:-1] + ', "2.14.2", "2.14.3"]').replace(numba_line, numba_line[:-1] + ', "0.68.2"]')
    assert after == expected
    diff = [d for d in difflib.ndiff(original.splitlines(), after.splitlines()) if d[:1] in "+-"]
    assert [d[0] for d in diff] == ["-", "+", "-", "+"]
    comments = [line for line in original.splitlines() if line.lstrip().startswith("#")]
    assert [line for line in after.splitlines() if line.lstrip().startswith("#")] == comments and comments
    assert dict(load_matrix(repo_matrix).frameworks)["torch"][-2:] == ("2.14.2", "2.14.3")


def test_apply_is_idempotent(repo_matrix: Path) -> None:
    assert apply_mod.apply(repo_matrix, [plannable("torch", "2.14.2")]) == ["matrix.yaml: frameworks.torch += 2.14.2"]
    once = repo_matrix.read_bytes()
    assert apply_mod.apply(repo_matrix, [plannable("torch", "2.14.2"), plannable("torch", "2.14.1")]) == []
    assert repo_matrix.read_bytes() == once
    assert apply_mod.apply(repo_matrix, [plannable("torch", "2.99.0", rel.NO_IMAGE)]) == []


def test_apply_keeps_block_lists_quotes_crlf_and_the_file_mode(in_tmp: Path) -> None:
    text = MATRIX.replace(
        '  torch: ["2.14.1"]   # the newest listed is the baseline\n', '  torch:\n    - "2.13.0"\n    -   "2.14.1"  # newest\n'
    )
    text = text.replace('  numba: ["0.68.0"]\n', "  numba: ['0.68.0']\n").replace("\n", "\r\n")
    path = in_tmp / "matrix.yaml"
    path.write_bytes(text.encode())
    path.chmod(0o640)
    apply_mod.apply(path, [plannable("torch", "2.14.2"), plannable("numba", "0.68.1")])
    after = path.read_bytes().decode()
    assert after == text.replace('    -   "2.14.1"  # newest\r\n', '    -   "2.14.1"  # newest\r\n    -   "2.14.2"\r\n').replace(
        "['0.68.0']", "['0.68.0', '0.68.1']"
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_apply_refuses_a_missing_or_non_list_target_and_leaves_the_file(in_tmp: Path) -> None:
    path = in_tmp / "matrix.yaml"
    no_torch = MATRIX.replace('  torch: ["2.14.1"]   # the newest listed is the baseline\n', "").replace("  torch: [torch]\n", "")
    path.write_text(no_torch)
    with pytest.raises(UserError) as missing:
        apply_mod.apply(path, [plannable("torch", "2.14.2")])
    frameworks_line = no_torch.splitlines().index("frameworks:") + 1
    assert (missing.value.file, missing.value.line) == ("matrix.yaml", frameworks_line)
    assert "frameworks has no `torch:` list" in missing.value.message
    assert path.read_text() == no_torch

    scalar = MATRIX.replace('torch: ["2.14.1"]', 'torch: "2.14.1"')
    path.write_text(scalar)
    with pytest.raises(UserError) as not_list:
        apply_mod.apply(path, [plannable("torch", "2.14.2")])
    assert (
        not_list.value.file == "matrix.yaml"
        and not_list.value.line == scalar.splitlines().index('  torch: "2.14.1"   # the newest listed is the baseline') + 1
    )
    assert path.read_text() == scalar

    anchored = MATRIX.replace('torch: ["2.14.1"]', 'torch: &versions ["2.14.1"]')
    path.write_text(anchored)
    with pytest.raises(UserError, match="anchored list"):
        apply_mod.apply(path, [plannable("torch", "2.14.2")])
    assert path.read_text() == anchored


def test_apply_leaves_the_original_when_the_result_would_not_load(in_tmp: Path) -> None:
    path = in_tmp / "matrix.yaml"
    path.write_text(MATRIX)
    with pytest.raises(UserError) as broken:
        apply_mod.apply(path, [plannable("torch", "2.14.2+cu130")])  # not a version the loader takes
    assert (
        broken.value.file == "matrix.yaml"
        and "would make it invalid" in broken.value.message
        and "nothing was changed" in broken.value.message
    )
    assert path.read_text() == MATRIX
    assert sorted(p.name for p in in_tmp.iterdir()) == ["matrix.yaml"]  # no temporary file left behind


def test_apply_edits_the_file_a_symlink_points_to(in_tmp: Path) -> None:
    real = in_tmp / "real.yaml"
    real.write_text(MATRIX)
    link = in_tmp / "matrix.yaml"
    os.symlink(real.name, link)
    apply_mod.apply(link, [plannable("torch", "2.14.2")])
    assert link.is_symlink() and '"2.14.1", "2.14.2"' in real.read_text()


def test_updates_then_apply_end_to_end(in_tmp: Path, filled: FakeIndex) -> None:
    path = in_tmp / "matrix.yaml"
    path.write_text(MATRIX)
    report = rel.find_updates(load_matrix(path), table(), client(filled))
    edits = apply_mod.apply(path, report.releases)
    assert edits == [
        "matrix.yaml: frameworks.cupy += 14.0.1",
        "matrix.yaml: frameworks.jax += 0.10.3",
        "matrix.yaml: frameworks.numba += 0.68.1",
        "matrix.yaml: frameworks.tensorflow += 2.21.1",
        "matrix.yaml: frameworks.torch += 2.14.2",
        "matrix.yaml: frameworks.torch += 2.14.7",
    ]
    grown = load_matrix(path)
    plan = make_plan(grown, table())
    assert report.plannable, "the loop below checks something"
    for release in report.plannable:
        ids = {f"{s.base.name}/py{s.python}" for s in plan.images if s.versions.get(release.framework) == release.version}
        assert ids == set(release.accepted)
    again = rel.find_updates(grown, table(), client(filled))
    assert {(r.framework, r.version) for r in again.plannable} == set()  # what was added is no longer new


# --- one release, one image; a bounded --apply (hardening #14, finding 10) ----------------------


def test_one_release_in_several_spellings_is_one_candidate_in_its_normal_spelling(matrix: Matrix, index: FakeIndex) -> None:
    """A mirror listing 2.14.2, 2.14.2.0 and 2.14.02 (one release to pip) must not make three releases
    and three sets of images; the one kept is the normal spelling, fetched as the index spells it."""
    fill(index)  # lists 2.14.2 among others
    for spelling in ("2.14.02", "2.14.2.0"):
        index.add("torch", spelling, ">=3.10", TORCH_CU130)
    report = rel.find_updates(matrix, table(), client(index))
    assert [r.version for r in report.releases if r.framework == "torch"] == ["2.14.2", "2.14.3", "2.14.6", "2.14.7", "2.17.0"]
    assert [r.status for r in report.releases if r.version == "2.14.2"] == [rel.PLANNABLE]


def test_one_release_in_a_spelling_the_index_alone_uses_is_fetched_by_that_spelling(matrix: Matrix, index: FakeIndex) -> None:
    fill(index)
    del index.projects["torch"]["2.14.2"]
    for spelling in ("2.14.2.0", "2.14.02"):
        index.add("torch", spelling, ">=3.10", TORCH_CU130)
    report = rel.find_updates(matrix, table(), client(index))
    assert [r.version for r in report.releases if r.framework == "torch"] == ["2.14.2.0", "2.14.3", "2.14.6", "2.14.7", "2.17.0"]


def test_apply_adds_one_release_once_whatever_its_spellings(repo_matrix: Path) -> None:
    edits = apply_mod.apply(repo_matrix, [plannable("torch", "2.14.02"), plannable("torch", "2.14.2.0"), plannable("torch", "2.14.2")])
    assert edits == ["matrix.yaml: frameworks.torch += 2.14.2"]
    listed = dict(load_matrix(repo_matrix).frameworks)["torch"]
    assert listed[-1] == "2.14.2" and "2.14.2.0" not in listed
    assert apply_mod.apply(repo_matrix, [plannable("torch", "2.14.2.0")]) == []  # listed already, spelled otherwise


def test_one_apply_adds_at_most_the_newest_few_releases_per_framework_and_says_what_it_held_back(repo_matrix: Path) -> None:
    """400 patch releases from a broken mirror must not turn 51 images into 1,251 overnight."""
    flood = [plannable("torch", f"2.14.{n}") for n in range(2, 402)]
    edits = apply_mod.apply(repo_matrix, [*flood, plannable("numba", "0.68.2")])
    assert edits[:4] == [
        "matrix.yaml: frameworks.numba += 0.68.2",
        "matrix.yaml: frameworks.torch += 2.14.399",
        "matrix.yaml: frameworks.torch += 2.14.400",
        "matrix.yaml: frameworks.torch += 2.14.401",
    ]
    assert len(edits) == 5 and "397 older plannable release(s) held back, not added (2.14.2, 2.14.3" in edits[4] and "--max-new" in edits[4]
    assert dict(load_matrix(repo_matrix).frameworks)["torch"][-3:] == ("2.14.399", "2.14.400", "2.14.401")
    assert apply_mod.apply(repo_matrix, [plannable("torch", "2.14.402"), plannable("torch", "2.14.403")], limit=1) == [
        "matrix.yaml: frameworks.torch += 2.14.403",
        "matrix.yaml: frameworks.torch: 1 older plannable release(s) held back, not added (2.14.402); one --apply adds the newest 1 "
        "per framework (--max-new); add others by hand if you want their images",
    ]


def test_the_cli_cap_defaults_to_the_one_apply_uses() -> None:
    from builder.cli import main

    command = main.commands["updates"]
    assert next(p.default for p in command.params if p.name == "max_new") == apply_mod.MAX_NEW


def test_a_mirrors_endless_requires_python_is_cut_in_what_updates_reports(matrix: Matrix, filled: FakeIndex) -> None:
    """Found by the second hostile pass: a 4 KB Requires-Python of `\\x1b[2J`s filled a hundred table
    lines (7,000 escaped characters), and a document may be 64 MiB: what a release reports from its
    metadata (table and JSON) is bounded like every other text from the index."""
    filled.add("torch", "2.17.1", ">=3.10" + "\x1b[2J" * 20000, TORCH_CU130)
    filled.add("numba", "0.69.1", ">=3.10", [*NUMBA_NUMPY, "numpy<2.7,>=1.22" + ",!=1.0" * 20000])
    releases = found(matrix, filled)
    for key in (("torch", "2.17.1"), ("numba", "0.69.1")):
        release = releases[key]
        assert len(release.requires_python or "") <= 200 and len(release.numpy or "") <= 200, key
        assert "\x1b" not in (release.requires_python or "") + (release.numpy or "")
        assert len(release.reason) <= 4000, key


# --- what `builder lock` would refuse is never plannable ---------------------------------------

LOCK_MATRIX = """\
registry: ghcr.io/example/gpu-images
bases:
  cuda12.8-ubuntu24.04:
    vendor: cuda
    version: "12.8.1"
    os: ubuntu24.04
    image: nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04
  cuda12-debian12:
    vendor: cuda
    version: "12.5"
    os: debian12
    bootstrap: debootstrap
python: ["3.11", "3.12"]
frameworks:
  tensorflow: ["2.18.0"]
stacks:
  tensorflow: [tensorflow]
"""


@pytest.mark.parametrize(
    ("wheel_base", "exclude", "status", "accepted"),
    [
        (True, "", rel.NEEDS_RULES, ()),  # 12.8 images the lock refuses, 12.5 ones it takes: exclude the first
        (True, 'exclude:\n  - {base: cuda12.8-ubuntu24.04, tensorflow: "2.18"}\n', rel.PLANNABLE, ("cuda12-debian12/py3.11",)),
        (False, "", rel.NO_IMAGE, ()),  # only the 12.8 base: every image would be refused
    ],
)
def test_a_release_whose_exact_cuda_pins_the_lock_refuses_is_not_plannable(
    write_matrix: WriteMatrix, index: FakeIndex, wheel_base: bool, exclude: str, status: str, accepted: tuple[str, ...]
) -> None:
    """tensorflow[and-cuda] 2.18 pins nvidia-cuda-runtime-cu12==12.5.82 exactly: on a CUDA 12.8 base
    the lock's one-CUDA check refuses it, so `updates` must not call it plannable there (issue 38)
    and `--apply` never plans what `builder lock` refuses."""
    text = LOCK_MATRIX + exclude
    if not wheel_base:
        text = text.replace(text[text.index("  cuda12-debian12:") : text.index("python:")], "")
    matrix = load_matrix(write_matrix(text))
    index.add("tensorflow", "2.18.0", ">=3.9", tf_dist("12.5.82"))
    index.add("tensorflow", "2.18.1", ">=3.9", tf_dist("12.5.82"))
    got = found(matrix, index)[("tensorflow", "2.18.1")]
    assert got.status == status, got.reason
    assert got.accepted == accepted
    if status != rel.PLANNABLE:
        assert (
            "`builder lock` would refuse" in got.reason
            and "nvidia-cuda-runtime-cu12 12.5.82 is CUDA 12.5, the image is CUDA 12.8" in got.reason
        )
    if status == rel.NEEDS_RULES:
        assert "exclude it there in matrix.yaml" in got.reason


def test_exact_pins_are_read_for_the_extras_the_install_names() -> None:
    """Only what the image installs counts: tensorflow-cpu takes no [and-cuda] pins; a marker for
    another Python does not apply."""
    fw = framework("tensorflow")
    meta = Meta(
        "tensorflow", "2.18.1", ">=3.9", (*tf_dist("12.5.82"), 'nvidia-nccl-cu12==2.21.5; python_version < "3.10" and extra == "and-cuda"')
    )
    pub = rel.read_release(fw, "2.18.1", [meta])
    ws_matrix = make_plan(load_matrix(Path(__file__).resolve().parents[1] / "matrix.yaml"), table())
    cuda_spec = next(s for s in ws_matrix.images if s.stack == "tensorflow" and s.base.vendor == "cuda")
    cpu_spec = next(s for s in ws_matrix.images if s.stack == "tensorflow" and s.base.vendor == "cpu")
    assert rel.exact_pins(pub, cuda_spec) == {"nvidia-cuda-runtime-cu12": "12.5.82", "nvidia-cudnn-cu12": "9.3.0.75"}
    assert rel.exact_pins(pub, cpu_spec) == {}


# --- `newest:` moves the buildable slice forward with no include edited (issue 42) ---------------


def test_apply_alone_moves_a_newest_slice_forward(in_tmp: Path, filled: FakeIndex) -> None:
    """A bootstrapped base under `newest: releases: 1`: the release `--apply` adds to `frameworks:` is
    planned there and the one it replaces is skipped naming the entry; no other line of the file changes."""
    path = in_tmp / "matrix.yaml"
    text = MATRIX.replace(
        "  cpu-ubuntu24.04:\n", "  local-debian12:\n    vendor: cpu\n    os: debian12\n    bootstrap: debootstrap\n  cpu-ubuntu24.04:\n"
    )
    text += "newest:\n  - {base: local-debian12, releases: 1}\n"
    path.write_text(text)
    before = {s.id for s in make_plan(load_matrix(path), table()).images if s.base.name == "local-debian12"}
    assert {"numba0.68.0-cpu-py3.11-debian12", "tensorflow2.21.0-cpu-py3.11-debian12"} <= before
    apply_mod.apply(path, rel.find_updates(load_matrix(path), table(), client(filled)).releases)
    changed = [d for d in difflib.ndiff(text.splitlines(), path.read_text().splitlines()) if d[:1] in "+-"]
    assert all(d[2:].startswith("  ") and ": [" in d for d in changed) and changed, changed  # frameworks lists only
    plan = make_plan(load_matrix(path), table())
    after = {s.id for s in plan.images if s.base.name == "local-debian12"}
    assert {"numba0.68.1-cpu-py3.11-debian12", "tensorflow2.21.1-cpu-py3.11-debian12"} <= after
    assert not {"numba0.68.0-cpu-py3.11-debian12", "tensorflow2.21.0-cpu-py3.11-debian12"} & after
    held = [s.reason for s in plan.skipped if s.base == "local-debian12" and s.frameworks == (("numba", "0.68.0"),) and s.python == "3.11"]
    assert held == [
        f"older than the newest release of each framework that install on local-debian12 (linux/amd64, Python 3.11), "
        f"which matrix.yaml:{text.count(chr(10))} plans (numba 0.68.1); an include adds it back"
    ]


def test_the_embedded_matrix_gets_its_newest_release_back_into_the_debian13_slice_by_apply_alone(
    repo_matrix: Path, filled: FakeIndex
) -> None:
    """Issue 42's done-when: numba 0.68.1 taken out of matrix.yaml's frameworks: `updates --apply` (here
    against the fake index, which publishes it) adds it back and the Debian 13 images carry it again, CPU
    and CUDA from wheels, amd64 and arm64; no include or newest line is edited."""

    def debian13_numba(path: Path) -> set[str]:
        return {s.id for s in make_plan(load_matrix(path), table()).images if s.stack == "numba" and s.base.os == "debian13"}

    newest = {"numba0.68.1-cpu-py3.13-debian13", "numba0.68.1-cu130-py3.13-debian13"}
    assert newest | {f"{i}-arm64" for i in newest} <= debian13_numba(repo_matrix)
    original = repo_matrix.read_text(encoding="utf-8")
    assert original.count('"0.68.1"') == 1, "only frameworks.numba names numba 0.68.1"
    repo_matrix.write_text(original.replace(', "0.68.1"]', "]"), encoding="utf-8")
    assert not newest & debian13_numba(repo_matrix)  # the slice fell back to 0.68.0
    edits = apply_mod.apply(repo_matrix, rel.find_updates(load_matrix(repo_matrix), table(), client(filled)).releases)
    assert "matrix.yaml: frameworks.numba += 0.68.1" in edits
    after = repo_matrix.read_text(encoding="utf-8")
    changed = [d for d in difflib.ndiff(original.splitlines(), after.splitlines()) if d[:1] in "+-"]
    assert all(d[2:].startswith("  ") and ": [" in d for d in changed), changed  # frameworks lists only
    assert newest | {f"{i}-arm64" for i in newest} <= debian13_numba(repo_matrix)
