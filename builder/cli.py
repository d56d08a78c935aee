"""The `builder` command line: thin click commands. Each takes its options as one record
(builder/ui/args.py), hands them to a use-case (builder/usecases/) and shows what comes back
(builder/ui/); no command holds logic of its own.

Errors a user can fix are one line `error: ...` with exit code 2; exit 1 means "ran, but
something failed" (builder/ui/exits.py). Logs and progress go to stderr, data and summaries to stdout.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

from builder.ui.args import (
    BakeArgs,
    BuildArgs,
    CatalogArgs,
    CleanArgs,
    DoctorArgs,
    FitArgs,
    LockArgs,
    NightlyArgs,
    PlanArgs,
    ProbeArgs,
    PublishArgs,
    PullArgs,
    RenderArgs,
    ReportArgs,
    ReproduceArgs,
    RunArgs,
    TestArgs,
    UpdatesArgs,
)
from builder.ui.env_args import EnvBuildArgs, EnvLockArgs, EnvShellArgs, EnvTestArgs, opened
from builder.ui.exits import OneLineGroup, exit_for, user_errors
from builder.ui.options import takes
from builder.ui.terminal import emit_json, err
from builder.workspace import Workspace

R = TypeVar("R")


def command(parent: click.Group, args: type[R], name: str | None = None) -> Callable[[Callable[[Workspace, R], None]], click.Command]:
    """A command of `parent` called with the workspace and its options' record, its errors one line each (user_errors)."""

    def make(func: Callable[[Workspace, R], None]) -> click.Command:
        return parent.command(name)(takes(args)(click.pass_obj(user_errors(func))))

    return make


