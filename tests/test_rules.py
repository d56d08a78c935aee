"""Compatibility rules: each decision with its true and false cases, and the reason naming the fact.

Bases are built as records (no matrix file); the facts come from the shipped table
(builder/data/compat.yaml via builder.compat.table()).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from builder.compat.facts import DEFAULT_PATH, Compat
from builder.compat.rules import decide, load_table, table
from builder.compat.rules.cuda import accelerator, mvc_driver, require_cuda, toolkit_driver
from builder.compat.rules.cupy import decide_cupy
from builder.compat.rules.jax import decide_jax
from builder.compat.rules.numba import decide_numba
from builder.compat.rules.numpy import pick_numpy
from builder.compat.rules.python import OS_ONLY, decide_python
from builder.compat.rules.tensorflow import decide_tensorflow
from builder.compat.rules.torch import TorchFacts, decide_torch, pick_variant, variant_from_requires
from builder.model.plan import Base, Install, Vendor, Verdict
from builder.util.errors import UserError


@pytest.fixture(scope="module")
def compat() -> Compat:
    return table()


def base(vendor: Vendor, version: str | None = None, os: str = "ubuntu22.04", name: str | None = None) -> Base:
    label = name or f"{vendor}{version or ''}-{os}"
    image = None if vendor == "cpu" and os == "debian12" else f"example/{vendor}:{version or 'latest'}"
    return Base(name=label, vendor=vendor, os=os, version=version, image=image)


CPU = base("cpu", os="ubuntu24.04", name="cpu-ubuntu24.04")
CUDA118 = base("cuda", "11.8.0", name="cuda11.8-ubuntu22.04")
CUDA120 = base("cuda", "12.0.1", name="cuda12.0-ubuntu22.04")
CUDA124 = base("cuda", "12.4.1", name="cuda12.4-ubuntu22.04")
CUDA125 = base("cuda", "12.5.1", name="cuda12.5-ubuntu22.04")
CUDA128 = base("cuda", "12.8.1", "ubuntu24.04", name="cuda12.8-ubuntu24.04")
CUDA130 = base("cuda", "13.0.0", "ubuntu24.04", name="cuda13.0-ubuntu24.04")
CUDA132 = base("cuda", "13.2.0", "ubuntu24.04", name="cuda13.2-ubuntu24.04")
ROCM60 = base("rocm", "6.0", name="rocm6.0-ubuntu22.04")
ROCM62 = base("rocm", "6.2", name="rocm6.2-ubuntu22.04")
ROCM64 = base("rocm", "6.4", name="rocm6.4-ubuntu22.04")
ROCM71 = base("rocm", "7.1", name="rocm7.1-ubuntu22.04")
ROCM72 = base("rocm", "7.2", name="rocm7.2-ubuntu22.04")


def ok(verdict: Verdict) -> Install:
    assert verdict.ok, f"expected ok, got: {verdict.reason}"
    assert verdict.install is not None
    return verdict.install


def refused(verdict: Verdict, *facts: str) -> str:
    """The verdict is a refusal whose reason names every fact given."""
    assert not verdict.ok, f"expected a refusal, got {verdict.install}"
    assert verdict.install is None
    for fact in facts:
        assert fact in verdict.reason, f"{fact!r} not in reason {verdict.reason!r}"
    return verdict.reason


# ---------------------------------------------------------------- torch


@pytest.mark.parametrize(
    ("b", "python", "version", "variant"),
    [
        (CUDA124, "3.11", "2.5.1", "cu124"),
        (CUDA128, "3.12", "2.5.1", "cu124"),  # newest variant <= 12.8 within CUDA 12
        (CUDA128, "3.12", "2.13.0", "cu126"),
        (CUDA130, "3.12", "2.13.0", "cu130"),
        (CUDA132, "3.12", "2.14.1", "cu132"),
        (CUDA118, "3.11", "2.5.1", "cu118"),
        (ROCM62, "3.11", "2.5.1", "rocm6.2"),
        (ROCM64, "3.11", "2.5.1", "rocm6.2"),  # newest ROCm 6 variant <= 6.4
        (ROCM72, "3.12", "2.13.0", "rocm7.2"),
        (CPU, "3.12", "2.13.0", "cpu"),
        (CPU, "3.12", "2.5.1", "cpu"),
    ],
)
def test_torch_variant_and_index(b: Base, python: str, version: str, variant: str, compat: Compat) -> None:
    install = ok(decide_torch(b, python, version, compat))
    assert install.variant == variant
    pypi = {"2.5.1": "cu124", "2.13.0": "cu130", "2.14.1": "cu130"}.get(version)
    if variant == pypi:  # PyPI's own wheel is this variant: installed from PyPI, no extra index
        assert install.requirements == (f"torch=={version}",)
        assert install.index_urls == ()
    else:
        assert install.requirements == (f"torch=={version}+{variant}",)
        assert install.index_urls == (f"https://download.pytorch.org/whl/{variant}",)


@pytest.mark.parametrize(
    ("requires", "variant"),
    [
        (["filelock", 'nvidia-cuda-runtime-cu12==12.4.127; platform_system == "Linux" and platform_machine == "x86_64"'], "cu124"),
        (['cuda-toolkit[cublas,cudart,cufft,curand,cusolver,cusparse]==13.0.3; platform_system == "Linux"', "typing-extensions"], "cu130"),
        (['nvidia-cuda-runtime-cu11==11.8.89; platform_system == "Linux"'], "cu118"),
        (["filelock", "sympy", "networkx"], None),
    ],
)
def test_pypis_default_torch_variant_comes_from_the_wheels_own_requirements(requires: list[str], variant: str | None) -> None:
    assert variant_from_requires(requires) == variant


def test_the_pypi_variant_in_the_table_is_one_the_release_ships(compat: Compat) -> None:
    facts = compat.facts(TorchFacts)
    assert {r.release: r.pypi for r in facts.releases if r.pypi} == {"2.5": "cu124", "2.13": "cu130", "2.14": "cu130", "2.15": "cu132"}


def test_torch_records_built_cuda_and_cudnn(compat: Compat) -> None:
    install = ok(decide_torch(CUDA124, "3.11", "2.5.1", compat))
    assert (install.built_cuda, install.cudnn) == ("12.4", "9.1.0.70")
    install = ok(decide_torch(CUDA130, "3.12", "2.13.0", compat))
    assert (install.built_cuda, install.cudnn) == ("13.0", "9.20.0.48")
    cpu = ok(decide_torch(CPU, "3.12", "2.13.0", compat))
    assert (cpu.built_cuda, cpu.cudnn) == (None, None)


def test_torch_has_no_wheel_for_a_newer_cuda_major(compat: Compat) -> None:
    refused(decide_torch(CUDA130, "3.12", "2.5.1", compat), "torch 2.5.1", "CUDA 13", "cu118, cu121, cu124", CUDA130.name)


def test_torch_has_no_wheel_below_its_oldest_variant(compat: Compat) -> None:
    refused(decide_torch(CUDA124, "3.11", "2.13.0", compat), "torch 2.13.0", "12.4.1", "cu126, cu130")
    refused(decide_torch(CUDA118, "3.11", "2.13.0", compat), "CUDA 11")


def test_torch_rocm_variant_must_share_the_major(compat: Compat) -> None:
    refused(decide_torch(ROCM62, "3.11", "2.13.0", compat), "ROCm 6", "rocm7.2")


def test_torch_214_says_its_rocm_wheels_exist_but_are_unconfirmed(compat: Compat) -> None:
    """Review: "torch 2.14.1 ships no ROCm wheels" was false; it ships ROCm 7.x wheels under an unconfirmed index name."""
    reason = refused(decide_torch(ROCM72, "3.12", "2.14.1", compat), "torch 2.14 ships ROCm 7.x wheels", "unconfirmed")
    assert "no ROCm wheels" not in reason


def test_a_cuda_12_8_base_with_an_older_torch_variant_warns_about_blackwell(compat: Compat) -> None:
    verdict = decide_torch(CUDA128, "3.12", "2.13.0", compat)
    assert verdict.ok and verdict.install is not None and verdict.install.variant == "cu126"
    assert any("no sm_100/sm_120 kernels" in w and "Blackwell" in w for w in verdict.warnings)
    assert not decide_torch(CUDA130, "3.12", "2.13.0", compat).warnings


@pytest.mark.parametrize(
    ("python", "version"), [("3.13", "2.5.1"), ("3.8", "2.5.1"), ("3.9", "2.13.0"), ("3.15", "2.13.0"), ("3.15", "2.14.1")]
)
def test_torch_python_outside_range(python: str, version: str, compat: Compat) -> None:
    refused(decide_torch(CPU, python, version, compat), f"torch {version} supports Python", f"this image has Python {python}")


@pytest.mark.parametrize(("python", "version"), [("3.9", "2.5.1"), ("3.12", "2.5.1"), ("3.10", "2.13.0"), ("3.14", "2.13.0")])
def test_torch_python_range_edges_are_inside(python: str, version: str, compat: Compat) -> None:
    ok(decide_torch(CPU, python, version, compat))


def test_torch_python_313_rejected_for_25_names_the_range(compat: Compat) -> None:
    reason = refused(decide_torch(CUDA124, "3.13", "2.5.1", compat))
    assert reason == "torch 2.5.1 supports Python 3.9-3.12; this image has Python 3.13"


def test_torch_unknown_release(compat: Compat) -> None:
    refused(decide_torch(CPU, "3.11", "1.13.1", compat), "torch 1.13.1 is not in the compatibility table", "compat.yaml")


def test_pick_variant_is_newest_at_or_below_within_the_major() -> None:
    assert pick_variant(("cu118", "cu121", "cu124"), "12.3.2") == "cu121"
    assert pick_variant(("cu118", "cu121", "cu124"), "12.0") is None
    assert pick_variant(("cu126", "cu130", "cu132"), "13.1.0") == "cu130"
    assert pick_variant(("rocm6.1", "rocm6.2.4"), "6.2") == "rocm6.2.4"  # 6.2.4 is a 6.2 wheel
    assert pick_variant(("rocm6.1", "rocm6.2.4"), "6.1.3") == "rocm6.1"


# ---------------------------------------------------------------- tensorflow


@pytest.mark.parametrize("b", [CUDA125, CUDA128])
def test_tensorflow_and_cuda_on_tested_minor_or_newer(b: Base, compat: Compat) -> None:
    install = ok(decide_tensorflow(b, "3.12", "2.21.0", compat))
    assert install.requirements == ("tensorflow[and-cuda]==2.21.0",)
    assert (install.variant, install.built_cuda, install.cudnn) == ("cuda12", "12.5", "9.3")
    assert install.index_urls == ()


def test_tensorflow_on_an_older_cuda_12_minor_is_not_planned(compat: Compat) -> None:
    """[and-cuda] brings CUDA 12.5+ wheels; every image holds its CUDA wheels on its base's minor (one
    CUDA user space), so a 12.4 base cannot hold them. It was planned with a warning naming 12.5
    while its lock loaded 12.9 (issue 15)."""
    refused(decide_tensorflow(CUDA124, "3.11", "2.18.0", compat), "needs CUDA >= 12.5 wheels", "one CUDA per image")
    assert ok(decide_tensorflow(CUDA125, "3.11", "2.18.0", compat)).built_cuda == "12.5"


def test_tensorflow_rejects_cuda_11(compat: Compat) -> None:
    refused(decide_tensorflow(CUDA118, "3.11", "2.18.0", compat), "tested with CUDA 12.5", "CUDA 11")


def test_tensorflow_rejects_another_cuda_major(compat: Compat) -> None:
    refused(decide_tensorflow(CUDA130, "3.12", "2.21.0", compat), "tested with CUDA 12.5", "CUDA 13")


def test_tensorflow_accepts_cuda_11_for_an_11_release(compat: Compat) -> None:
    install = ok(decide_tensorflow(CUDA118, "3.11", "2.14.0", compat))
    assert install.built_cuda == "11.8"


def test_tensorflow_before_and_cuda_extra(compat: Compat) -> None:
    refused(decide_tensorflow(CUDA118, "3.11", "2.13.0", compat), "predates the [and-cuda] extra", "2.14")


@pytest.mark.parametrize("os", ["ubuntu24.04", "debian12"])
def test_tensorflow_cpu_package_on_cpu(os: str, compat: Compat) -> None:
    install = ok(decide_tensorflow(base("cpu", os=os), "3.11", "2.21.0", compat))
    assert install.requirements == ("tensorflow-cpu==2.21.0",)
    assert install.variant == "cpu"


@pytest.mark.parametrize(("python", "version"), [("3.13", "2.18.0"), ("3.9", "2.21.0")])
def test_tensorflow_python_range(python: str, version: str, compat: Compat) -> None:
    refused(decide_tensorflow(CPU, python, version, compat), f"tensorflow {version} supports Python", f"Python {python}")


def test_tensorflow_unknown_release(compat: Compat) -> None:
    refused(decide_tensorflow(CPU, "3.11", "2.99.0", compat), "tensorflow 2.99.0 is not in the compatibility table")


@pytest.mark.parametrize(
    ("b", "version", "wheel"),
    [(ROCM62, "2.16.1", "2.16.1.620"), (ROCM62, "2.14.1", "2.14.1.620"), (ROCM60, "2.14.0", "2.14.0.600")],
)
def test_tensorflow_rocm_for_listed_pairs(b: Base, version: str, wheel: str, compat: Compat) -> None:
    verdict = decide_tensorflow(b, "3.11", version, compat)
    install = ok(verdict)
    assert install.requirements == (f"tensorflow-rocm=={wheel}",)
    assert install.index_urls == (f"https://repo.radeon.com/rocm/manylinux/rocm-rel-{b.version}/",)
    assert install.variant == f"rocm{b.version}"
    assert verdict.warnings and "unconfirmed" in verdict.warnings[0]


def test_tensorflow_rocm_version_not_listed_for_that_rocm(compat: Compat) -> None:
    reason = refused(decide_tensorflow(ROCM62, "3.11", "2.18.0", compat))
    assert reason == "tensorflow-rocm for ROCm 6.2 exists for 2.14.1, 2.15.1, 2.16.1 only, not 2.18.0"


def test_tensorflow_rocm_unlisted_rocm(compat: Compat) -> None:
    refused(decide_tensorflow(ROCM64, "3.11", "2.16.1", compat), "tensorflow-rocm wheels are listed for ROCm 6.0, 6.1, 6.2", "ROCm 6.4")


# ---------------------------------------------------------------- jax


@pytest.mark.parametrize(("b", "version"), [(CUDA128, "0.10.2"), (CUDA130, "0.7.2"), (CUDA132, "0.11.0")])
def test_jax_cuda_extra_by_major(b: Base, version: str, compat: Compat) -> None:
    python = "3.12"
    install = ok(decide_jax(b, python, version, compat))
    assert b.version is not None
    major = b.version.split(".")[0]
    assert install.requirements == (f"jax[cuda{major}]=={version}", f"jaxlib=={version}")
    assert install.variant == f"cuda{major}"


def test_jax_0_4_35_pins_jaxlib_and_the_plugin_to_what_its_extra_requires(compat: Compat) -> None:
    """Review: jax[cuda12]==0.4.35 requires jaxlib==0.4.34 (a jaxlib==0.4.35 pin cannot resolve); the plugin
    must match that jaxlib (jax-cuda12-plugin 0.4.35 needs jaxlib >= 0.4.35)."""
    install = ok(decide_jax(CUDA124, "3.11", "0.4.35", compat))
    assert install.requirements == ("jax[cuda12]==0.4.35", "jaxlib==0.4.34", "jax-cuda12-plugin[with-cuda]==0.4.34")
    cpu = ok(decide_jax(CPU, "3.12", "0.4.35", compat))
    assert cpu.requirements == ("jax==0.4.35", "jaxlib==0.4.35")  # no cuda extra: the matching jaxlib


def test_jax_cuda12_needs_12_1(compat: Compat) -> None:
    reason = refused(decide_jax(CUDA120, "3.11", "0.4.35", compat), "cuda12 wheels need CUDA >= 12.1", "12.0.1")
    assert CUDA120.name in reason


def test_jax_cuda13_only_from_0_7_2(compat: Compat) -> None:
    """Review: the first jax-cuda13-plugin on PyPI is 0.7.2 (0.7.0 and 0.7.1 declare the extra, but it cannot install)."""
    refused(decide_jax(CUDA130, "3.12", "0.7.1", compat), "ships CUDA 12 wheels only", "the first with CUDA 13 wheels is 0.7.2")
    refused(decide_jax(CUDA130, "3.12", "0.6.2", compat), "ships CUDA 12 wheels only")
    install = ok(decide_jax(CUDA130, "3.12", "0.7.2", compat))
    assert install.cudnn == ">=9.12"  # jax cuda13 needs cuDNN >= 9.12


def test_jax_0_4_35_ships_cuda_12_wheels_only(compat: Compat) -> None:
    """Review: the old reason "jax 0.4.35 ships CUDA 12/13 wheels" was false."""
    reason = refused(decide_jax(CUDA118, "3.11", "0.4.35", compat), "ships CUDA 12 wheels only", "CUDA 11")
    assert "12/13" not in reason


@pytest.mark.parametrize(
    ("python", "version", "good"),
    [
        ("3.10", "0.6.2", True),
        ("3.10", "0.7.0", False),  # 0.7.0 needs Python 3.11
        ("3.11", "0.7.0", True),
        ("3.11", "0.10.2", True),
        ("3.11", "0.11.0", False),  # 0.11.0 needs Python 3.12
        ("3.12", "0.11.0", True),
    ],
)
def test_jax_python_minimums(python: str, version: str, good: bool, compat: Compat) -> None:
    verdict = decide_jax(CPU, python, version, compat)
    if good:
        assert ok(verdict).requirements == (f"jax=={version}", f"jaxlib=={version}")
    else:
        refused(verdict, f"jax {version} supports Python", f"Python {python}")


def test_jax_predates_table(compat: Compat) -> None:
    refused(decide_jax(CPU, "3.11", "0.4.20", compat), "predates the table")


def test_jax_cudnn_minimum_and_numpy_floor(compat: Compat) -> None:
    install = ok(decide_jax(CUDA128, "3.12", "0.11.0", compat))
    assert install.cudnn == ">=9.8"
    assert install.numpy_min == "2.1"


@pytest.mark.parametrize(
    ("python", "version", "floor"), [("3.11", "0.4.35", "1.24"), ("3.12", "0.4.35", "1.26"), ("3.11", "0.10.2", "2.0")]
)
def test_jax_numpy_floors_from_its_metadata(python: str, version: str, floor: str, compat: Compat) -> None:
    """Review: 0.4.35 needs NumPy >= 1.24 (>= 1.26 on Python 3.12); 0.10.x needs >= 2.0."""
    assert ok(decide_jax(CPU, python, version, compat)).numpy_min == floor


@pytest.mark.parametrize(
    ("b", "version", "plugin"),
    [
        (ROCM71, "0.9.1", "jax-rocm7-plugin"),
        (ROCM72, "0.10.2", "jax-rocm7-plugin"),
    ],
)
def test_jax_rocm_plugin_matches_the_base(b: Base, version: str, plugin: str, compat: Compat) -> None:
    install = ok(decide_jax(b, "3.12", version, compat))
    assert install.requirements == (f"jax=={version}", f"jaxlib=={version}", f"{plugin}=={version}")
    assert install.variant == f"rocm{b.version}"


@pytest.mark.parametrize(
    ("b", "version", "words"),
    [
        (
            ROCM60,
            "0.4.35",
            ("jax-rocm60-plugin 0.4.35 is not in compat.yaml rocm.wheels", "NEEDED"),
        ),  # what it loads is not read: not planned
        (ROCM72, "0.6.0", ("jax-rocm7-plugin 0.6.0 is not in compat.yaml rocm.wheels",)),
        (ROCM72, "0.12.0", ("jax-rocm7-pjrt 0.12.0 loads", "librocm_sysdeps_drm.so.2", "ROCm Python wheels")),  # TheRock's sysdeps
    ],
)
def test_a_jax_rocm_plugin_whose_needed_the_base_lacks_or_nobody_read_is_not_planned(
    b: Base, version: str, words: tuple[str, ...], compat: Compat
) -> None:
    refused(decide_jax(b, "3.12", version, compat), *words)


@pytest.mark.parametrize(("b", "version", "plugin"), [(ROCM62, "0.5.0", "jax-rocm60-plugin"), (ROCM64, "0.10.2", "jax-rocm7-plugin")])
def test_jax_rocm_plugin_mismatch(b: Base, version: str, plugin: str, compat: Compat) -> None:
    refused(decide_jax(b, "3.12", version, compat), plugin, "must match the host ROCm", f"ROCm {b.version}")


def test_jax_rocm_plugin_exists_only_where_pypi_has_it(compat: Compat) -> None:
    """Review: jax-rocm60-plugin exists for 0.4.35 and 0.5.0 only (so "0.4.35 publishes no ROCm plugin" was false)."""
    refused(decide_jax(ROCM60, "3.12", "0.5.1", compat), "jax 0.5.1 has no ROCm plugin on PyPI", "jax-rocm60-plugin 0.4.35-0.5.0")
    refused(decide_jax(ROCM60, "3.11", "0.4.34", compat), "no ROCm plugin on PyPI")
    reason = refused(decide_jax(ROCM62, "3.11", "0.4.35", compat), "jax-rocm60-plugin", "built for ROCm 6.0", "ROCm 6.2")
    assert "no ROCm plugin wheels" not in reason


# ---------------------------------------------------------------- cupy


@pytest.mark.parametrize(
    ("b", "version", "package"),
    [
        (CUDA118, "13.6.0", "cupy-cuda11x"),
        (CUDA124, "13.6.0", "cupy-cuda12x"),
        (CUDA130, "13.6.0", "cupy-cuda13x"),
        (CUDA128, "14.0.0", "cupy-cuda12x"),
        (CUDA130, "14.0.0", "cupy-cuda13x"),
    ],
)
def test_cupy_package_by_cuda_major(b: Base, version: str, package: str, compat: Compat) -> None:
    install = ok(decide_cupy(b, "3.11" if b.os == "ubuntu22.04" else "3.12", version, compat))
    assert install.requirements == (f"{package}=={version}",)
    assert install.variant == package.removeprefix("cupy-")


def test_cupy_no_package_for_that_major(compat: Compat) -> None:
    refused(decide_cupy(CUDA118, "3.11", "14.0.0", compat), "nothing for CUDA 11", "cupy-cuda12x, cupy-cuda13x")
    refused(decide_cupy(CUDA130, "3.12", "13.3.0", compat), "nothing for CUDA 13")


@pytest.mark.parametrize(("b", "version", "span"), [(CUDA128, "13.3.0", "11.2-12.6"), (CUDA132, "14.0.0", "12.0-13.1")])
def test_cupy_cuda_range_per_release(b: Base, version: str, span: str, compat: Compat) -> None:
    refused(decide_cupy(b, "3.12", version, compat), f"cupy {version} supports CUDA {span}", str(b.version))


def test_cupy_has_no_cpu_build(compat: Compat) -> None:
    refused(decide_cupy(CPU, "3.12", "13.6.0", compat), "no CPU build")


def test_cupy_rocm_reason_says_no_rocm6_wheels(compat: Compat) -> None:
    # cupy-rocm-7-0 14.x is on PyPI: the reason must not say CuPy has no ROCm wheels past 5.0
    refused(decide_cupy(ROCM62, "3.11", "14.2.0", compat), "ROCm 4.3 and 5.0", "cupy-rocm-7-0", "from v14.0.0", "ROCm 6.2")


@pytest.mark.parametrize("version", ["0.6.1", "0.6.2", "0.7.0", "0.7.2", "0.8.0", "0.8.3", "0.9.0", "0.9.0.1", "0.12.0.1"])
def test_jax_rocm7_plugin_only_for_the_releases_pypi_can_install(version: str, compat: Compat) -> None:
    """PyPI has no jax-rocm7-plugin at these jax versions (0.9.0's needs a jax-rocm7-pjrt PyPI lacks)."""
    refused(decide_jax(ROCM72, "3.12", version, compat), f"jax {version} has no ROCm plugin on PyPI")


def test_jax_0_12_numpy_floor_and_cudnn_floor_from_its_metadata(compat: Compat) -> None:
    """jax 0.12 requires numpy>=2.2; jax-cuda12-plugin requires cuDNN >= 9.10.2 from 0.11.2 (9.8 before)."""
    assert ok(decide_jax(CPU, "3.12", "0.12.0", compat)).numpy_min == "2.2"
    assert ok(decide_jax(CPU, "3.12", "0.11.2", compat)).numpy_min == "2.1"
    assert ok(decide_jax(CUDA128, "3.12", "0.12.0", compat)).cudnn == ">=9.10.2"
    assert ok(decide_jax(CUDA128, "3.12", "0.11.2", compat)).cudnn == ">=9.10.2"
    assert ok(decide_jax(CUDA128, "3.12", "0.11.1", compat)).cudnn == ">=9.8"


def test_cupy_python_range_and_numpy_bounds(compat: Compat) -> None:
    refused(decide_cupy(CUDA124, "3.14", "13.6.0", compat), "supports Python 3.9-3.13")
    install = ok(decide_cupy(CUDA124, "3.11", "13.6.0", compat))
    assert (install.numpy_min, install.numpy_max) == ("1.22", "2.3")


# ---------------------------------------------------------------- numba (+ numpy pin)


def numpy_pin(b: Base, python: str, version: str, compat: Compat) -> str | None:
    return pick_numpy((ok(decide_numba(b, python, version, compat)),), python, compat)


def test_numba_060_pins_numpy_2_0(compat: Compat) -> None:
    install = ok(decide_numba(CPU, "3.12", "0.60.0", compat))
    assert install.numpy_max == "2.0"
    assert numpy_pin(CPU, "3.12", "0.60.0", compat) == "2.0.2"


def test_numba_068_on_py311_pins_2_4_6(compat: Compat) -> None:
    # numba 0.68.0 allows NumPy 2.5, but NumPy 2.5 ships no Python 3.11 wheels.
    debian = base("cpu", os="debian12", name="local-debian12")
    assert numpy_pin(debian, "3.11", "0.68.0", compat) == "2.4.6"
    assert numpy_pin(CPU, "3.12", "0.68.0", compat) == "2.5.5"


def test_numba_cuda_caps_numpy_at_2_4(compat: Compat) -> None:
    install = ok(decide_numba(CUDA128, "3.12", "0.68.0", compat))
    assert install.requirements == ("numba==0.68.0", "numba-cuda[cu12]==0.30.4")
    assert install.variant == "cu12"
    assert install.numpy_max == "2.4"
    assert any("row_stack" in note for note in install.notes)
    assert numpy_pin(CUDA128, "3.12", "0.68.0", compat) == "2.4.6"


def test_numba_cuda_extra_follows_the_cuda_major(compat: Compat) -> None:
    assert ok(decide_numba(CUDA130, "3.12", "0.68.0", compat)).requirements[-1] == "numba-cuda[cu13]==0.30.4"


def test_numba_cuda_keeps_a_lower_ceiling_without_note(compat: Compat) -> None:
    install = ok(decide_numba(CUDA124, "3.11", "0.60.0", compat))
    assert install.numpy_max == "2.0"
    assert install.notes == ()


def test_numba_cuda_needs_numba_0_60(compat: Compat) -> None:
    refused(decide_numba(CUDA124, "3.11", "0.59.1", compat), "numba-cuda (CUDA 12) needs numba >= 0.60.0", "0.59.1")
    ok(decide_numba(CPU, "3.12", "0.59.1", compat))  # the CPU image needs no numba-cuda


@pytest.mark.parametrize("version", ["0.60.0", "0.68.0"])
def test_numba_on_cuda_11_uses_its_built_in_target(version: str, compat: Compat) -> None:
    """Review: numba's built-in CUDA target (still in the 0.60 and 0.68 wheels) serves CUDA 11; numba-cuda needs CUDA 12+."""
    install = ok(decide_numba(CUDA118, "3.11", version, compat))
    # its libNVVM comes from the nvidia-cuda-nvcc wheel of the base's CUDA minor (the -runtime base has none)
    assert install.requirements == (f"numba=={version}", "nvidia-cuda-nvcc-cu11==11.8.89")
    assert install.variant == "cuda11" and install.built_cuda == "11"


def test_numba_built_in_target_without_an_nvvm_wheel_for_the_cuda_minor_is_not_planned(compat: Compat) -> None:
    cuda112 = base("cuda", "11.2.2", "ubuntu22.04", name="cuda11.2-ubuntu22.04")
    refused(
        decide_numba(cuda112, "3.11", "0.60.0", compat), "needs libNVVM", "no nvidia-cuda-nvcc wheel for CUDA 11.2", "builtin_nvvm: 11.8"
    )


def test_numba_cuda_is_chosen_per_numba_release_and_cuda_major(compat: Compat) -> None:
    install = ok(decide_numba(CUDA130, "3.12", "0.68.0", compat))
    assert install.requirements == ("numba==0.68.0", "numba-cuda[cu13]==0.30.4")
    assert install.numpy_max == "2.4"  # numba-cuda <= 0.30.4 breaks on NumPy 2.5 (row_stack)


def test_numba_has_no_rocm(compat: Compat) -> None:
    refused(decide_numba(ROCM62, "3.11", "0.60.0", compat), "no ROCm GPU target")


def test_numba_python_range(compat: Compat) -> None:
    refused(decide_numba(CPU, "3.13", "0.60.0", compat), "numba 0.60.0 supports Python 3.9-3.12")
    refused(decide_numba(CPU, "3.9", "0.68.0", compat), "supports Python 3.10-3.14")


def test_numba_unknown_release_says_the_ceiling_is_unknown(compat: Compat) -> None:
    refused(decide_numba(CPU, "3.12", "0.99.0", compat), "NumPy ceiling is unknown")


def test_numba_patch_release_uses_its_minor_row(compat: Compat) -> None:
    install = ok(decide_numba(CPU, "3.12", "0.68.1", compat))
    assert install.numpy_max == "2.5"


def test_numpy_clash_is_reported(compat: Compat) -> None:
    numba = ok(decide_numba(CPU, "3.12", "0.60.0", compat))  # numpy <= 2.0
    jax = ok(decide_jax(CPU, "3.12", "0.11.0", compat))  # numpy >= 2.1
    with pytest.raises(ValueError) as caught:
        pick_numpy((numba, jax), "3.12", compat)
    assert "numba needs numpy <= 2.0" in str(caught.value)
    assert "jax needs numpy >= 2.1" in str(caught.value)


def test_no_numpy_pin_without_a_ceiling(compat: Compat) -> None:
    assert pick_numpy((ok(decide_jax(CPU, "3.12", "0.10.2", compat)),), "3.12", compat) is None


def test_decide_dispatches_by_framework(compat: Compat) -> None:
    assert decide("torch", CUDA124, "3.11", "2.5.1", compat) == decide_torch(CUDA124, "3.11", "2.5.1", compat)
    assert decide("numba", CPU, "3.12", "0.60.0", compat) == decide_numba(CPU, "3.12", "0.60.0", compat)


# ---------------------------------------------------------------- CUDA drivers


@pytest.mark.parametrize(
    ("cuda", "driver"), [("12.4.1", "550.54.15"), ("13.0.0", "580.65.06"), ("11.8.0", "520.61.05"), ("12.4", "550.54.14")]
)
def test_toolkit_driver(cuda: str, driver: str, compat: Compat) -> None:
    assert toolkit_driver(cuda, compat) == driver


def test_toolkit_driver_unknown_release(compat: Compat) -> None:
    assert toolkit_driver("12.7.0", compat) is None  # there is no CUDA 12.7


@pytest.mark.parametrize(
    ("cuda", "driver"), [("12.4.1", "525.60.13"), ("12.8.1", "525.60.13"), ("11.8.0", "450.80.02"), ("13.0.0", "580.0")]
)
def test_mvc_driver(cuda: str, driver: str, compat: Compat) -> None:
    assert mvc_driver(cuda, compat) == driver


def test_require_cuda_starts_with_the_cuda_clause(compat: Compat) -> None:
    value = require_cuda("12.4.1", compat)
    assert value.startswith("cuda>=12.4 ")
    assert "brand=tesla,driver>=470,driver<471" in value
    assert "brand=titanrtx,driver>=535,driver<536" in value
    assert "grid" not in value  # the <=12.4 brand list


def test_require_cuda_newer_brands(compat: Compat) -> None:
    value = require_cuda("12.8.1", compat)
    assert value.startswith("cuda>=12.8 ")
    assert "brand=cloudgaming,driver>=565,driver<566" in value
    assert "geforce" not in value


def test_require_cuda_without_known_branches(compat: Compat) -> None:
    assert require_cuda("12.7.0", compat) == "cuda>=12.7"


def test_accelerator_record(compat: Compat) -> None:
    acc = accelerator(CUDA124, compat)
    assert (acc.kind, acc.version, acc.min_driver, acc.mvc_driver) == ("cuda", "12.4.1", "550.54.15", "525.60.13")
    assert acc.require_cuda is not None and acc.require_cuda.startswith("cuda>=12.4")
    acc13 = accelerator(CUDA130, compat)
    assert (acc13.min_driver, acc13.mvc_driver) == ("580.65.06", "580.0")
    rocm = accelerator(ROCM62, compat)
    assert (rocm.kind, rocm.version, rocm.min_driver, rocm.require_cuda) == ("rocm", "6.2", None, None)
    assert accelerator(CPU, compat).kind == "cpu"


# ---------------------------------------------------------------- Python per OS


@pytest.mark.parametrize(
    ("os", "python", "packages", "binary"),
    [
        ("debian12", "3.11", ("python3", "python3-venv"), "python3.11"),
        ("ubuntu22.04", "3.10", ("python3", "python3-venv"), "python3.10"),
        ("ubuntu22.04", "3.11", ("python3.11", "python3.11-venv"), "python3.11"),
        ("ubuntu24.04", "3.12", ("python3", "python3-venv"), "python3.12"),
    ],
)
def test_python_offered_by_os(os: str, python: str, packages: tuple[str, ...], binary: str, compat: Compat) -> None:
    row = decide_python(base("cpu", os=os), python, compat)
    assert not isinstance(row, str), row
    assert (row.packages, row.bin) == (packages, binary)


@pytest.mark.parametrize(
    ("os", "python", "reason"),
    [
        ("debian12", "3.12", "debian12 packages Python 3.11, not 3.12" + OS_ONLY),
        ("ubuntu24.04", "3.11", "ubuntu24.04 packages Python 3.12, not 3.11" + OS_ONLY),
    ],
)
def test_python_not_offered_by_os(os: str, python: str, reason: str, compat: Compat) -> None:
    assert decide_python(base("cpu", os=os), python, compat) == reason


def test_python_unknown_os(compat: Compat) -> None:
    reason = decide_python(base("cpu", os="fedora40"), "3.12", compat)
    assert isinstance(reason, str) and "fedora40" in reason and "os_python" in reason


# ---------------------------------------------------------------- the table's guards


TABLE_TEXT = DEFAULT_PATH.read_text(encoding="utf-8")


def broken_copy(tmp_path: Path, old: str, new: str) -> tuple[Path, int]:
    """compat.yaml with one edit; returns the copy and the line of the edit."""
    assert TABLE_TEXT.count(old) == 1, f"{old!r} must occur exactly once in compat.yaml"
    text = TABLE_TEXT.replace(old, new)
    line = text[: text.index(new)].count("\n") + 1
    path = tmp_path / "compat.yaml"
    path.write_text(text, encoding="utf-8")
    return path, line


def refuses(path: Path, line: int, *words: str) -> None:
    with pytest.raises(UserError) as caught:
        load_table(path)
    err = caught.value
    assert (err.file, err.line) == (str(path), line), str(err)
    assert err.message.startswith("broken compatibility table: ")
    for word in words:
        assert word in err.message, err.message
    assert re.fullmatch(rf"{re.escape(str(path))}:{line}: broken compatibility table: .+", str(err))


def test_shipped_table_loads() -> None:
    assert load_table() == table()


def test_table_refuses_unsorted_rows(tmp_path: Path) -> None:
    row_24 = '    - {release: "2.4", python: ["3.8", "3.12"], cuda: [cu118, cu121, cu124], rocm: [rocm6.1], cudnn: {cu118: "9.1.0.70", cu121: "9.1.0.70", cu124: "9.1.0.70"}, source: [S7, S8]}\n'
    row_25 = '    - {release: "2.5", python: ["3.9", "3.12"], cuda: [cu118, cu121, cu124], rocm: [rocm6.1, rocm6.2], cudnn: {cu118: "9.1.0.70", cu121: "9.1.0.70", cu124: "9.1.0.70"}, pypi: cu124, source: [S7, S8, PYPI_TORCH]}\n'
    path, line = broken_copy(tmp_path, row_24 + row_25, row_25 + row_24)
    refuses(path, line + 1, "sorted", "2.4 after 2.5")


def test_table_refuses_an_unknown_key(tmp_path: Path) -> None:
    path, line = broken_copy(
        tmp_path, '{cuda: "12.4.1", driver: "550.54.15", cudart:', '{cuda: "12.4.1", driver: "550.54.15", drvier: "1", cudart:'
    )
    refuses(path, line, "unknown key", "drvier")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ('{cuda: "12.4.1", driver: "550.54.15", cudart: "12.5.82",', "cudart 12.5.82 of CUDA 12.4.1 is not a 12.4 version"),
        ('{cuda: "12.4.1", driver: "550.54.15", cudart: "12.4.99",', "cudart 12.4.99 is stated for CUDA 12.4.0 and 12.4.1"),
    ],
)
def test_table_refuses_a_cudart_that_cannot_name_one_release(tmp_path: Path, row: str, message: str) -> None:
    """A lock's runtime wheel names the update release whose driver the image states: one release per cudart, of its minor."""
    path, line = broken_copy(tmp_path, '{cuda: "12.4.1", driver: "550.54.15", cudart: "12.4.127",', row)
    refuses(path, line, message)


