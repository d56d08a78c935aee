"""A wheel's members as the layer maker reads them (builder/lock/members.py): the same bytes as
zipfile's, for stored and deflated members of any size and any read size, and a damaged member is
refused (BadZipFile), never passed on short or wrong."""

from __future__ import annotations

import os
import random
import zipfile
from pathlib import Path

import pytest

from builder.lock.members import open_member

BODIES = {
    "empty": b"",
    "one": b"x",
    "zeros": bytes(5 << 20),  # inflates ~1000x: the output is cut at each read's size, the input kept
    "random": random.Random(7).randbytes(3 << 20),  # barely deflates
    "text": b"".join(b"line %d of a module\n" % i for i in range(200_000)),
}


def _wheel(path: Path, compression: int) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as whl:
        for name, body in BODIES.items():
            whl.writestr(zipfile.ZipInfo(f"pkg/{name}.bin", (2024, 1, 1, 0, 0, 0)), body, compress_type=compression)
    return path


def _read(wheel: Path, member: str, size: int) -> bytes:
    with zipfile.ZipFile(wheel) as whl, wheel.open("rb") as handle:
        reader = open_member(whl, handle, member)
        pieces = []
        while piece := reader.read(size):
            pieces.append(piece)
            if len(piece) != size:
                assert not reader.read(size), "a short read before the end"
                break
        return b"".join(pieces)


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
@pytest.mark.parametrize("size", [1, 4096, 1 << 20])
def test_every_member_reads_as_zipfile_reads_it(tmp_path: Path, compression: int, size: int) -> None:
    wheel = _wheel(tmp_path / "pkg-1.0-py3-none-any.whl", compression)
    for name, body in BODIES.items():
        if size == 1 and len(body) > 70_000:
            continue  # byte by byte: the small ones say it
        assert _read(wheel, f"pkg/{name}.bin", size) == body, name


def test_a_read_of_everything_and_tarfiles_exact_reads(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "pkg-1.0-py3-none-any.whl", zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(wheel) as whl, wheel.open("rb") as handle:
        assert open_member(whl, handle, "pkg/text.bin").read() == BODIES["text"]
        reader = open_member(whl, handle, "pkg/zeros.bin")
        assert [len(reader.read(1 << 20)) for _ in range(6)] == [1 << 20] * 5 + [0]


@pytest.mark.parametrize("damage", ["a flipped byte", "a directory that says it is longer", "a directory that says it is shorter"])
def test_a_damaged_member_is_refused(tmp_path: Path, damage: str) -> None:
    wheel = _wheel(tmp_path / "pkg-1.0-py3-none-any.whl", zipfile.ZIP_STORED)
    if damage == "a flipped byte":
        data = bytearray(wheel.read_bytes())
        data[data.index(BODIES["text"][:40]) + 1000] ^= 0xFF
        wheel.write_bytes(bytes(data))
    with zipfile.ZipFile(wheel) as whl, wheel.open("rb") as handle:
        info = whl.getinfo("pkg/text.bin")  # the last member: past its end, the wheel's directory, then the file's end
        if damage != "a flipped byte":
            grow = 1 << 20 if damage.endswith("longer") else -1
            info.file_size, info.compress_size = info.file_size + grow, info.compress_size + grow
        with pytest.raises(zipfile.BadZipFile):
            _drain(open_member(whl, handle, "pkg/text.bin"))


def _drain(reader: object) -> None:
    read = getattr(reader, "read")  # noqa: B009 - a BinaryIO
    while read(1 << 16):
        pass


def test_a_kind_it_does_not_inflate_is_read_by_zipfile(tmp_path: Path) -> None:
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_LZMA) as whl:
        whl.writestr("pkg/text.bin", BODIES["text"])
    assert _read(wheel, "pkg/text.bin", 1 << 20) == BODIES["text"]
    assert os.path.getsize(wheel) < len(BODIES["text"])
