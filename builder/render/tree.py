"""images/ as a whole: the files a plan renders to, what is stale, and writing them (atomic swap).

Writing replaces images/ through a temporary sibling folder, so an interrupted render never
leaves a half-written tree.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from builder.errors import UserError
from builder.records import ImageSpec
from builder.render.context import COMMITTED, Files, content_hash, image_json
from builder.spec.plan import image_entry


def expected_tree(specs: Iterable[ImageSpec], rendered: Mapping[str, Files]) -> Files:
    """Every file images/ should hold, by relative path: `<id>/Dockerfile`, `<id>/requirements.txt`,
    `<id>/image.json` (the plan entry with the hash of the full build context). `rendered` maps
    each image id to its build context (render.context.contexts)."""
    out: Files = {}
    for spec in specs:
        files = rendered[spec.id]
        for name in COMMITTED:
            if name in files:
                out[f"{spec.id}/{name}"] = files[name]
        out[f"{spec.id}/image.json"] = image_json(image_entry(replace(spec, content_hash=content_hash(files))))
    return out


def _existing(out_dir: Path) -> dict[str, bytes | None]:
    """Files by relative path, and folders (value None) so an empty leftover counts too."""
    if not out_dir.is_dir():
        return {}
    return {str(p.relative_to(out_dir)): (p.read_bytes() if p.is_file() else None) for p in sorted(out_dir.rglob("*"))}


def stale(out_dir: Path, expected: Mapping[str, bytes]) -> list[str]:
    """Paths (relative to out_dir) that are missing, different or should not be there."""
    have = _existing(out_dir)
    folders = {str(Path(p).parent) for p in expected} | {"."}
    differ = [p for p, data in expected.items() if have.get(p) != data]
    extra = [p for p, data in have.items() if p not in expected and not (data is None and p in folders)]
    listed = set(differ) | {p for p in extra if have[p] is not None}
    extra = [p for p in extra if have[p] is not None or not any(q.startswith(p + "/") for q in listed)]
    return sorted(differ + extra)


def guard(out_dir: Path) -> None:
    """Refuse to replace a folder that holds anything render did not write (e.g. `--out .`)."""
    if not out_dir.is_dir():
        return
    for entry in out_dir.iterdir():
        inside = list(entry.iterdir()) if entry.is_dir() else [entry]
        if not entry.is_dir() or any(p.is_dir() or p.name not in COMMITTED for p in inside):
            raise UserError(
                f"refusing to replace {out_dir}: {entry.name} was not written by `builder render`; choose an empty or generated folder"
            )


def write_tree(out_dir: Path, expected: Mapping[str, bytes]) -> list[str]:
    """Replace out_dir with exactly `expected`; returns what changed. Atomic swap of the folder."""
    changed = stale(out_dir, expected)
    if not changed:
        return []
    guard(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
    try:
        for rel, data in expected.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        if out_dir.exists():
            out_dir.rename(old)
        tmp.rename(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return changed
