"""tests/test_probe.py is hermetic (issue 39): it passes when the interpreter that runs it has numba
0.68.0, numba-cuda 0.30.4 and NVIDIA's CUDA runtime and NVRTC 13.0 wheels installed, as a GPU
workstation or the GPU runner has. Run by such an interpreter, 5 of its 59 tests failed on a CPU
machine and 8 on the GPU host: the real packages, libraries and devices leaked into the faked runs.

Here the packages are installed (with their dependencies, from the package index: numba-cuda is not
among the local wheels, hence the integration tier) into a folder cached under build/test-cache/
(keyed by the pins: a later run reuses it), and a venv made for the test sees them through its
site-packages, exactly as an installed package is seen, plus the test interpreter's own packages
(pytest, builder). That venv runs tests/test_probe.py. It needs no engine: tests/conftest.py
schedules it on whichever worker is free (ANY_WORKER), not in a lane.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("numba==0.68.0", "numba-cuda==0.30.4", "nvidia-cuda-runtime==13.0.96", "nvidia-cuda-nvrtc==13.0.88", "numpy==2.4.6")
KEY = hashlib.sha256(json.dumps([PACKAGES, sys.version_info[:2], sysconfig.get_platform()]).encode()).hexdigest()[:16]
CACHE = ROOT / "build" / "test-cache" / f"probe-hermetic-{KEY}"


@pytest.fixture(scope="module")
def installed() -> Path:
    """The packages, installed once into the cache folder (a run cut short leaves only a temporary folder)."""
    done = CACHE / "site-packages"
    if done.is_dir():
        return done
    partial = CACHE.with_name(f"{CACHE.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-input", "--disable-pip-version-check", "--no-compile"]
        subprocess.run([*pip, "--target", str(partial / "site-packages"), *PACKAGES], check=True, timeout=900)
        try:
            partial.rename(CACHE)
        except OSError:
            if not done.is_dir():  # not another run's finished copy: a real failure
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return done


@pytest.fixture(scope="module")
def dirty_python(installed: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv whose site-packages holds the installed packages (first) and the test interpreter's own."""
    venv = tmp_path_factory.mktemp("dirty") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True, capture_output=True, text=True
    ).stdout.strip()
    own = [p for p in [*site.getsitepackages(), site.getusersitepackages()] if os.path.isdir(p)]
    lines = [f"import site; site.addsitedir({str(folder)!r})" for folder in [installed, *own]]
    (Path(purelib) / "zz-probe-hermetic.pth").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return python


def test_the_dirty_interpreter_has_what_leaked(dirty_python: Path) -> None:
    """The conditions of issue 39 hold in it: the real numba-cuda distribution and NVIDIA's libraries are
    what an unisolated probe run by it would find (its `dists` and `find_library`)."""
    code = (
        "import importlib.metadata as m, sys; sys.path.insert(0, sys.argv[1]); from builder.probes import hello_gpu as h\n"
        "print(m.version('numba'), m.version('numba-cuda'), h.dist_version('numba-cuda'))\n"
        "print(h.find_library('libcudart.so.*'))\n"
        "print(h.find_library('libnvrtc.so.*'))\n"
    )
    seen = subprocess.run([str(dirty_python), "-c", code, str(ROOT)], capture_output=True, text=True, timeout=120, check=True)
    versions, cudart, nvrtc = seen.stdout.strip().splitlines()
    assert versions == "0.68.0 0.30.4 0.30.4"
    assert cudart.endswith("libcudart.so.13") and nvrtc.endswith("libnvrtc.so.13"), seen.stdout


def test_the_probe_tests_pass_in_an_interpreter_with_numba_cuda_and_nvidias_wheels(dirty_python: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
    done = subprocess.run(
        [str(dirty_python), "-m", "pytest", "tests/test_probe.py", "-q", "-p", "no:cacheprovider", "-o", "addopts="],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:]
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert re.fullmatch(r"\d+ passed in [\d.]+s( \(\d+:\d+:\d+\))?", summary.strip("= ")), summary
