"""The bootstrapped base as bytes (engine/bootstrap.py): a tree gives one tar whatever the clock and the
umask that wrote it, the config holds nothing of the moment, and the image ID is the sha256 of that
config, which the (fake) engine loads as it is. The real mmdebstrap and engine: tests/integration/
test_bootstrap.py; two bootstraps of one mirror state compared: benchmarks/bench_base.py."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from builder.engine import bootstrap
from builder.model.plan import Base
from tests.fake_engine import FakeEngine

EPOCH = 1_783_764_997  # bookworm's InRelease Date, 2026-07-11


def _tree(root: Path, umask: int, mtime: float) -> Path:
    old = os.umask(umask)
    try:
        for rel, text in (("usr/bin/tool", "#!/bin/sh\n"), ("etc/hostname", "host\n"), ("var/log/dpkg.log", "now\n"), ("etc/a", "a\n")):
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            os.utime(path, (mtime, mtime))
        (root / "usr/bin/tool").chmod(0o755)
        (root / "bin").symlink_to("usr/bin")
    finally:
        os.umask(old)
    return root


def test_one_tree_gives_one_tar_whatever_its_clock(tmp_path: Path) -> None:
    one = _tree(tmp_path / "one", 0o022, time.time())
    two = _tree(tmp_path / "two", 0o022, time.time() + 3600)
    for tree in (one, two):
        bootstrap.canonical_tar(tree, tree.with_suffix(".tar"), EPOCH)
    assert one.with_suffix(".tar").read_bytes() == two.with_suffix(".tar").read_bytes()
    with tarfile.open(one.with_suffix(".tar")) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names), "entries sorted by name"
    assert {m.mtime for m in members} == {EPOCH}, "mtimes newer than the mirror's date are clamped to it"
    assert all(m.uname == "" or m.uname.isdigit() or m.uid == 0 for m in members)


def test_an_older_file_keeps_its_mtime(tmp_path: Path) -> None:
    """Clamped, not set: a package file's own (older) mtime is part of the mirror state."""
    tree = _tree(tmp_path / "t", 0o022, EPOCH - 86400)
    bootstrap.canonical_tar(tree, tmp_path / "t.tar", EPOCH)
    with tarfile.open(tmp_path / "t.tar") as tar:
        assert tar.getmember("./etc/a").mtime == EPOCH - 86400


def _recipe(arch: str = "arm64") -> bootstrap.Recipe:
    return bootstrap.Recipe(arch=arch, release="trixie", mirror="http://deb.debian.org/debian")


def test_the_config_holds_the_recipe_and_the_mirror_date_only() -> None:
    recipe = _recipe()
    config = bootstrap.base_config(recipe, bootstrap.recipe_hash(recipe), EPOCH, "sha256:" + "a" * 64)
    again = bootstrap.base_config(recipe, bootstrap.recipe_hash(recipe), EPOCH, "sha256:" + "a" * 64)
    assert config == again
    labels: dict[str, Any] = config["config"]["Labels"]  # type: ignore[index]
    assert config["created"] == labels[bootstrap.MIRROR_DATE_LABEL] == "2026-07-11T10:16:37Z"
    assert config["architecture"] == "arm64"
    assert bootstrap.Recipe.from_label(labels[bootstrap.RECIPE_LABEL]) == recipe
    assert labels[bootstrap.HASH_LABEL] == bootstrap.recipe_hash(recipe)
    assert bootstrap.base_config(_recipe("ppc64el"), "x", EPOCH, "sha256:0")["architecture"] == "ppc64le", "the OCI name"


def test_the_image_id_is_the_configs_sha256_and_the_engine_loads_it(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "t", 0o022, time.time())
    layer = tmp_path / "layer.tar"
    bootstrap.canonical_tar(tree, layer, EPOCH)
    recipe = _recipe()
    config = bootstrap.base_config(recipe, bootstrap.recipe_hash(recipe), EPOCH, "sha256:" + hashlib.sha256(layer.read_bytes()).hexdigest())
    image_id = bootstrap.image_archive(layer, tmp_path / "image.tar", "builder-base/debian13:tmp-1", config)
    assert image_id == "sha256:" + hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    fake = FakeEngine()
    fake.load_image(tmp_path / "image.tar")
    info = fake.inspect_image("builder-base/debian13:tmp-1")
    assert info is not None and info.id == image_id and info.architecture == "arm64"


def test_a_base_is_loaded_with_the_id_it_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ensure_base end to end on the fake engine: the tree, the tar, the load, the tag; an engine
    that loads the archive as another ID is refused (it rewrote the config)."""
    monkeypatch.setattr(bootstrap, "SCRATCH_DIR", tmp_path / "scratch")
    monkeypatch.setenv("BUILDER_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setattr(bootstrap, "_check_tools", lambda: None)
    monkeypatch.setattr(bootstrap, "mirror_epoch", lambda recipe: EPOCH)
    monkeypatch.setattr(bootstrap, "run_bootstrap", lambda recipe, rootfs, epoch, log: _tree(rootfs, 0o022, time.time()))
    base = Base("local-debian13", "cpu", "debian13", bootstrap="debootstrap", platform="linux/amd64")
    fake = FakeEngine()
    logs: list[str] = []
    assert bootstrap.ensure_base(fake, base, log=logs.append).built
    first = fake.inspect_image(base.local_tag)
    assert first is not None and first.labels[bootstrap.MIRROR_DATE_LABEL] == "2026-07-11T10:16:37Z"
    assert any(first.id[:19] in line for line in logs), "the log names the ID the base loads as"
    assert bootstrap.ensure_base(fake, base, force=True, log=logs.append).built
    second = fake.inspect_image(base.local_tag)
    assert second is not None and second.id == first.id, "the same tree and mirror date: the same base ID"
    assert list((tmp_path / "scratch").iterdir()) == []


def test_the_mirror_date_is_read_from_its_release_file(monkeypatch: pytest.MonkeyPatch) -> None:
    class Response:
        def __init__(self, lines: list[bytes]) -> None:
            self.lines = lines

        def __enter__(self) -> list[bytes]:
            return self.lines

        def __exit__(self, *exc: object) -> None:
            return None

    header = [
        b"-----BEGIN PGP SIGNED MESSAGE-----\n",
        b"Hash: SHA256\n",
        b"\n",
        b"Origin: Debian\n",
        b"Date: Sat, 11 Jul 2026 10:16:37 UTC\n",
    ]
    seen: list[str] = []

    def serve(url: str, timeout: float) -> Response:
        seen.append(url)
        return Response(header)

    monkeypatch.setattr(urllib.request, "urlopen", serve)
    assert bootstrap.mirror_epoch(_recipe()) == EPOCH
    assert seen == ["http://deb.debian.org/debian/dists/trixie/InRelease"]
    monkeypatch.setattr(
        urllib.request,
        "urlopen",
        lambda url, timeout: Response([b"Origin: Debian\n", b"SHA256:\n", b"Date: Sat, 11 Jul 2026 10:16:37 UTC\n"]),
    )
    with pytest.raises(bootstrap.DebootstrapFailed, match="has no Date"):
        bootstrap.mirror_epoch(_recipe())

    def down(url: str, timeout: float) -> None:
        raise OSError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", down)
    with pytest.raises(bootstrap.DebootstrapFailed) as failed:
        bootstrap.mirror_epoch(_recipe())
    assert failed.value.network, "an unreachable mirror is a network failure: retried"
