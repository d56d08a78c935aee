"""Is the bootstrapped base reproducible? Two bootstraps of one recipe from one mirror state, compared
(issue 41: "two bootstraps from the same mirror state give the same base ID, or say exactly what differs"):

    python benchmarks/bench_base.py [--os debian12] [--mirror URL] [--out FILE]

1. debootstrap, as `builder` bootstraps today (builder/engine/bootstrap.py: the recipe's packages,
   minbase, the same tidy step), twice: the files that differ between the two trees, by content and by
   metadata (mtime, mode, owner), and the two tars' sha256.
2. mmdebstrap with SOURCE_DATE_EPOCH (the mirror's own `Date:` from dists/<release>/InRelease, so the
   epoch names the mirror state, not the moment), twice: the two tars' sha256, equal or not.
3. Where the mmdebstrap tars are equal: the base image made from one with a fixed config (created =
   the epoch, the recipe label) is loaded into the engine and its image ID read back beside the one
   computed from the tar: a base ID that is a function of the recipe and the mirror state alone.

Needs root (both tools create device nodes), debootstrap, mmdebstrap and a Docker engine for step 3.
It prints figures; it asserts nothing (docs/benchmarks.md has the latest run).
"""

from __future__ import annotations

import argparse
import email.utils
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from builder.engine import bootstrap  # noqa: E402

MIRROR = "http://deb.debian.org/debian"
SHOWN = 12  # differing paths listed per kind


def mirror_epoch(mirror: str, release: str) -> int:
    """The `Date:` of the mirror's InRelease for `release`: the mirror state, as seconds."""
    with urllib.request.urlopen(f"{mirror}/dists/{release}/InRelease", timeout=60) as response:  # noqa: S310 - the mirror URL
        for raw in response:
            line = raw.decode("utf-8", "replace")
            if line.startswith("Date:"):
                return int(email.utils.parsedate_to_datetime(line[5:].strip()).timestamp())
    raise SystemExit(f"{mirror}/dists/{release}/InRelease has no Date: line")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree(rootfs: Path) -> dict[str, tuple[str, str]]:
    """path -> (content: sha256 or link target or kind, metadata: mode owner mtime)."""
    out: dict[str, tuple[str, str]] = {}
    for dirpath, dirnames, filenames in os.walk(rootfs):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(rootfs))
            if path.is_symlink():
                content = "-> " + os.readlink(path)
            elif path.is_file():
                content = sha256_file(path)
            else:
                content = "dir" if path.is_dir() else "special"
            out[rel] = (content, f"mode={st.st_mode:o} owner={st.st_uid}:{st.st_gid} mtime={int(st.st_mtime)}")
    return out


def differences(one: dict[str, tuple[str, str]], two: dict[str, tuple[str, str]]) -> dict[str, list[str]]:
    kinds: dict[str, list[str]] = {"only in one": [], "content": [], "metadata only": []}
    for path in sorted(one.keys() | two.keys()):
        if path not in one or path not in two:
            kinds["only in one"].append(path)
        elif one[path][0] != two[path][0]:
            kinds["content"].append(path)
        elif one[path][1] != two[path][1]:
            kinds["metadata only"].append(path)
    return kinds


def debootstrap_twice(recipe: bootstrap.Recipe, scratch: Path) -> None:
    trees, sums, seconds = [], [], []
    for n in (1, 2):
        rootfs = scratch / f"debootstrap-{n}"
        rootfs.mkdir()
        start = time.monotonic()
        bootstrap.run_debootstrap(recipe, rootfs, log=lambda line: None)
        bootstrap._tidy_rootfs(rootfs)  # noqa: SLF001 - the very step `builder` runs
        seconds.append(time.monotonic() - start)
        tarball = scratch / f"debootstrap-{n}.tar"
        subprocess.run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."], check=True)
        sums.append(sha256_file(tarball))
        trees.append(tree(rootfs))
    print(f"debootstrap ({recipe.release}, {recipe.arch}): {seconds[0]:.0f} s and {seconds[1]:.0f} s; {len(trees[0])} paths")
    print(f"  tar sha256: {sums[0][:16]}  {sums[1][:16]}  {'EQUAL' if sums[0] == sums[1] else 'differ'}")
    for kind, paths in differences(trees[0], trees[1]).items():
        shown = ", ".join(paths[:SHOWN]) + (f", ... ({len(paths)} in all)" if len(paths) > SHOWN else "")
        print(f"  {kind}: {len(paths)}" + (f": {shown}" if paths else ""))


