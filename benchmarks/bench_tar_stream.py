"""The CPU a canonical build spends passing its layer tars into the engine's load (never a timed test):

    python benchmarks/bench_tar_stream.py [--mib 512] [--rounds 3]

A member's venv.tar (and a line's nvidia.tar) reaches `docker load` through `reproducible.writing`'s
stream into a pipe (engine port `load_stream`). This writes one random file of `--mib` MiB as a
layer into such a stream, drained by a thread as the engine drains the pipe, the way each tarfile
setting did, side by side in one run: the stream with a 4 MiB block (`bufsize`, before 2026-12-07:
tarfile's stream appends every 16 KiB copy to the block and slices the block off, copying bytes each
time), tarfile's default 10 KiB block (`writing` now), and the file written to a plain file with 4 MiB
copies (`writing`'s other case). Prints CPU-s per GB (this process: user + system), the best of
`--rounds`.
"""

from __future__ import annotations

import argparse
import os
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from builder.engine.reproducible import COPY_BUFFER, writing

Opener = Callable[[Path | IO[bytes]], tarfile.TarFile]


def before(out: Path | IO[bytes]) -> tarfile.TarFile:
    """The stream as `writing` opened it before: a 4 MiB block, 16 KiB copies."""
    assert not isinstance(out, Path)
    return tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT, bufsize=COPY_BUFFER)


def one(layer: Path, opener: Opener, to_file: Path | None) -> float:
    """CPU-s (user + system, this process) to write `layer` into a tar through `opener`."""
    info = tarfile.TarInfo("layer.tar")
    info.size = layer.stat().st_size
    started = time.process_time()
    if to_file is not None:
        with opener(to_file) as tar, layer.open("rb") as data:
            tar.addfile(info, data)
        to_file.unlink()
        return time.process_time() - started
    read_fd, write_fd = os.pipe()

    def drain() -> None:
        with open(read_fd, "rb", buffering=0) as source:
            while source.read(4 << 20):
                pass

    reader = threading.Thread(target=drain)
    reader.start()
    with open(write_fd, "wb", buffering=4 << 20) as out, opener(out) as tar, layer.open("rb") as data:
        tar.addfile(info, data)
    reader.join()
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=512, help="the layer file's size (random bytes)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tar-stream-") as tmp:
        layer = Path(tmp) / "layer.bin"
        with layer.open("wb") as out:
            for _ in range(args.mib):
                out.write(os.urandom(1 << 20))
        gb = layer.stat().st_size / 1e9
        cases: list[tuple[str, Opener, Path | None]] = [
            ("stream, 4 MiB block (before)", before, None),
            ("stream, tarfile's block (writing)", writing, None),
            ("file, 4 MiB copies (writing)", writing, Path(tmp) / "out.tar"),
        ]
        print(f"one {args.mib} MiB layer into a tar, best of {args.rounds}: CPU-s per GB (user + system, the writing process)")
        for name, opener, to_file in cases:
            best = min(one(layer, opener, to_file) for _ in range(args.rounds))
            print(f"{name:38} {best / gb:6.2f}")


if __name__ == "__main__":
    main()
