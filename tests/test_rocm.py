"""AMD (issue 43): the offload-bundle reader on made bundles and code objects, the gfx rule, the ROCm
compat facts and NEEDED check, the plan's ROCm 7 images and `fit --planned --gfx` from their
measured code objects. Offline; tests/integration/test_offload_real.py reads the real wheel and holds
the reader equal to LLVM's clang-offload-bundler."""

from __future__ import annotations

import json
import struct
import sys
import zlib
from pathlib import Path

import pytest
from click.testing import Result

from builder.compat import rocm
from builder.compat.rules import decide, table
from builder.fit import gfx, offload
from builder.model.plan import Base, Plan
from builder.util.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
CUPY = "cupy14.2.0-rocm7.0-py3.12-ubuntu24.04"
ROCM7 = Base("rocm7.0-ubuntu24.04", "rocm", "ubuntu24.04", version="7.0", image="rocm/dev-ubuntu-24.04:7.0")
DEBIAN = Base("rocm5.7-debian13", "rocm", "debian13", version="5.7", bootstrap="debootstrap", packages=("libamdhip64-5",))


def plain_bundle(*ids: str) -> bytes:
    """A clang offload bundle as clang-offload-bundler writes it: magic, count, entries, payloads."""
    header = offload.PLAIN + struct.pack("<Q", len(ids))
    table_size = sum(24 + len(i) for i in ids)
    out, payload, offset = b"", b"", len(header) + table_size
    for i in ids:
        body = b"\0" * 16
        out += struct.pack("<QQQ", offset + len(payload), len(body), len(i)) + i.encode()
        payload += body
    return header + out + payload


def ccob(bundle: bytes, method: int, version: int = 2) -> bytes:
    data = zlib.compress(bundle) if method == 0 else b"(\xb5/\xfd" + b"\0" * 32
    if version == 2:
        return b"CCOB" + struct.pack("<HHIIQ", 2, method, 24 + len(data), len(bundle), 0) + data
    return b"CCOB" + struct.pack("<HHQQQ", 3, method, 32 + len(data), len(bundle), 0) + data


def amdgpu_elf(flags: int, abi: int = 2) -> bytes:
    head = bytearray(64)
    head[:6] = b"\x7fELF\x02\x01"
    head[8] = abi
    struct.pack_into("<H", head, 18, offload.EM_AMDGPU)
    struct.pack_into("<I", head, 48, flags)
    return bytes(head)


def write(tmp_path: Path, data: bytes, name: str = "lib.co") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


# -- the reader ---------------------------------------------------------------------------------------


def test_a_plain_bundle_lists_its_device_targets_not_the_host(tmp_path: Path) -> None:
    ids = ("host-x86_64-unknown-linux-gnu-", "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", "hipv4-amdgcn-amd-amdhsa--gfx11-generic")
    assert offload.read(write(tmp_path, plain_bundle(*ids))) == ["gfx90a:xnack-", "gfx11-generic"]


@pytest.mark.parametrize("version", [2, 3])
def test_a_zlib_compressed_bundle_is_inflated_and_read(tmp_path: Path, version: int) -> None:
    bundle = plain_bundle("host-x86_64-unknown-linux-gnu-", "hipv4-amdgcn-amd-amdhsa--gfx942")
    assert offload.read(write(tmp_path, ccob(bundle, 0, version) + b"\0" * 8 + plain_bundle("hip-amdgcn-amd-amdhsa--gfx1100"))) == [
        "gfx942",
        "gfx1100",
    ]


@pytest.mark.skipif(sys.version_info >= (3, 14), reason="Python 3.14's compression.zstd inflates zstd bundles")
def test_a_zstd_bundle_this_python_cannot_inflate_is_counted_never_guessed(tmp_path: Path) -> None:
    assert offload.read(write(tmp_path, ccob(plain_bundle("hipv4-amdgcn-amd-amdhsa--gfx942"), 1, 3))) == ["compressed:zstd"]
    verdict = gfx.judge_library("lib.so", ["compressed:zstd"], "gfx942", table().rocm)
    assert verdict.status == "unknown" and "cannot inflate" in verdict.reason