def test_table_refuses_a_row_without_source(tmp_path: Path) -> None:
    path, line = broken_copy(
        tmp_path,
        '{version: "0.60.0", python: ["3.9", "3.12"], numpy: ["1.22", "2.0"], source: S17}',
        '{version: "0.60.0", python: ["3.9", "3.12"], numpy: ["1.22", "2.0"]}',
    )
    refuses(path, line, "no source")


def test_table_refuses_an_unknown_source_key(tmp_path: Path) -> None:
    path, line = broken_copy(
        tmp_path,
        '{rocm: "6.2", tf: ["2.14.1", "2.15.1", "2.16.1"], source: S14}',
        '{rocm: "6.2", tf: ["2.14.1", "2.15.1", "2.16.1"], source: S99}',
    )
    refuses(path, line, "unknown source", "S99")


def test_table_refuses_min_above_max(tmp_path: Path) -> None:
    path, line = broken_copy(tmp_path, '{release: "2.18", python: ["3.9", "3.12"]', '{release: "2.18", python: ["3.12", "3.9"]')
    refuses(path, line, "min > max", "[3.12, 3.9]")


def test_table_refuses_an_unparsable_version(tmp_path: Path) -> None:
    path, line = broken_copy(
        tmp_path, '{version: "2.0.2", python: ["3.9", "3.12"], source: PYPI}', '{version: "two", python: ["3.9", "3.12"], source: PYPI}'
    )
    refuses(path, line, "'two' is not a version")


