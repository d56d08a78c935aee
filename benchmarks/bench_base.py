"""Is the bootstrapped base reproducible? Two bootstraps of one recipe from one mirror state, compared
(issue 41: "two bootstraps from the same mirror state give the same base ID, or say exactly what differs"):

    python benchmarks/bench_base.py [--os debian12] [--mirror URL] [--skip-debootstrap]

1. debootstrap, as `builder` bootstrapped before recipe schema 2 (the recipe's packages, minbase, the
   same tidy step, a plain tar), twice: the files that differ between the two trees, by content and by
   metadata (mtime, mode, owner), and the two tars' sha256.
2. `builder`'s own bootstrap (engine/bootstrap.py `ensure_base`: mmdebstrap with SOURCE_DATE_EPOCH =
   the mirror's InRelease date, a canonical tar, a config of fixed content, loaded), twice, forced, under
   a throwaway tag of this run's: the two image IDs and layer diff IDs, equal or not.

Needs root, debootstrap (for 1), mmdebstrap and a Docker engine. It prints figures; it asserts nothing
(docs/benchmarks.md has the latest run).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from builder.engine import bootstrap  # noqa: E402
from builder.engine import client as engine  # noqa: E402
from builder.engine.staging import sha256_of  # noqa: E402
from builder.model.plan import Base  # noqa: E402

MIRROR = "http://deb.debian.org/debian"
SHOWN = 12  # differing paths listed per kind


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
                content = sha256_of(path)
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
        subprocess.run(
            [
                "debootstrap",
                f"--variant={recipe.variant}",
                f"--arch={recipe.arch}",
                f"--include={','.join(recipe.include)}",
                recipe.release,
                str(rootfs),
                recipe.mirror,
            ],
            check=True,
            capture_output=True,
        )
        bootstrap._tidy_rootfs(rootfs)  # noqa: SLF001 - the very step `builder` runs
        seconds.append(time.monotonic() - start)
        tarball = scratch / f"debootstrap-{n}.tar"
        subprocess.run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."], check=True)
        sums.append(sha256_of(tarball))
        trees.append(tree(rootfs))
    print(f"debootstrap ({recipe.release}, {recipe.arch}): {seconds[0]:.0f} s and {seconds[1]:.0f} s; {len(trees[0])} paths")
    print(f"  tar sha256: {sums[0][:16]}  {sums[1][:16]}  {'EQUAL' if sums[0] == sums[1] else 'differ'}")
    for kind, paths in differences(trees[0], trees[1]).items():
        shown = ", ".join(paths[:SHOWN]) + (f", ... ({len(paths)} in all)" if len(paths) > SHOWN else "")
        print(f"  {kind}: {len(paths)}" + (f": {shown}" if paths else ""))


def builder_twice(os_name: str, mirror: str) -> None:
    """`ensure_base` twice (the second forced) under a tag of this run's own, removed at the end."""
    base = Base(
        name="bench-base", vendor="cpu", os=os_name, bootstrap="debootstrap", local_repository=f"builder-bench-{uuid.uuid4().hex[:8]}"
    )
    client = engine.DockerEngine(engine.connect())
    seen: list[tuple[str, tuple[str, ...], float, str]] = []
    try:
        for force in (False, True):
            logs: list[str] = []
            result = bootstrap.ensure_base(client, base, mirror=mirror, force=force, log=logs.append)
            info = client.inspect_image(base.local_tag)
            assert info is not None
            seen.append((info.id, info.diff_ids, result.seconds, info.labels.get(bootstrap.MIRROR_DATE_LABEL, "?")))
    finally:
        client.remove_image(base.local_tag)
    (one, layers_one, s1, date), (two, layers_two, s2, _) = seen
    print(f"builder's bootstrap ({bootstrap.TOOL}, mirror date {date}): {s1:.0f} s and {s2:.0f} s")
    print(f"  image ID: {one[:19]}  {two[:19]}  {'EQUAL' if one == two else 'differ'}")
    print(f"  layer diff ID: {layers_one[0][:19]}  {layers_two[0][:19]}  {'EQUAL' if layers_one == layers_two else 'differ'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--os", default="debian12", help="debian12 or debian13")
    parser.add_argument("--mirror", default=MIRROR)
    parser.add_argument("--skip-debootstrap", action="store_true", help="only the mmdebstrap half")
    args = parser.parse_args()
    release = bootstrap.RELEASES[args.os]
    recipe = bootstrap.Recipe(arch=bootstrap.host_arch(), release=release, mirror=args.mirror, tool="debootstrap", schema=1)
    print(f"recipe: {bootstrap.canonical_json(recipe)}")
    if not args.skip_debootstrap:
        scratch = Path(tempfile.mkdtemp(prefix="bench-base-", dir=os.environ.get("TMPDIR", "/var/tmp")))
        try:
            debootstrap_twice(recipe, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    builder_twice(args.os, args.mirror)
    return 0


if __name__ == "__main__":
    sys.exit(main())