@pytest.mark.parametrize(
    ("flags", "abi", "target"),
    [
        (0x73F, 2, "gfx90a:xnack+"),  # rocBLAS's Kernels.so-000-gfx90a-xnack+.hsaco (readelf: xnack on, sramecc any)
        (0x3F | 0x800 | 0x200, 2, "gfx90a:sramecc-:xnack-"),
        (0x41, 2, "gfx1100"),
        (0x4E, 3, "gfx1201"),
        (0x54, 4, "gfx11-generic"),
        (0x2F | 0x100, 1, "gfx906:xnack+"),  # code object V3: on/off bits
    ],
)
def test_a_bare_code_object_names_its_target_from_its_elf_flags(tmp_path: Path, flags: int, abi: int, target: str) -> None:
    assert offload.read(write(tmp_path, amdgpu_elf(flags, abi))) == [target]


def test_hostile_bundles_are_refused_in_bounds(tmp_path: Path) -> None:
    huge = offload.PLAIN + struct.pack("<Q", 10**9) + b"\0" * 64
    with pytest.raises(offload.Bounded):
        offload.read(write(tmp_path, huge))
    with pytest.raises(offload.NotCode):
        offload.read(write(tmp_path, plain_bundle("hipv4-amdgcn-amd-amdhsa--gfx90a")[:40]))
    with pytest.raises(offload.NotCode):
        offload.read(write(tmp_path, b"CCOB" + struct.pack("<HHQQQ", 3, 0, 10**12, 1, 0)))
    fifo = tmp_path / "fifo.so"
    import os

    os.mkfifo(fifo)
    with pytest.raises(offload.NotCode):
        offload.read(str(fifo))


def test_needed_reads_the_dynamic_section() -> None:
    assert any(name.startswith("libc.so") for name in offload.needed(sys.executable)) or "libpython" in " ".join(
        offload.needed(sys.executable)
    )


# -- the gfx rule --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("targets", "device", "status"),
    [
        (["gfx90a", "gfx942"], "gfx942", "fits"),
        (["gfx90a", "gfx942"], "gfx906", "does not fit"),
        (["gfx908"], "gfx90a", "does not fit"),  # no binary compatibility across processors
        (["gfx11-generic"], "gfx1102", "fits"),
        (["gfx11-generic"], "gfx1030", "does not fit"),
        (["gfx90a:xnack+"], "gfx90a", "unknown"),  # a GPU in the default mode (xnack off) cannot run it: not guessed
        (["gfx90a:xnack+"], "gfx90a:xnack+", "fits"),
        (["gfx90a:xnack+"], "gfx90a:xnack-", "does not fit"),
        (["gfx90a:xnack+", "gfx90a:xnack-"], "gfx90a", "fits"),
        (["gfx90a"], "gfx90a:xnack+:sramecc-", "fits"),
    ],
)
def test_the_gfx_rule(targets: list[str], device: str, status: str) -> None:
    assert gfx.judge_library("librocblas.so", targets, device, table().rocm).status == status


@pytest.mark.parametrize("bad", ["sm_90", "gfx", "gfx90a:xnack", "gfx90a;rm", "9.0"])
def test_a_gfx_that_is_not_a_target_is_one_line(bad: str) -> None:
    with pytest.raises(UserError, match="rocminfo"):
        gfx.parse_device(bad)


# -- compat facts and the NEEDED check -----------------------------------------------------------------


def test_the_rocm_facts_load_with_their_guards() -> None:
    facts = table().rocm
    assert facts.release("7.0.2") is not None and "gfx942" in facts.release("7.0").gfx  # type: ignore[union-attr]
    assert "gfx1102" in facts.runs_on("gfx11-generic")
    assert rocm.provided(ROCM7, facts) is not None and "libamdhip64.so.7" in rocm.provided(ROCM7, facts)  # type: ignore[operator]
    assert rocm.provided(DEBIAN, facts) is not None and "libamdhip64.so.5" in rocm.provided(DEBIAN, facts)  # type: ignore[operator]


