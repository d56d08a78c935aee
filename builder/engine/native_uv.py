"""The static uv a locked image's build installs its venv with, for the engine's own architecture.

An arm64 image is built here under emulation: every program its RUN step starts from the image
runs through qemu, and pip was the slow part (`python -m venv` seeding pip took 20 s emulated,
3.7 s natively; each pip start 2-6 s). A static (musl) uv of the *host's* architecture runs
natively inside any image, whatever the image's platform: the kernel runs it, not qemu. So the
build serves that binary (engine/secrets.py), the RUN step installs the lock with it and deletes
it in the same layer, and only the target's own interpreter runs emulated (venv, uv's one query).

The binary comes from uv's musllinux wheel on PyPI (or a local wheel folder holding that exact
file), checked against the sha256 pinned here, unpacked once into build/tools/ and re-checked on
every use. To move to a newer uv: put its version and the two wheels' sha256 (PyPI's simple page
lists them) in WHEELS.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import filelock

from builder.engine.settings import BuildSettings
from builder.engine.staging import sha256_of
from builder.lock.target import PYPI
from builder.util.errors import UserError
from builder.util.text import redact

VERSION = "0.13.9"


@dataclass(frozen=True)
class Wheel:
    filename: str
    sha256: str  # the wheel file's, from PyPI's simple page for uv

    @property
    def member(self) -> str:
        return f"uv-{VERSION}.data/scripts/uv"


# the engine's architecture (platform.machine()) -> uv's static wheel for it
WHEELS = {
    "x86_64": Wheel(
        f"uv-{VERSION}-py3-none-musllinux_1_1_x86_64.whl",
        "2c45530751517d6c3bbc69a19473f6effe47cce047bede01ffd8af7ea7b36b25",
    ),
    "aarch64": Wheel(
        f"uv-{VERSION}-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1_aarch64.whl",
        "5435c5ce14a56431208ca0996416d310f1598e8c2c8ba707688985a16bb82dbe",
    ),
}
PLATFORM_TAG = {"x86_64": "musllinux_1_1_x86_64", "aarch64": "musllinux_1_1_aarch64"}  # pip download --platform
DOWNLOAD_TIMEOUT_S = 300


class Unavailable(UserError):
    """No checked uv for this engine: the build cannot install its lock (says why and how to fix)."""


def binary(settings: BuildSettings, tools_dir: Path, machine: str | None = None) -> Path:
    """The checked static uv for `machine` (this host's by default), fetched and unpacked on first use."""
    machine = machine or platform.machine()
    wheel = _pinned(machine)
    target = tools_dir / f"uv-{VERSION}-{machine}"
    checksum = tools_dir / f"uv-{VERSION}-{machine}.sha256"
    tools_dir.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(tools_dir / ".uv.lock")):  # two builds in two runs unpack it once
        if target.is_file() and checksum.is_file() and sha256_of(target) == checksum.read_text().strip():
            return target
        found = _wheel_locked(wheel, machine, settings, tools_dir)
        with tempfile.TemporaryDirectory(dir=tools_dir) as tmp:
            unpacked = Path(tmp) / "uv"
            with zipfile.ZipFile(found) as archive, archive.open(wheel.member) as source, unpacked.open("wb") as out:
                while chunk := source.read(1 << 22):
                    out.write(chunk)
            unpacked.chmod(0o755)
            os.replace(unpacked, target)
            checksum.write_text(sha256_of(target) + "\n")
    return target


def wheel_file(settings: BuildSettings, tools_dir: Path, machine: str | None = None) -> Path:
    """uv's checked wheel for `machine`, kept in `tools_dir` (what a mirror would serve)."""
    machine = machine or platform.machine()
    tools_dir.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(tools_dir / ".uv.lock")):
        return _wheel_locked(_pinned(machine), machine, settings, tools_dir)


def _pinned(machine: str) -> Wheel:
    wheel = WHEELS.get(machine)
    if wheel is None:
        raise Unavailable(f"no static uv is pinned for a {machine} engine (builder/engine/native_uv.py WHEELS lists {', '.join(WHEELS)})")
    return wheel


def _wheel_locked(wheel: Wheel, machine: str, settings: BuildSettings, tools_dir: Path) -> Path:
    kept = tools_dir / wheel.filename
    if kept.is_file() and sha256_of(kept) == wheel.sha256:
        return kept
    with tempfile.TemporaryDirectory(dir=tools_dir) as tmp:
        found = _local(wheel, settings) or _download(wheel, machine, settings, Path(tmp))
        if sha256_of(found) != wheel.sha256:
            raise Unavailable(
                f"{found} is not uv {VERSION}'s wheel (its sha256 differs from the pinned one); delete it or put the file PyPI serves there"
            )
        partial = Path(tmp) / "partial.whl"
        shutil.copyfile(found, partial)
        os.replace(partial, kept)
    return kept


def _local(wheel: Wheel, settings: BuildSettings) -> Path | None:
    for folder in settings.pip.local_dirs:
        for candidate in (folder / wheel.filename, folder / "uv" / wheel.filename):
            if candidate.is_file():
                return candidate
    return None


def _download(wheel: Wheel, machine: str, settings: BuildSettings, into: Path) -> Path:
    """pip download of exactly this file: its hash required, the index (a mirror's, or PyPI) in the
    environment (it may carry a password), the host's pip config ignored."""
    requirement = into / "uv.txt"
    requirement.write_text(f"uv=={VERSION} --hash=sha256:{wheel.sha256}\n")
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=settings.pip.index_url or PYPI)
    env.pop("PIP_EXTRA_INDEX_URL", None)
    if settings.ca_bundle is not None:
        env["PIP_CERT"] = str(settings.ca_bundle)
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:"]
    argv += ["--platform", PLATFORM_TAG[machine], "--require-hashes", "-r", str(requirement), "-d", str(into)]
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        done = None
    path = into / wheel.filename
    if done is None or done.returncode != 0 or not path.is_file():
        why = "timed out" if done is None else redact((done.stderr.strip().splitlines() or ["no output"])[-1])
        raise Unavailable(
            f"could not download {wheel.filename} ({why}); put that file into a local wheel folder "
            "(pip's find-links, e.g. /opt/wheels) or make the index reachable"
        )
    return path
