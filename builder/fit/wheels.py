"""The device code of one wheel, read from the wheel file before anything is installed.

What fit/scan.py reads inside a built image (every shared library's fatbin entries, the version of
each libcudart and the architectures of each libnvrtc), read here from the wheel's members instead,
so an image's fit is known from its lock alone (usecases/measure.py merges its wheels' readings into
the scan's own output and judges it with fit/measure.py's rules). Paths are those the files get
under site-packages (a member of `<name>.data/purelib|platlib/` is installed there too), so a
reading from the wheels and one from the image name the same libraries.

Each shared library is copied out of the zip into a temporary file (the fatbin reader seeks to the
ELF section table at its end, which a deflate stream cannot do) and read by fit/scan.py's functions,
then deleted: one member on disk at a time. libcudart and libnvrtc are loaded (ctypes) by a separate
`python -I` process with a time limit, never by this one; a wheel for another CPU architecture
cannot be loaded here, so its libraries are listed in `foreign` and read from the wheel of the same
project and version for this machine's architecture (NVIDIA builds both from one source release:
the supported-architecture list of an aarch64 NVRTC is its x86_64 twin's; usecases/measure.py).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import stat
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

from packaging.tags import parse_tag

from builder.fit import offload, scan
from builder.model.locked_fit import Compiler, Library, WheelCode

MAX_MEMBERS = 100_000
MAX_MEMBER = 8 * 2**30  # uncompressed; libtorch_cuda.so is ~1.5 GB
MAX_TOTAL = 40 * 2**30  # uncompressed shared libraries of one wheel
LOAD_TIMEOUT_S = 60
CHUNK = 1 << 22
_SITE = ("purelib", "platlib")
# A wheel that links one of these is a ROCm wheel: its NEEDED are kept (what the base must provide).
ROCM_SONAMES = ("libamdhip64.so", "libhsa-runtime64.so", "librocblas.so", "libMIOpen.so", "librccl.so")
_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


class BadWheel(ValueError):
    """The file is not a wheel this can read (not a zip, a member too big, a path outside the wheel)."""


def wheel_machine(filename: str) -> str:
    """The CPU architecture a wheel's platform tags name (x86_64, aarch64), `any` for a pure wheel."""
    # its last three fields are the compressed tag set (py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64)
    fields = filename.removesuffix(".whl").split("-")
    tags = sorted({tag.platform for tag in parse_tag("-".join(fields[-3:]))}) if len(fields) >= 3 else fields[-1:]
    for tag in tags:
        for suffix, machine in _MACHINES.items():
            if tag.endswith("_" + suffix) or tag == suffix:
                return machine
    return "any"


def this_machine() -> str:
    return _MACHINES.get(platform.machine().lower(), platform.machine().lower())


def installed_path(member: str) -> str | None:
    """Where a wheel member lands relative to site-packages; None for what goes elsewhere (scripts,
    headers, data) or a path that tries to leave the wheel."""
    parts = member.split("/")
    if member.startswith("/") or any(p in ("", ".", "..") for p in parts[:-1]) or not parts[-1]:
        return None
    if parts[0].endswith(".data"):
        if len(parts) < 3 or parts[1] not in _SITE:
            return None
        parts = parts[2:]
    return "/".join(parts)


def read_wheel(path: Path, sha256: str, filename: str, work: Path) -> WheelCode:
    """The device code of a wheel file (already checked against `sha256` by the caller); `work` is a
    folder for the one member copied out at a time."""
    machine = wheel_machine(filename)
    loadable = machine == this_machine()
    libraries: list[Library] = []
    cudart: list[tuple[str, str]] = []
    compilers: list[Compiler] = []
    foreign: list[str] = []
    tops: set[str] = set()
    amd: list[tuple[str, tuple[tuple[str, int], ...]]] = []
    needs: set[str] = set()
    own: set[str] = set()
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise BadWheel(f"{filename} is not a readable zip ({exc})") from None
    with archive:
        infos = archive.infolist()
        if len(infos) > MAX_MEMBERS:
            raise BadWheel(f"{filename} has {len(infos)} members (at most {MAX_MEMBERS})")
        total = 0
        for info in sorted(infos, key=lambda i: i.filename):
            where = installed_path(info.filename)
            if where is None:
                continue
            tops.add(where.split("/", 1)[0])
            name = where.rsplit("/", 1)[-1]
            if info.is_dir() or not scan._is_library(name) or stat.S_ISLNK(info.external_attr >> 16):
                continue
            if info.file_size > MAX_MEMBER or total + info.file_size > MAX_TOTAL:
                raise BadWheel(
                    f"{filename}: {info.filename} would unpack past {MAX_MEMBER >> 30} GiB (or the wheel past {MAX_TOTAL >> 30})"
                )
            total += info.file_size
            copy = work / "member.so"
            with archive.open(info) as source, open(copy, "wb") as target:
                shutil.copyfileobj(source, target, CHUNK)
            try:
                found = scan.read(str(copy))
            except (scan.NotElf, OSError):
                found = []
            if found:
                counted = Counter(found)
                libraries.append(Library(where, tuple(sorted((*key, n) for key, n in counted.items()))))
            own.add(name)
            try:
                targets = offload.read(str(copy))
                needs.update(offload.needed(str(copy)))
            except (offload.NotCode, OSError):
                targets = []
            except offload.Bounded as exc:
                raise BadWheel(f"{filename}: {where}: {exc}") from None
            if targets:
                amd.append((where, tuple(sorted(Counter(targets).items()))))
            kind = "cudart" if name.startswith("libcudart.so") else "nvrtc" if name.startswith("libnvrtc.so") else None
            if kind is not None:
                if not loadable:
                    foreign.append(where)
                else:
                    answer = load(kind, copy)
                    if isinstance(answer, str):
                        cudart.append((where, answer))
                    elif answer is not None:
                        compilers.append(Compiler(where, answer[0], answer[1]))
            copy.unlink()
    amd_needs = tuple(sorted(needs - own)) if amd or any(n.startswith(ROCM_SONAMES) for n in needs) else ()
    return WheelCode(
        sha256,
        filename,
        machine,
        tuple(libraries),
        tuple(cudart),
        tuple(compilers),
        tuple(foreign),
        tuple(sorted(tops)),
        offload=tuple(amd),
        needs=amd_needs,
    )


_LOADER = """
import json, sys
scan = {"__name__": "scan"}
exec(compile(sys.stdin.read(), "scan.py", "exec"), scan)
kind, path = sys.argv[1], sys.argv[2]
print(json.dumps(scan["_cudart"](path) if kind == "cudart" else scan["_nvrtc"](path)))
"""


def load(kind: str, library: Path) -> str | tuple[str, tuple[int, ...]] | None:
    """libcudart's runtime version or libnvrtc's (version, archs), asked of the library itself by a
    separate Python process (scan.py's own ctypes calls); None when it does not load here."""
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _LOADER, kind, str(library)],
            input=Path(scan.__file__).read_text(encoding="utf-8"),
            capture_output=True,
            text=True,
            timeout=LOAD_TIMEOUT_S,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return None
    try:
        value = json.loads(done.stdout)
    except json.JSONDecodeError:
        return None
    if kind == "cudart":
        return value if isinstance(value, str) else None
    if isinstance(value, dict) and isinstance(value.get("version"), str) and isinstance(value.get("archs"), list):
        return value["version"], tuple(int(a) for a in value["archs"] if isinstance(a, int))
    return None