def test_a_wheel_whose_needed_the_base_lacks_is_skipped_naming_it() -> None:
    why = rocm.missing((("jax-rocm7-pjrt", "0.12.0"),), ROCM7, table().rocm)
    assert why is not None and "librocm_sysdeps_drm.so.2" in why and "ROCm Python wheels" in why, why
    assert rocm.missing((("jax-rocm7-pjrt", "0.10.2"),), ROCM7, table().rocm) is None
    assert "is built for ROCm 7.0" in (rocm.missing((("cupy-rocm-7-0", "14.2.0"),), DEBIAN, table().rocm) or "")
    assert "not in compat.yaml rocm.wheels" in (rocm.missing((("cupy-rocm-7-0", "13.0.0"),), ROCM7, table().rocm) or "")


def test_cupy_and_jax_decide_on_rocm_bases() -> None:
    compat = table()
    cupy = decide("cupy", ROCM7, "3.12", "14.2.0", compat)
    assert cupy.ok and cupy.install is not None and cupy.install.requirements == ("cupy-rocm-7-0==14.2.0",)
    other = decide("cupy", Base("r", "rocm", "ubuntu24.04", version="7.2", image="rocm/dev-ubuntu-24.04:7.2"), "3.12", "14.2.0", compat)
    assert not other.ok and "cupy-rocm-7-0 (ROCm 7.0)" in other.reason
    jax = decide("jax", ROCM7, "3.12", "0.10.2", compat)
    assert jax.ok and jax.install is not None and "jax-rocm7-plugin==0.10.2" in jax.install.requirements


def test_a_broken_rocm_table_is_refused_with_its_line(tmp_path: Path) -> None:
    text = (ROOT / "builder/compat/data/compat.yaml").read_text(encoding="utf-8")
    bad = tmp_path / "compat.yaml"
    bad.write_text(text.replace("gfx: [gfx908, gfx90a, gfx942, gfx950,", "gfx: [gfx942, gfx908, gfx90a, gfx950,", 1), encoding="utf-8")
    from builder.compat.rules import load_table

    with pytest.raises(UserError, match="sorted"):
        load_table(bad)


# -- the plan and `fit --planned --gfx` ------------------------------------------------------------------


def test_the_plan_has_rocm7_images_locked_and_torch_unlocked_with_its_reason(embedded_plan: Plan) -> None:
    rocm_images = {s.id: s for s in embedded_plan.images if s.base.vendor == "rocm"}
    assert {CUPY, "jax0.10.2-rocm7.0-py3.12-ubuntu24.04"} <= set(rocm_images)
    assert all(rocm_images[i].lock is not None for i in (CUPY, "jax0.10.2-rocm7.0-py3.12-ubuntu24.04"))
    torch = rocm_images["torch2.13.0-rocm7.2-py3.12-ubuntu24.04"]
    assert torch.lock is None and torch.unlocked and "download.pytorch.org" in torch.unlocked
    assert not any("rocm6" in i for i in rocm_images)  # the torch 2.5.1 ROCm 6 images are retired


def planned(cli: object, *args: str) -> Result:
    result: Result = cli("--matrix", str(ROOT / "matrix.yaml"), "fit", "--planned", f"id={CUPY}", *args, "--format", "json")  # type: ignore[operator]
    return result


@pytest.mark.parametrize(
    ("device", "status"),
    [("gfx942", "fits"), ("gfx90a", "fits"), ("gfx1100", "fits"), ("gfx906", "does not fit"), ("gfx803", "does not fit")],
)
def test_fit_planned_judges_the_cupy_rocm_image_from_its_code_objects(cli: object, device: str, status: str) -> None:
    result = planned(cli, "--gfx", device, "--arch", "amd64")
    [row] = json.loads(result.stdout)["records"]
    assert row["status"] == status and row["measured"], result.output
    assert "measured from its locked wheels" in row["reason"]
    if status == "does not fit":
        assert "cub.cpython-312-x86_64-linux-gnu.so" in row["reason"] and device in row["reason"]
    assert result.exit_code == (0 if status == "fits" else 1)


def test_fit_gfx_with_nvidia_options_is_one_line(cli: object) -> None:
    result = planned(cli, "--gfx", "gfx942", "--gpu-cc", "9.0")
    assert result.exit_code == 2 and result.stderr.startswith("error: ") and "--gfx" in result.stderr