def mmdebstrap_twice(recipe: bootstrap.Recipe, epoch: int, scratch: Path) -> Path | None:
    tars, seconds = [], []
    for n in (1, 2):
        tarball = scratch / f"mmdebstrap-{n}.tar"
        start = time.monotonic()
        subprocess.run(
            [
                "mmdebstrap",
                "--quiet",
                f"--variant={recipe.variant}",
                f"--architectures={recipe.arch}",
                f"--include={','.join(recipe.include)}",
                # the engine supplies resolv.conf and hostname, as bootstrap._tidy_rootfs leaves them
                "--customize-hook=printf '' > \"$1/etc/resolv.conf\"; printf 'localhost\\n' > \"$1/etc/hostname\"",
                recipe.release,
                str(tarball),
                recipe.mirror,
            ],
            check=True,
            env={**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "LC_ALL": "C"},
        )
        seconds.append(time.monotonic() - start)
        tars.append(tarball)
    sums = [sha256_file(t) for t in tars]
    same = sums[0] == sums[1]
    print(f"mmdebstrap (SOURCE_DATE_EPOCH={epoch}, the mirror's InRelease date): {seconds[0]:.0f} s and {seconds[1]:.0f} s")
    print(f"  tar sha256: {sums[0][:16]}  {sums[1][:16]}  {'EQUAL' if same else 'differ'}; {tars[0].stat().st_size / 1e6:.0f} MB")
    if not same:
        with tempfile.TemporaryDirectory(dir=scratch) as work:
            trees = []
            for n, tarball in enumerate(tars):
                rootfs = Path(work) / str(n)
                rootfs.mkdir()
                subprocess.run(["tar", "--numeric-owner", "-xpf", str(tarball), "-C", str(rootfs)], check=True)
                trees.append(tree(rootfs))
            for kind, paths in differences(trees[0], trees[1]).items():
                print(f"  {kind}: {len(paths)}" + (f": {', '.join(paths[:SHOWN])}" if paths else ""))
    return tars[0] if same else None


def image_archive(layer: Path, recipe: bootstrap.Recipe, epoch: int, out: Path) -> str:
    """A `docker load` archive of one layer with a fixed config; returns the image ID it gives."""
    diff_id = "sha256:" + sha256_file(layer)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    config = {
        "architecture": recipe.arch,
        "os": "linux",
        "created": stamp,
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Cmd": ["/bin/bash"],
            "Labels": {bootstrap.RECIPE_LABEL: bootstrap.canonical_json(recipe)},
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": stamp, "created_by": "mmdebstrap (benchmarks/bench_base.py)"}],
    }
    body = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    image_id = hashlib.sha256(body).hexdigest()
    with tarfile.open(out, "w") as archive:
        for name, data in (
            (f"{image_id}.json", body),
            ("manifest.json", json.dumps([{"Config": f"{image_id}.json", "RepoTags": None, "Layers": ["layer.tar"]}]).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = epoch
            archive.addfile(info, io.BytesIO(data))
        archive.add(layer, arcname="layer.tar")
    return "sha256:" + image_id


def loaded_id(archive: Path) -> str:
    done = subprocess.run(["docker", "load", "-i", str(archive)], check=True, capture_output=True, text=True)
    return done.stdout.strip().rsplit(" ", 1)[-1]


def present(image_id: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", image_id], check=False, capture_output=True).returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--os", default="debian12", help="debian12 or debian13")
    parser.add_argument("--mirror", default=MIRROR)
    parser.add_argument("--skip-debootstrap", action="store_true", help="only the mmdebstrap half")
    args = parser.parse_args()
    release = bootstrap.RELEASES[args.os]
    recipe = bootstrap.Recipe(arch=bootstrap.host_arch(), release=release, mirror=args.mirror)
    epoch = mirror_epoch(args.mirror, release)
    print(f"recipe: {bootstrap.canonical_json(recipe)}")
    scratch = Path(tempfile.mkdtemp(prefix="bench-base-", dir=os.environ.get("TMPDIR", "/var/tmp")))
    try:
        if not args.skip_debootstrap:
            debootstrap_twice(recipe, scratch)
        same = mmdebstrap_twice(recipe, epoch, scratch)
        if same is not None and shutil.which("docker"):
            expected = image_archive(same, recipe, epoch, scratch / "image.tar")
            had = present(expected)
            got = loaded_id(scratch / "image.tar")
            print(
                f"base image ID: computed from the tar {expected[:19]}, the engine's after load {got[:19]}: {'EQUAL' if got == expected else 'differ'}"
            )
            if not had:  # remove only what this run loaded
                subprocess.run(["docker", "image", "rm", got], check=False, capture_output=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
