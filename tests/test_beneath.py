"""reproducible.Beneath's folder bookkeeping (found by bisection) against the plain model it replaced:
every folder name scanned for every file. Random layers of folders, files, whiteouts and opaque
markers over a small tree of names must leave the same folders known, with the same keys."""

from __future__ import annotations

import random
import tarfile

import pytest

from builder.engine.reproducible import OPAQUE, WHITEOUT, Beneath, DirKey

NAMES = ["a", "a/b", "a/b/c", "a/b-x", "a/b-x/y", "a/bc", "a/b/c/d", "b", "b/a", "ab", "ab/c"]


def _model(layers: list[list[tarfile.TarInfo]]) -> dict[str, DirKey]:
    dirs: dict[str, DirKey] = {}

    def forget(name: str, keep_self: bool = False) -> None:
        below = f"{name}/" if name else ""
        for known in [k for k in dirs if k.startswith(below) or (k == name and not keep_self)]:
            del dirs[known]

    for members in layers:
        for member in members:
            folder, _, leaf = member.name.rpartition("/")
            if leaf == OPAQUE:
                forget(folder, keep_self=True)
            elif leaf.startswith(WHITEOUT):
                forget(f"{folder}/{leaf.removeprefix(WHITEOUT)}" if folder else leaf.removeprefix(WHITEOUT))
            elif member.isdir():
                dirs[member.name] = (member.mode & 0o7777, member.uid, member.gid, ())
            else:
                forget(member.name)
    return dirs


def _member(rng: random.Random) -> tarfile.TarInfo:
    name = rng.choice(NAMES)
    kind = rng.choice(["dir", "dir", "file", "whiteout", "opaque"])
    folder, _, leaf = name.rpartition("/")
    if kind == "whiteout":
        name = f"{folder}/{WHITEOUT}{leaf}" if folder else f"{WHITEOUT}{leaf}"
    elif kind == "opaque":
        name = f"{name}/{OPAQUE}"
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if kind == "dir" else tarfile.REGTYPE
    info.mode = rng.choice([0o755, 0o700])
    return info


@pytest.mark.parametrize("seed", range(200))
def test_the_known_folders_are_the_plain_models(seed: int) -> None:
    rng = random.Random(seed)
    layers = [[_member(rng) for _ in range(rng.randint(1, 12))] for _ in range(rng.randint(1, 4))]
    beneath = Beneath()
    for members in layers:
        beneath.add(members)
    model = _model(layers)
    assert {name: beneath.key(name) for name in NAMES} == {name: model.get(name) for name in NAMES}
