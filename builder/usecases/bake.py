"""`builder bake`: canonical images built by BuildKit (`docker buildx bake`: Debian 13's docker-buildx,
pinned by .ci/buildx.sh), then normalized the way `builder build` normalizes them, so their layer
diff IDs are `builder build`'s (docs/reproducible.md, "bake").

The bake file and the contexts are `plan --format bake --layers`'s, with two changes for this run:
each target is tagged `<tag>-unnormalized` (the tag moves only once the normalized image is loaded,
as in `builder build`) and labelled with this workspace (so `builder clean` knows it). bake loads
the images into the engine DOCKER_HOST names (`--load`, whichever builder `--builder` picks: a
remote or Kubernetes one sends them back); each is then saved, normalized and loaded under its tag.
Only canonical images: the others need what `builder build` serves their install steps (CA bundle,
pip.conf, wheels), which bake has no way to be given.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from builder.engine import image_build, line_image, reproducible
from builder.engine.client import open_engine
from builder.engine.image_build import BuildFailed, Run, build_tag, replaceable
from builder.engine.ownership import Owner
from builder.engine.port import Connect, Engine
from builder.engine.settings import BuildSettings
from builder.lock.layer import from_ref, line_layer
from builder.model.plan import ImageSpec
from builder.render.bake import target_name
from builder.render.labels import WORKSPACE_LABEL
from builder.usecases import plan as planning
from builder.usecases.build import BuildOptions, build_settings, check_rendered
from builder.usecases.layers import NETWORK_FILE, canonical, layer_maker
from builder.util import fsio
from builder.util.errors import UserError
from builder.workspace import Workspace

BAKE_FILE = "builder-bake.json"  # beside the canonical contexts (build/bake-canonical/)
Runner = Callable[..., subprocess.CompletedProcess[str]]


@dataclass(frozen=True)
class Baked:
    id: str
    tag: str
    image_id: str | None  # None: not built (error says why)
    diff_ids: tuple[str, ...] = ()
    error: str | None = None


def chosen(ws: Workspace, select: str | None) -> tuple[ImageSpec, ...]:
    """The canonical images of --select (every canonical image without it); another image is refused."""
    specs = ws.selected(select, use_default=False)
    if select is None:
        specs = tuple(s for s in specs if canonical(s))
        if not specs:
            raise UserError("matrix.yaml's canonical_layers names no image: `builder bake` builds only canonical images")
    other = [s.id for s in specs if not canonical(s)]
    if other:
        raise UserError(
            f"{other[0]} is not a canonical image (matrix.yaml canonical_layers){f' (and {len(other) - 1} more)' if len(other) > 1 else ''}: "
            "`builder bake` builds only those; build it with `builder build`, or bake it yourself from `builder plan --format bake`"
        )
    return specs


def bake_images(
    ws: Workspace, specs: Sequence[ImageSpec], builder: str | None, connect: Connect = open_engine, runner: Runner = subprocess.run
) -> list[Baked]:
    check_rendered(ws, specs)
    _has_buildx(runner)
    engine = connect(timeout=3600)
    try:
        _lines(ws, engine, specs)
        bases = {}
        for spec in specs:
            base = engine.inspect_image(from_ref(spec))  # a CUDA line's member is on its line image
            if base is None:
                raise UserError(
                    f"{spec.id}: its base {from_ref(spec)} is not in the engine; `builder build --select id={spec.id}` makes it "
                    "(a bootstrapped base is in no registry), or pull it"
                )
            bases[spec.id] = base.id
        owner = Owner(ws.root, ws.build_dir)
        owner.register()
        doc = planning.bake(ws, tuple(specs), None, ws.root, layers=True)
        folder = ws.build_dir / "bake-canonical"
        for spec in specs:
            target = doc["target"][target_name(spec.id)]
            target["tags"] = [build_tag(spec)]
            target["labels"][WORKSPACE_LABEL] = owner.identity
        (folder / BAKE_FILE).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        files = [str(folder / BAKE_FILE), str(folder / NETWORK_FILE)]  # the contexts are relative to ws.root, where bake runs
        argv = ["docker", "buildx", "bake", "-f", files[0], "-f", files[1], "--load", "--progress", "plain"]
        argv += [*(["--builder", builder] if builder else []), *(target_name(s.id) for s in specs)]
        log = ws.build_dir / "logs" / "bake.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w", encoding="utf-8") as out:
            done = runner(argv, cwd=ws.root, stdout=out, stderr=subprocess.STDOUT, text=True, check=False)
        if done.returncode != 0:
            last = _last_error(log)
            return [Baked(s.id, s.tag, None, error=f"docker buildx bake failed: {last} (log: {log})") for s in specs]
        run = Run(settings=BuildSettings(), build_dir=ws.build_dir, lock_dir=fsio.lock_dir(), owner=owner)
        return [_normalized(run, engine, spec, bases[spec.id], owner) for spec in specs]
    finally:
        engine.close()


def _lines(ws: Workspace, engine: Engine, specs: Sequence[ImageSpec]) -> None:
    """The NVIDIA image of each CUDA line the members among `specs` build FROM, made as `builder build`
    makes it (engine/line_image.py) where the engine has none: on the base, which must be there."""
    members = {s.line_image: s for s in specs if line_layer(s) and s.line_image}
    if not members:
        return
    settings = build_settings(ws, BuildOptions())
    run = Run(
        settings=settings,
        build_dir=ws.build_dir,
        lock_dir=fsio.lock_dir(),
        layers=layer_maker(list(members.values()), settings, ws.build_dir / "wheels"),
    )
    for _, spec in sorted(members.items()):
        if engine.inspect_image(spec.base.from_ref) is None:
            continue  # said below, for each image on it
        try:
            line_image.ensure(run, engine, spec)
        except BuildFailed as exc:
            raise UserError(f"{spec.id}: {exc.message}") from None


def _normalized(run: Run, engine: Engine, spec: ImageSpec, base_id: str, owner: Owner) -> Baked:
    with image_build.tag_lock(run.lock_dir, spec.tag):
        built = engine.inspect_image(build_tag(spec))
        if built is None:
            return Baked(spec.id, spec.tag, None, error=f"bake finished but the engine has no image {build_tag(spec)}")
        current = engine.inspect_image(spec.tag)
        try:
            context = run.build_dir / "bake-canonical" / spec.id  # BuildKit added its tars: the normalization puts these in their place
            tars = {path.name: reproducible.FileLayer(path) for path in sorted(context.glob("*.tar"))}
            loaded = image_build.reproducible_image(run, engine, spec, built, base_id, tars)
        except BuildFailed as exc:
            return Baked(spec.id, spec.tag, None, error=exc.message)
        if current is not None and current.id != loaded.id and replaceable(current, owner):
            engine.remove_image(current.id)  # the image the tag named before (this workspace's): garbage now
        return Baked(spec.id, spec.tag, loaded.id, loaded.diff_ids)


def _has_buildx(runner: Runner) -> None:
    try:
        found = runner(["docker", "buildx", "version"], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise UserError("no docker CLI on PATH: `builder bake` runs `docker buildx bake`") from None
    if found.returncode != 0:
        raise UserError("docker buildx is not installed: bash .ci/buildx.sh installs Debian 13's docker-buildx (scripts/setup.sh runs it)")


def _last_error(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if "ERROR" in line or "error" in line]
    return (errors or lines or ["no output"])[-1][:300]
