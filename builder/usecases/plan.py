"""`builder plan`: the images a selection yields, the vendor end-of-life warnings of their lines,
and for `--format bake` the bake file over complete build contexts written where asked."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.compat import lifecycle
from builder.model.plan import ImageSpec, Plan
from builder.render import tree
from builder.render.formats import plan_json
from builder.workspace import Workspace


@dataclass(frozen=True)
class Planned:
    plan: Plan  # the whole plan: what --explain lists as skipped, its warnings
    images: tuple[ImageSpec, ...]  # the selected images, each with its content hash
    past_end_of_life: tuple[str, ...]  # one warning per line past its vendor's end of life

    def to_json(self) -> dict[str, Any]:
        return plan_json(self.images, self.plan.skipped)


def plan(ws: Workspace, select: str | None, today: dt.date | None = None) -> Planned:
    images = ws.selected(select, use_default=False)
    warnings = lifecycle.past_vendor_warnings(images, today or dt.datetime.now(dt.UTC).date())
    return Planned(ws.decided, images, tuple(warnings))


def bake(ws: Workspace, images: tuple[ImageSpec, ...], contexts_dir: str | None, cwd: Path, layers: bool = False) -> dict[str, Any]:
    """Write complete contexts (images/<id> plus the probe `builder build` stages) into a folder of
    builder's own (render's ownership rules; build/bake by default), so any builder builds them as
    they are; the bake file names them relative to `cwd`, where bake resolves them from. `layers`:
    the canonical images too, their contexts with the venv layer made from the lock in
    build/bake-canonical/ (usecases/layers.py `stage_contexts`); else they are left out."""
    from builder.engine.build import git_revision  # the revision `builder build` labels (git only, no engine)
    from builder.render.bake import bake_file
    from builder.usecases.build import BuildOptions, build_settings
    from builder.usecases.layers import canonical, stage_contexts

    folder = Path(contexts_dir).absolute() if contexts_dir else ws.build_dir / "bake"
    tree.check_apart(folder, {"render's images/": ws.images_dir, "the templates": ws.templates})
    contexts = ws.contexts(images)
    tree.write_tree(folder, {f"{i}/{name}": data for i, files in contexts.items() for name, data in files.items()})
    relative = Path(os.path.relpath(folder, cwd)).as_posix()
    canonical_dir = None
    if layers and any(canonical(s) for s in images):
        staged = stage_contexts(images, contexts, build_settings(ws, BuildOptions()), ws.build_dir)
        canonical_dir = Path(os.path.relpath(staged, cwd)).as_posix()
    return bake_file(images, images_dir=relative, revision=git_revision(ws.root), canonical_dir=canonical_dir)
