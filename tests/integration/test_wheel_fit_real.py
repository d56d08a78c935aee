"""The fatbin reader against NVIDIA's cuobjdump on real wheels, and the committed fit.json against both
(issue 38): torch on x86_64 and aarch64, jax, cupy, and numba-cuda's NVRTC.

Bounded: one member of each wheel, the smallest that holds device code, read from the wheel on
this machine (/opt/pypi-more, torch and NVRTC) or fetched by HTTP byte ranges from PyPI (the zip's
central directory and that member only, a few MB: never the whole wheel). The zip's CRC-32 of each
member is checked as it is read; the wheel's sha256 was checked when `builder lock` measured it, and
the reading here must equal what fit.json holds for that wheel (same name, same entries).
In the integration tier because it reaches the package index (`docker` marker, as test_locking.py).
"""

from __future__ import annotations

import io
import json
import urllib.request
import zipfile
from pathlib import Path

import pytest

from builder.fit import cuobjdump, fatbin, wheels
from builder.model.locked_fit import from_json
from builder.updates import wheelmeta
from builder.updates.wheelfiles import WheelFiles

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
PYPI = "https://pypi.org/simple"
LOCAL = Path("/opt/pypi-more/files")

# (image whose fit.json names the wheel, wheel file, the member read)
CASES = [
    ("torch2.14.1-cu130-py3.11-debian12", "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", "torch/lib/libtorch_nvshmem.so"),
    ("torch2.14.1-cu130-py3.11-debian12-arm64", "torch-2.14.1-cp311-cp311-manylinux_2_28_aarch64.whl", "torch/lib/libtorch_nvshmem.so"),
    ("jax0.10.2-cu130-py3.11-debian12", "jax_cuda13_plugin-0.10.2-cp311-cp311-manylinux_2_27_x86_64.whl", "jax_cuda13_plugin/_prng.so"),
    (
        "cupy14.0.0-cu130-py3.11-debian12-arm64",
        "cupy_cuda13x-14.0.0-cp311-cp311-manylinux2014_aarch64.whl",
        "cupy/random/_generator_api.cpython-311-aarch64-linux-gnu.so",
    ),
    (
        "numba0.68.0-cu130-py3.11-debian12",
        "nvidia_cuda_nvrtc-13.0.88-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl",
        "nvidia/cu13/lib/libnvrtc.so.13",
    ),
]
MAX_MEMBER = 64 * 2**20  # compressed, fetched: the members are 0.2-5 MB (NVRTC 44 MB, read from /opt/pypi-more where it is)


def _range(url: str, first: int, last: int) -> bytes:
    request = urllib.request.Request(url, headers={"Range": f"bytes={first}-{last}"})
    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - PyPI's https URL from its own listing
        assert response.status == 206, f"{url} answered {response.status}, not a byte range"
        return bytes(response.read())


def member(wheel: str, name: str, folder: Path) -> Path:
    """The member, CRC-checked, from the local wheel or by byte ranges from PyPI's."""
    local = LOCAL / wheel
    remote = not local.is_file()
    if not remote:
        archive = zipfile.ZipFile(local)
    else:
        project = wheel.split("-", 1)[0].replace("_", "-")
        listed = next(f for f in WheelFiles([PYPI]).files(project) if f.filename == wheel)
        assert listed.size is not None
        archive = zipfile.ZipFile(io.BufferedReader(wheelmeta._Ranges(listed.url, listed.size, _range), wheelmeta.BLOCK))
    with archive:
        info = archive.getinfo(name)
        assert not remote or info.compress_size <= MAX_MEMBER, f"{name} is {info.compress_size} bytes to fetch: pick a smaller member"
        out = folder / Path(name).name
        out.write_bytes(archive.read(info))  # zipfile checks the member's CRC-32
    return out


@pytest.mark.parametrize(
    ("image", "wheel", "name"), CASES, ids=[f"{c[1].split('-')[0]}-{'arm64' if 'aarch64' in c[1] else 'x86_64'}" for c in CASES]
)
def test_the_fatbin_reader_cuobjdump_and_fit_json_agree_on_a_real_wheel(image: str, wheel: str, name: str, tmp_path: Path) -> None:
    committed = from_json(json.loads((IMAGES / image / "fit.json").read_text(encoding="utf-8")), ValueError)
    [reading] = [w.code for w in committed.wheels if w.code.filename == wheel]
    path = member(wheel, name, tmp_path)
    mine = fatbin.read(path)
    nvidia = cuobjdump.measure(path, cuobjdump.find_binary())
    assert mine == nvidia, f"{wheel} {name}: the fatbin reader says {mine.label}, cuobjdump {nvidia.label}"
    recorded = next((lib for lib in reading.libraries if lib.path == name), None)
    if recorded is None:
        assert not mine.sass and not mine.ptx, f"fit.json records no device code in {name}, which has {mine.label}"
    else:
        assert fatbin.embedded(((k, sm, fl, code), n) for k, sm, fl, code, n in recorded.entries) == mine
    if name.rsplit("/", 1)[-1].startswith("libnvrtc.so") and wheels.wheel_machine(wheel) == wheels.this_machine():
        answer = wheels.load("nvrtc", path)
        assert isinstance(answer, tuple) and [(c.version, c.archs) for c in reading.nvrtc] == [answer]
