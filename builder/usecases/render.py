"""`builder render`: images/ (or another folder) written from the plan, or with `check` compared
with it, writing nothing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builder.render import tree
from builder.workspace import Workspace


@dataclass(frozen=True)
class Rendered:
    target: Path
    images: int  # images in the plan
    checked: bool  # compared only (--check)
    stale: tuple[str, ...] = ()  # with `checked`: the files that differ, relative to `target`
    changed: int = 0  # without: the files written

    @property
    def ok(self) -> bool:
        return not self.stale


def render(ws: Workspace, out_dir: str | None, check: bool, force: bool) -> Rendered:
    """`force` replaces generated files edited by hand (never other files)."""
    target = Path(out_dir).absolute() if out_dir else ws.images_dir
    if target.resolve() != ws.images_dir.resolve():  # another tree: never inside images/, nor holding it
        tree.check_apart(target, {"images/": ws.images_dir})
    expected = ws.rendered_tree()
    images = len(ws.decided.images)
    if check:
        return Rendered(target, images, True, tuple(tree.stale(target, expected)))
    return Rendered(target, images, False, changed=len(tree.write_tree(target, expected, force=force)))