def test_table_refuses_a_misspelled_section(tmp_path: Path) -> None:
    # A renamed section must be a UserError naming the file, not a KeyError from deep inside the loader.
    path, _ = broken_copy(tmp_path, "  mvc_floor:\n", "  mvc_flor:\n")
    with pytest.raises(UserError, match="broken compatibility table"):
        load_table(path)


def test_torch_2_15_is_the_pypi_cu132_build_and_needs_a_cuda_13_2_base(compat: Compat) -> None:
    """PyPI's torch 2.15.0 pins cuda-toolkit 13.2.2 and nvidia-cudnn-cu13 9.26.0.51; Requires-Python >= 3.11."""
    cuda132 = Base(name="cuda13.2-debian12", vendor="cuda", os="debian12", version="13.2", bootstrap="debootstrap")
    install = ok(decide_torch(cuda132, "3.11", "2.15.0", compat))
    assert (install.requirements, install.index_urls, install.variant, install.cudnn) == (("torch==2.15.0",), (), "cu132", "9.26.0.51")
    refused(decide_torch(CUDA130, "3.12", "2.15.0", compat), "no CUDA 13 wheel at or below 13.0.0", "cu132")
    refused(decide_torch(cuda132, "3.10", "2.15.0", compat), "supports Python 3.11-3.15")


