"""The AMD code-object reader against LLVM's clang-offload-bundler on the real cupy-rocm-7-0 wheel, and
the committed fit.json against both (issue 43).

Bounded like test_wheel_fit_real.py: one member of the wheel (cupy/random/_generator_api, 1.7 MB
compressed) fetched by HTTP byte ranges from PyPI, its CRC-32 checked; its `.hip_fatbin` section is
handed to `clang-offload-bundler --list` (Debian's clang-tools-14, which reads plain bundles; .ci/docker-up.sh
installs it). In the integration tier because it reaches the package index (`docker` marker).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from builder.fit import offload
from builder.model.locked_fit import from_json
from tests.integration.test_wheel_fit_real import IMAGES, member

pytestmark = pytest.mark.docker

IMAGE = "cupy14.2.0-rocm7.0-py3.12-ubuntu24.04"
WHEEL = "cupy_rocm_7_0-14.2.0-cp312-cp312-manylinux2014_x86_64.whl"
MEMBER = "cupy/random/_generator_api.cpython-312-x86_64-linux-gnu.so"
BUNDLER = ("clang-offload-bundler-14", "clang-offload-bundler")


def bundler() -> str:
    found = next((shutil.which(name) for name in BUNDLER if shutil.which(name)), None)
    assert found, "clang-offload-bundler is not installed: apt-get install clang-tools-14 (bash .ci/docker-up.sh does)"
    return found


def test_the_offload_reader_clang_offload_bundler_and_fit_json_agree_on_the_real_wheel(tmp_path: Path) -> None:
    path = member(WHEEL, MEMBER, tmp_path)
    mine = offload.read(str(path))
    with offload.open_regular(str(path)) as f:
        where = offload.section(f)
        assert where is not None, f"{MEMBER} has no .hip_fatbin section"
        f.seek(where[0])
        (tmp_path / "bundle.bin").write_bytes(f.read(where[1]))
    listed = subprocess.run(
        [bundler(), "--list", "--type=o", f"--inputs={tmp_path / 'bundle.bin'}"], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    llvm = [t for t in (offload.target_of_id(i) for i in listed) if t]
    assert sorted(mine) == sorted(llvm) and len(llvm) == 9, f"the reader says {mine}, clang-offload-bundler {listed}"
    assert {"gfx942", "gfx90a", "gfx1100"} <= set(mine) and not {"gfx906", "gfx803"} & set(mine)
    committed = from_json(json.loads((IMAGES / IMAGE / "fit.json").read_text(encoding="utf-8")), ValueError)
    assert committed.amd is not None
    recorded = committed.amd.library(MEMBER)
    assert recorded is not None and dict(recorded.targets) == dict(Counter(mine))
    [reading] = [w.code for w in committed.wheels if w.code.filename == WHEEL]
    assert set(offload.needed(str(path))) <= set(reading.needs), "the member loads a soname the wheel's reading lacks"
