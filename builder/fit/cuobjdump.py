"""What device code a CUDA library embeds, read with NVIDIA's cuobjdump.

cuobjdump ships on PyPI (`nvidia-cuda-cuobjdump`, binary at nvidia/cu13/bin/cuobjdump inside the
wheel), so the answer comes from NVIDIA's own reader, not from a guess about the build flags. The
parsers are pure and tested on real output (tests/fixtures/cuobjdump/); `measure` runs the binary
once per file and reads its entry headers (`parse_headers`); `parse` reads what the list and dump
options print, which the tests hold the headers' reading to.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from builder.fit.arch import Arch, Embedded
from builder.model.versions import release_tuple
from builder.util.errors import RunFailure, UserError

Runner = Callable[[Sequence[str]], tuple[int, str]]
ENV = "BUILDER_CUOBJDUMP"
WHEEL_PATH = Path("nvidia") / "cu13" / "bin" / "cuobjdump"
RUN_TIMEOUT_S = 300  # libtorch_cuda.so (~1 GB) takes ~7 s; a bound, not an estimate
_ELF = re.compile(r"^ELF file\s+\d+:\s+\S+?\.(sm_\d{2,3}[af]?)\.cubin\s*$")
_PTX = re.compile(r"^PTX file\s+\d+:\s+\S+?\.(sm_\d{2,3}[af]?)\.ptx\s*$")
_NO_DEVICE_CODE = "does not contain device code"
# Its own messages ("cuobjdump fatal    : Invalid ELF file"), wherever they land in the output.
_SAYS = re.compile(r"cuobjdump (?:fatal|error|warning|info)\s*:[^\n]*")
_HEADER = re.compile(r"^(arch|code version)\s*=\s*(.+?)\s*$")


def parse_list(text: str, kind: re.Pattern[str]) -> tuple[Arch, ...]:
    """The target of each entry of `--list-elf` or `--list-ptx` output, repeats kept (they are
    counted); other lines (info, blanks) are ignored."""
    return tuple(Arch.parse(m.group(1)) for line in text.splitlines() if (m := kind.match(line.strip())))


def parse_ptx_versions(text: str) -> tuple[str, ...]:
    """The PTX ISA versions in `--dump-ptx` output: its "Fatbin ptx code" headers are the entry
    headers `parse_headers` reads."""
    return parse_headers(text).ptx_isa


def parse(elf_list: str, ptx_list: str, ptx_dump: str = "") -> Embedded:
    return Embedded.of(parse_list(elf_list, _ELF), parse_list(ptx_list, _PTX), parse_ptx_versions(ptx_dump))


def parse_headers(text: str) -> Embedded:
    """cuobjdump's output without options: per fatbin entry a "Fatbin elf code:" or "Fatbin ptx code:"
    header with its `arch = sm_90` and `code version = [9,0]` lines. A family cubin's header says
    `sm_100f` where `--list-elf` names the file `sm_100`: the list's spelling is kept for SASS (what
    a family cubin runs on is its plain target's family). Family PTX keeps its `f` in both
    (`--list-ptx` names it `sm_120f`, and so does the fatbin reader): both readings of a file are equal."""
    sass: list[Arch] = []
    ptx: list[Arch] = []
    versions: set[str] = set()
    kind = ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Fatbin "):
            kind = "elf" if line.startswith("Fatbin elf code") else "ptx" if line.startswith("Fatbin ptx code") else ""
            continue
        match = _HEADER.match(line)
        if not kind or match is None:
            continue
        if match.group(1) == "arch":
            arch = Arch.parse(match.group(2))
            if kind == "elf":
                sass.append(replace(arch, suffix="") if arch.suffix == "f" else arch)
            else:
                ptx.append(arch)
        elif kind == "ptx" and len(numbers := re.findall(r"\d+", match.group(2))) == 2:
            versions.add(".".join(numbers))
    return Embedded.of(tuple(sass), tuple(ptx), tuple(sorted(versions, key=release_tuple)))


def find_binary(env: dict[str, str] | None = None, paths: Sequence[str] | None = None) -> Path:
    """$BUILDER_CUOBJDUMP, else cuobjdump on PATH, else the wheel's binary in this Python's site-packages."""
    env = dict(os.environ) if env is None else env
    if env.get(ENV):
        given = Path(env[ENV])
        if not given.is_file():
            raise UserError(f"${ENV} is {given}, which is not a file: point it at cuobjdump or unset it")
        return given
    on_path = shutil.which("cuobjdump", path=env.get("PATH"))
    if on_path:
        return Path(on_path)
    for folder in sys.path if paths is None else paths:
        candidate = Path(folder) / WHEEL_PATH
        if candidate.is_file():
            return candidate
    raise UserError(f"cuobjdump not found: `pip install nvidia-cuda-cuobjdump`, or set ${ENV} to the binary")


def run_binary(argv: Sequence[str]) -> tuple[int, str]:
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {RUN_TIMEOUT_S} s"
    except OSError as exc:
        return 126, str(exc)
    return proc.returncode, proc.stdout + proc.stderr


def measure(library: Path, binary: Path, run: Runner = run_binary) -> Embedded:
    """The SASS, PTX and PTX ISA versions in one library; a file without device code is empty, not an error.

    One pass: cuobjdump without options prints a header per fatbin entry, which is what `--list-elf`,
    `--list-ptx` and the PTX headers of `--dump-ptx` say, and each pass decompresses the whole fatbin
    (cuBLASLt: ~2 s of ~540 MB), so two passes cost twice (tests/test_fit.py checks the two readings
    agree on real output)."""
    rc, headers = run([str(binary), str(library)])
    if rc != 0 and _NO_DEVICE_CODE not in headers:
        # its own messages may come before the headers it printed, or inside one of their lines
        # (stderr unbuffered, stdout flushed in blocks; a container exec merges the two), so they
        # are looked for anywhere, not taken from the last line or a line's start
        said = _SAYS.findall(headers) or headers.strip().splitlines()[-1:] or ["no output"]
        raise RunFailure(f"cuobjdump {library} exited {rc}: {said[-1].strip()}")
    return parse_headers(headers)