@click.group(cls=OneLineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--matrix", "matrix_path", metavar="PATH", help="matrix file (default ./matrix.yaml or $BUILDER_MATRIX)")
@click.pass_context
def main(ctx: click.Context, matrix_path: str | None) -> None:
    """Known-good GPU container images from one matrix.yaml."""
    ctx.obj = Workspace.locate(matrix_path)


@command(main, PlanArgs)
def plan(ws: Workspace, args: PlanArgs) -> None:
    """Expand and validate the matrix; print the images it yields."""
    from builder.ui import plan as show
    from builder.usecases import plan as planning

    contexts = args.contexts()
    found = planning.plan(ws, args.select_expr)
    if args.fmt == "bake":
        emit_json(planning.bake(ws, found.images, contexts, Path.cwd(), args.layers))
    else:
        show.show_plan(found, args.fmt, args.explain)
    show.warn_past_end_of_life(found)


@command(main, RenderArgs)
def render(ws: Workspace, args: RenderArgs) -> None:
    """Write images/<id>/ build contexts from the plan."""
    from builder.ui.render import show_rendered
    from builder.usecases.render import render

    done = render(ws, args.out_dir, args.check, args.force)
    show_rendered(done)
    exit_for(done.ok)


@main.command()
@takes(ProbeArgs)
def probe(args: ProbeArgs) -> None:
    """Run the hello-GPU probes in this Python environment (no Docker)."""
    import subprocess

    sys.exit(subprocess.call(args.argv(sys.executable)))


@command(main, BuildArgs)
def build(ws: Workspace, args: BuildArgs) -> None:
    """Build what is stale (default: the matrix's defaults.select)."""
    from builder.ui.build import BuildProgress, print_build_summary
    from builder.ui.terminal import out
    from builder.usecases.build import build_images, build_ok

    results = build_images(ws, ws.selected(args.select_expr, use_default=True), args.build.options(), BuildProgress(err))
    print_build_summary(out, results)
    exit_for(build_ok(results))


@command(main, BakeArgs)
def bake(ws: Workspace, args: BakeArgs) -> None:
    """Build the canonical images with `docker buildx bake`, normalized to `builder build`'s layer diff IDs."""
    from builder.ui.terminal import out
    from builder.usecases.bake import bake_images, chosen

    results = bake_images(ws, chosen(ws, args.select_expr), args.builder)
    for baked in results:
        if baked.image_id is None:
            out.print(f"{baked.id}: failed: {baked.error}", markup=False, highlight=False)
        else:
            out.print(f"{baked.id}: {baked.tag} {baked.image_id} ({len(baked.diff_ids)} layers)", markup=False, highlight=False)
    exit_for(all(b.image_id is not None for b in results))


@command(main, TestArgs)
def test(ws: Workspace, args: TestArgs) -> None:
    """Smoke-test built images in locked-down containers; results in build/results/."""
    from builder.model.results import is_good
    from builder.ui.terminal import out
    from builder.ui.test import TestLines, print_base_result, print_test_summary
    from builder.usecases.test import test_base, test_images
    from builder.util.errors import UserError

    if args.base is not None:
        if args.select_expr is not None:
            raise UserError("--base tests one base, --select chooses images: give one of them")
        results = [test_base(ws, args.base, args.options(), lambda line: err.print(line, markup=False, highlight=False))]
        print_base_result(out, results[0])
    else:
        results = test_images(ws, ws.selected(args.select_expr, use_default=True), args.options(), TestLines(err))
        print_test_summary(out, results)
    exit_for(all(is_good(r.verdict) for r in results))


@command(main, RunArgs)
def run(ws: Workspace, args: RunArgs) -> None:
    """The main job: check images/ is current, build (bootstrapping local bases), smoke-test, summarize."""
    from builder.ui.run import RunSummary
    from builder.usecases.run import run, run_ok

    specs = ws.selected(args.select_expr, use_default=True)
    built, tested = run(ws, specs, args.build.options(), args.test(), RunSummary())
    exit_for(run_ok(specs, built, tested))


@command(main, LockArgs)
def lock(ws: Workspace, args: LockArgs) -> None:
    """Resolve each image for its target into images/<id>/requirements.lock (every package, sha256
    hashes), then measure each CUDA image's fit from its locked wheels into images/<id>/fit.json."""
    from builder.ui import lock as show
    from builder.usecases import lock as locking

    if args.check:
        checked = locking.check_locks(ws, ws.selected(args.select_expr, use_default=False), args.against_index, args.sources.sources())
        show.show_check(checked)
        exit_for(checked.ok)
    options = args.options()
    specs = ws.selected(args.select_expr, use_default=False)
    results = locking.lock_images(ws, specs, options, show.LockLines(err))
    show.show_locked(results)
    measured = locking.measure_after(ws, specs, options, results, show.MeasureLines(err))
    show.show_measured(measured)
    exit_for(locking.locked_ok(results, measured))


@command(main, CleanArgs)
def clean(ws: Workspace, args: CleanArgs) -> None:
    """Remove the containers, images and files this workspace made and no longer needs (only those:
    another checkout's images on the same engine are its own to remove)."""
    from builder.ui.clean import show_cleaned
    from builder.usecases.clean import clean

    show_cleaned(clean(ws, args.options()))


@command(main, PublishArgs)
def publish(ws: Workspace, args: PublishArgs) -> None:
    """Push images whose smoke tests passed for their current build; record them as known-good."""
    from builder.ui.catalog import PublishLines, show_published
    from builder.usecases.publish import publish, publish_ok

    catalog = ws.store.catalog(args.catalog_dir)
    outcomes = publish(ws, ws.selected(args.select_expr, use_default=True), args.options(), catalog, PublishLines(err))
    show_published(catalog.file, outcomes)
    exit_for(publish_ok(outcomes))


@command(main, PullArgs)
def pull(ws: Workspace, args: PullArgs) -> None:
    """Pull the newest known-good image matching QUERY (e.g. torch=2.14 cuda=13 python=3.11) by digest.

    First checks that it fits this host (or the one the options describe), as `builder fit` does:
    a record that does not fit is refused (exit 1) naming the newest match that fits. The record's
    signatures are checked against the allowed signers; a signed catalog without them is refused
    (--no-verify pulls it unverified, and says so). A tag the registry moved off the digest is noted."""
    from builder.ui.catalog import show_pulled
    from builder.usecases import pull as pulling

    check, built = args.fit_check(), pulling.build_repository(ws)
    args.evidence.one_of()
    pulled = pulling.pull(
        ws.store.catalog(args.catalog_dir, must_exist=True),
        " ".join(args.query),
        log=lambda line: None,
        build_repository=built,
        check=check,
        allowed_signers=args.evidence.allowed_signers,
        verify_signatures=not args.evidence.no_verify,
    )
    show_pulled(pulled)


@command(main, FitArgs)
def fit(ws: Workspace, args: FitArgs) -> None:
    """Say whether each known-good image matching QUERY (or each --library, or with --planned each
    planned image) runs on this host, or the one described, and why.

    Exit 0 when an image fits (with --library: when every library does), else 1."""
    from builder.ui.fit import show_fit
    from builder.usecases.fit import fit_asked

    asked = args.asked()
    report = fit_asked(ws, asked, args.host.host())
    show_fit(report, args.fmt)
    exit_for(report.ok)


@command(main, CatalogArgs)
def catalog(ws: Workspace, args: CatalogArgs) -> None:
    """List the known-good records (matching QUERY, newest first).

    --verify checks each one's signed evidence (catalog/evidence/) against the allowed signers, and
    the registry's side: its immutable and floating tags point at its digest, and its .sbom and
    .att tags hold that evidence; each mismatch is one line naming the tag (exit 1)."""
    from builder.ui.catalog import show_listing
    from builder.usecases.catalog import listing

    store = ws.store.catalog(args.catalog_dir, must_exist=True)
    found = listing(store, args.query, args.signers(store), indexes=args.fmt == "json", verdicts=ws.store.reproduced)
    show_listing(found, args.fmt)
    exit_for(found.ok)


@command(main, ReproduceArgs)
def reproduce(ws: Workspace, args: ReproduceArgs) -> None:
    """Rebuild the newest known-good record matching QUERY from its lock and base and compare it with its
    signed attestation: `reproduced` (exit 0), or `differs: layer N (what it is): expected ..., got ...`.

    Its evidence is verified first; this checkout must hold its lock and images/<id>/ (docs/reproducible.md)."""
    from builder.ui.catalog import show_reproduced
    from builder.usecases.reproduce import reproduce

    store = ws.store.catalog(args.catalog_dir, must_exist=True)
    log = lambda line: err.print(line, markup=False, highlight=False)  # noqa: E731 - one line
    done = reproduce(ws, store, " ".join(args.query), log=log, allowed_signers=args.allowed_signers)
    show_reproduced(done)
    exit_for(done.verdict.ok)


@command(main, ReportArgs)
def report(ws: Workspace, args: ReportArgs) -> None:
    """The support matrix (every planned image, its status and digest; a base x stack grid) as Markdown and HTML."""
    from builder.ui.report import show_report
    from builder.usecases.report import report

    markdown = Path(args.markdown_path) if args.markdown_path else ws.store.report_markdown
    html = Path(args.html_path) if args.html_path else ws.store.report_html
    show_report(report(ws, ws.store.catalog(args.catalog_dir, must_exist=True), markdown, html))


@command(main, UpdatesArgs)
def updates(ws: Workspace, args: UpdatesArgs) -> None:
    """Releases newer than matrix.yaml lists, what their metadata says, and whether the rules can place them."""
    from builder.ui.nightly import show_updates
    from builder.usecases.updates import updates

    show_updates(updates(ws, args.options()), args.fmt)


@command(main, NightlyArgs)
def nightly(ws: Workspace, args: NightlyArgs) -> None:
    """updates -> plan -> lock -> build what changed -> test -> publish what passed -> report; exit 1 on a regression."""
    from builder.ui.nightly import NightlyLines, show_nightly
    from builder.usecases.nightly import run_nightly

    done = run_nightly(ws, args.options(), NightlyLines(err))
    show_nightly(done)
    exit_for(done.ok)


@command(main, DoctorArgs)
def doctor(ws: Workspace, args: DoctorArgs) -> None:
    """What this host can run: engine, GPU vendor, driver, runtime, a verdict per planned image.

    With --image REF: whether that local image runs on this host (or the one the options describe),
    judged from its io.builder.* labels as `builder fit` judges records; exit 1 when it does not fit."""
    from builder.usecases import doctor as doctoring

    image = args.image()
    if image is not None:
        from builder.ui.fit import show_image_fit

        fitted = doctoring.image_fit(image, args.host.host(), ws=ws)
        show_image_fit(fitted, args.fmt)
        exit_for(fitted.ok)
    from builder.ui.doctor import show_host

    found = doctoring.host_report(ws, args.select_expr)
    show_host(found, args.fmt)
    exit_for(found.ok)


# -- team environments (builder/env/, builder/usecases/env.py) -------------------------------------------


@main.group("env")
def env_group() -> None:
    """A team's environment on a known-good image: gpu-env.yaml -> gpu-env.lock -> a derived image.

    \b
    builder env lock    resolve the requirements on the base's own lock (nothing of the base moves)
    builder env build   build FROM the base's digest, installing only the lock (hashes required)
    builder env test    the base's smoke tests and pip check in the derived image
    builder env shell   open it (GPU flags, the folder mounted, your uid); writes .devcontainer/
    """


@command(env_group, EnvLockArgs, "lock")
def env_lock(ws: Workspace, args: EnvLockArgs) -> None:
    """Lock the env file's requirements with uv on top of the base image's lock (its evidence checked as `pull` does).

    The lock is named after the env file (gpu-env.yaml -> gpu-env.lock, other.yaml -> other.lock)
    and names the record and digest it was made on."""
    from builder.ui import env as show
    from builder.usecases import env as envs

    env, catalog, chosen = opened(ws, args)
    if args.check:
        state = envs.lock_state(ws, catalog, env, chosen)
        show.show_lock_state(state)
        exit_for(state.record is not None)
    done = envs.lock_env(ws, catalog, env, chosen, upgrade=args.upgrade, chosen_sources=args.sources.sources())
    show.show_env_locked(env.lock_path.name, done)


@command(env_group, EnvBuildArgs, "build")
def env_build(ws: Workspace, args: EnvBuildArgs) -> None:
    """Build the derived image FROM the base's digest (skipped when its content hash is built; the base's evidence checked as `pull` does)."""
    from builder.ui import env as show
    from builder.usecases import env as envs

    env, catalog, chosen = opened(ws, args)
    ready, result = envs.build_env(ws, catalog, env, show.EnvLines(), chosen, args.force, args.sources.sources(), no_cache=args.no_cache)
    show.show_env_built(ready, result)
    exit_for(result.status in show.BUILT)


@command(env_group, EnvTestArgs, "test")
def env_test(ws: Workspace, args: EnvTestArgs) -> None:
    """The base's smoke tests (and pip check) in the derived image: its verdict must be the base's."""
    from builder.ui import env as show
    from builder.usecases import env as envs

    env, catalog, chosen = opened(ws, args)
    ready, tested = envs.test_env(ws, catalog, env, chosen, args.gpu, args.timeout_s)
    show.show_env_tested(ready, tested)
    exit_for(tested.same)


@command(env_group, EnvShellArgs, "shell")
def env_shell(ws: Workspace, args: EnvShellArgs) -> None:
    """Open the environment: evidence and fit checks, GPU flags for this host, the folder mounted, your uid.

    Writes .devcontainer/devcontainer.json (another env file: .devcontainer/<name>/), replacing only
    a file builder wrote there."""
    import os

    from builder.ui import env as show
    from builder.usecases import env as envs

    env, catalog, chosen = opened(ws, args)
    plan = envs.plan_shell(ws, catalog, env, Path.cwd(), os.getuid(), os.getgid(), chosen)
    show.show_shell(plan)
    if not args.print_only:
        sys.exit(envs.open_shell(plan))


if __name__ == "__main__":
    main()