def test_table_refuses_a_numba_nvvm_row_that_is_not_an_exact_nvcc_wheel_pin(tmp_path: Path) -> None:
    path, line = broken_copy(
        tmp_path,
        '{cuda: "11.8", wheel: "nvidia-cuda-nvcc-cu11==11.8.89", source: PYPI_NVCC}',
        '{cuda: "11.8", wheel: "nvidia-cuda-nvcc-cu11>=11.8", source: PYPI_NVCC}',
    )
    refuses(path, line, "builtin_nvvm", "nvidia-cuda-nvcc-cu11>=11.8")


def test_the_driver_an_image_states_is_its_locks_update_release() -> None:
    """One number per fact: Table 3's driver of the CUDA release the lock's cudart names (13.0.96 is
    13.0 Update 2), not the minor's first release; none when the table does not list that update."""
    from builder.compat.rules.cuda import release_driver, update_release

    compat = table()
    assert update_release("13.0.96", compat) == "13.0.2" and update_release("13.1.80", compat) == "13.1.0"
    assert update_release("13.2.86", compat) is None  # 13.2 Update 2: no Table 3 row here
    assert release_driver("13.0", compat, "13.0.96") == "580.95.05"
    assert release_driver("12.4", compat, "12.4.127") == "550.54.15"
    assert release_driver("13.2", compat, "13.2.86") is None
    assert release_driver("12.8.1", compat) == "570.124.06"  # an nvidia/cuda base's own release, no cudart wheel
    assert release_driver("12.8.1", compat, "12.4.127") == "570.124.06"  # a runtime of another minor names nothing here
    assert release_driver("13.0", compat) == "580.65.06"  # unlocked: the minor read as X.Y.0
