"""The `builder` command line: thin click commands; the work is in app, spec, render, host and ui.

Errors a user can fix are one line `error: ...` with exit code 2; exit 1 means "ran, but
something failed". Logs and progress go to stderr, data and summaries to stdout.
"""

from __future__ import annotations

import functools
import json
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console

from builder.model.sources import Sources
from builder.render import tree as render_tree
from builder.render.formats import github_matrix, plan_json
from builder.ui.text import MAX_LINE, plain
from builder.util.errors import Interrupted, RunFailure, UserError
from builder.util.text import redact
from builder.workspace import Workspace

if TYPE_CHECKING:
    from builder.fit.host import FitHost

F = TypeVar("F", bound=Callable[..., Any])
MAX_JOBS = 32  # parallel builds; more only thrash the engine and the disk
MAX_TIMEOUT_S = 24 * 3600
out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200, emoji=False)  # a value with :name: stays text
err = Console(stderr=True, soft_wrap=True, emoji=False)


def user_errors(func: F) -> F:
    """One line on stderr, never a traceback: UserError exits 2, RunFailure and a lost engine exit 1,
    Ctrl-C / SIGTERM / SIGHUP exit 128 + signal after every cleanup ran."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
        for sig in previous:
            signal.signal(sig, _interrupt)
        try:
            return func(*args, **kwargs)
        except UserError as exc:
            click.echo(f"error: {plain(redact(str(exc)), limit=MAX_LINE)}", err=True)
            sys.exit(2)
        except RunFailure as exc:
            click.echo(f"error: {plain(redact(str(exc)), limit=MAX_LINE)}", err=True)
            sys.exit(1)
        except KeyboardInterrupt as exc:
            signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
            click.echo(f"interrupted by {signal.Signals(signum).name}: stopped after cleaning up what this run had started", err=True)
            sys.exit(128 + signum)
        except Exception as exc:
            if "builder.engine.client" in sys.modules and sys.modules["builder.engine.client"].is_engine_fault(exc):
                click.echo(f"error: the Docker engine failed mid-run: {redact(' '.join(str(exc).split()))[:300]}", err=True)
                sys.exit(1)
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    return wrapper  # type: ignore[return-value]


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def _exit_for(ok: bool) -> None:
    sys.exit(0 if ok else 1)


class _Group(click.Group):
    """Usage errors as one line too (`error: ...`, exit 2), like every other error of the tool."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            return super().main(*args, **kwargs)
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help() if exc.ctx else exc.format_message())
            sys.exit(0)
        except click.exceptions.UsageError as exc:
            # The subcommands after the root's name, whatever the root was called (`builder`, `python -m builder`).
            names = [c.info_name for c in _lineage(exc.ctx)][1:] if exc.ctx else []
            command = " ".join(["builder", *(n for n in names if n), "--help"])
            click.echo(f"error: {exc.format_message()} (see `{command}`)", err=True)
            sys.exit(2)
        except click.exceptions.Abort:
            sys.exit(130)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)


def _lineage(ctx: click.Context) -> list[click.Context]:
    """ctx and its parents, the root first."""
    chain = [ctx]
    while chain[-1].parent is not None:
        chain.append(chain[-1].parent)
    return chain[::-1]


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--matrix", "matrix_path", metavar="PATH", help="matrix file (default ./matrix.yaml or $BUILDER_MATRIX)")
@click.pass_context
def main(ctx: click.Context, matrix_path: str | None) -> None:
    """Known-good GPU container images from one matrix.yaml."""
    ctx.obj = Workspace.locate(matrix_path)


select_option = click.option(
    "--select",
    "select_expr",
    metavar="EXPR",
    help="key=value terms (globs; a version matches its releases), e.g. stack=torch,base=cuda12.* or torch=2.14",
)


@main.command()
@select_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "github", "bake"]),
    default="table",
    show_default=True,
    help="bake: a docker-bake.json for `docker buildx bake` (run it from this folder)",
)
@click.option("--explain", is_flag=True, help="also list skipped combinations with reasons")
@click.option(
    "--contexts", "contexts_dir", metavar="DIR", help="with --format bake: where the complete build contexts go (default build/bake)"
)
@click.pass_obj
@user_errors
def plan(ws: Workspace, select_expr: str | None, fmt: str, explain: bool, contexts_dir: str | None) -> None:
    """Expand and validate the matrix; print the images it yields."""
    if contexts_dir is not None and fmt != "bake":
        raise click.UsageError("--contexts goes with --format bake (where its build contexts are written)")
    images = ws.selected(select_expr, use_default=False)
    if fmt == "json":
        emit_json(plan_json(images, ws.decided.skipped))
    elif fmt == "github":
        click.echo(json.dumps(github_matrix(images), sort_keys=True))
    elif fmt == "bake":
        import os

        from builder.engine.build import git_revision  # the revision `builder build` labels (git only, no engine)
        from builder.render.bake import bake_file

        # Complete contexts (images/<id> plus the probe that `builder build` stages), so any builder
        # builds them as they are; the folder is builder's own (render's ownership rules).
        folder = Path(contexts_dir).absolute() if contexts_dir else ws.build_dir / "bake"
        render_tree.check_apart(folder, {"render's images/": ws.images_dir, "the templates": ws.templates})
        contexts = ws.contexts(images)
        render_tree.write_tree(folder, {f"{i}/{name}": data for i, files in contexts.items() for name, data in files.items()})
        relative = Path(os.path.relpath(folder, Path.cwd())).as_posix()  # bake resolves contexts from where it runs
        emit_json(bake_file(images, images_dir=relative, revision=git_revision(ws.root)))
    else:
        from builder.ui.plan import print_table

        print_table(out, ws.decided, images, explain)
    from datetime import UTC, datetime

    from builder.compat import lifecycle

    for warning in lifecycle.past_vendor_warnings(images, datetime.now(UTC).date()):
        click.echo(f"warning: {plain(warning, limit=MAX_LINE)}", err=True)


@main.command()
@click.option("--check", is_flag=True, help="write nothing; exit 1 listing stale files")
@click.option("--out", "out_dir", metavar="DIR", help="output folder (default images/ beside the matrix)")
@click.option("--force", is_flag=True, help="replace generated files that were edited by hand (never other files)")
@click.pass_obj
@user_errors
def render(ws: Workspace, check: bool, out_dir: str | None, force: bool) -> None:
    """Write images/<id>/ build contexts from the plan."""
    target = Path(out_dir).absolute() if out_dir else ws.images_dir
    if target.resolve() != ws.images_dir.resolve():  # another tree: never inside images/, nor holding it
        render_tree.check_apart(target, {"images/": ws.images_dir})
    expected = ws.rendered_tree()
    if check:
        stale = render_tree.stale(target, expected)
        for path in stale:
            click.echo(f"stale: {target.name}/{path}")
        if stale:
            click.echo(f"{len(stale)} stale files; run `builder render`", err=True)
            sys.exit(1)
        click.echo(f"{target.name}/ is current ({len(ws.decided.images)} images)", err=True)
        return
    changed = render_tree.write_tree(target, expected, force=force)
    click.echo(f"rendered {len(ws.decided.images)} images into {target}; {len(changed)} files changed", err=True)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="print the probe's JSON document")
@click.option("--timeout", default=180, show_default=True, type=click.IntRange(1, MAX_TIMEOUT_S), help="seconds per framework")
@click.option("--require-gpu", is_flag=True, help="no GPU is a failure, not a skip")
def probe(as_json: bool, timeout: int, require_gpu: bool) -> None:
    """Run the hello-GPU probes in this Python environment (no Docker)."""
    import subprocess

    from builder.render.context import PROBE

    args = [sys.executable, str(PROBE), "--timeout", str(timeout)]
    args += ["--json"] if as_json else []
    args += ["--require-gpu"] if require_gpu else []
    sys.exit(subprocess.call(args))


def _options(*options: Callable[[F], F]) -> Callable[[F], F]:
    def apply(func: F) -> F:
        for option in reversed(options):
            func = option(func)
        return func

    return apply


gpu_option = click.option(
    "--gpu",
    type=click.Choice(["auto", "require", "off"]),
    default="auto",
    show_default=True,
    help="attach GPUs: if present / always (fail without) / never",
)
BUILD_SOURCE_OPTIONS = (
    click.option("--ca-bundle", metavar="FILE", help="PEM bundle pip/apt/uv trust (or $BUILDER_CA_BUNDLE, build.ca_bundle)"),
    click.option("--no-host-settings", is_flag=True, help="do not take the host's CA bundle and pip sources"),
    click.option("--wheelhouse", metavar="DIR", multiple=True, help="folder of wheels; pinned ones are used from there"),
    click.option("--index-url", metavar="URL", help="primary package index (company mirror)"),
    click.option("--extra-index-url", metavar="URL", multiple=True, help="more package indexes"),
)
build_options = _options(
    click.option("-j", "--jobs", default=1, show_default=True, type=click.IntRange(1, MAX_JOBS), help="images built in parallel"),
    click.option("--force", is_flag=True, help="rebuild even when the content hash is already built"),
    click.option("--no-cache", is_flag=True, help="with --force: do not use the engine's layer cache either"),
    click.option("--keep-going", is_flag=True, help="build the rest after a failure"),
    click.option("--push", is_flag=True, hidden=True, expose_value=True),  # gone: refused with the way to publish
    *BUILD_SOURCE_OPTIONS,
)


def _build_options(kwargs: dict[str, Any]) -> Any:
    from builder.usecases.build import BuildOptions

    if kwargs["push"]:
        raise click.UsageError(
            "--push is gone: nothing untested is pushed; run `builder test`, then `builder publish` (it pushes images that passed)"
        )
    return BuildOptions(
        jobs=kwargs["jobs"], force=kwargs["force"], no_cache=kwargs["no_cache"], keep_going=kwargs["keep_going"], sources=_sources(kwargs)
    )


def _sources(kwargs: dict[str, Any]) -> Sources:
    """BUILD_SOURCE_OPTIONS as the one record BuildOptions and LockOptions hold."""
    return Sources(
        index_url=kwargs["index_url"],
        extra_index_urls=tuple(kwargs["extra_index_url"]),
        wheelhouse=tuple(kwargs["wheelhouse"]),
        ca_bundle=kwargs["ca_bundle"],
        use_host=not kwargs["no_host_settings"],
    )


@main.command()
@select_option
@build_options
@click.pass_obj
@user_errors
def build(ws: Workspace, /, select_expr: str | None, **kwargs: Any) -> None:
    """Build what is stale (default: the matrix's defaults.select)."""
    from builder.ui.build import BuildProgress, print_build_summary
    from builder.usecases.build import build_images, build_ok

    results = build_images(ws, ws.selected(select_expr, use_default=True), _build_options(kwargs), BuildProgress(err))
    print_build_summary(out, results)
    _exit_for(build_ok(results))


@main.command()
@select_option
@gpu_option
@click.option(
    "--timeout",
    "timeout_s",
    default=600,
    show_default=True,
    type=click.IntRange(1, MAX_TIMEOUT_S),
    help="seconds per image before the container is killed",
)
@click.pass_obj
@user_errors
def test(ws: Workspace, select_expr: str | None, gpu: str, timeout_s: int) -> None:
    """Smoke-test built images in locked-down containers; results in build/results/."""
    from builder.model.results import is_good
    from builder.ui.test import TestLines, print_test_summary
    from builder.usecases.test import TestOptions, test_images

    results = test_images(ws, ws.selected(select_expr, use_default=True), TestOptions(gpu, timeout_s), TestLines(err))
    print_test_summary(out, results)
    _exit_for(all(is_good(r.verdict) for r in results))


class _RunSummary:
    """usecases.run.RunEvents for the terminal: progress while it runs, each stage's table when it ends."""

    def __init__(self) -> None:
        from builder.ui.build import BuildProgress
        from builder.ui.test import TestLines

        self.build = BuildProgress(err)
        self.test = TestLines(err)

    def built(self, results: Sequence[Any]) -> None:
        from builder.ui.build import print_build_summary

        print_build_summary(out, results)

    def tested(self, results: Sequence[Any]) -> None:
        from builder.ui.test import print_test_summary

        if results:
            print_test_summary(out, results)


@main.command()
@select_option
@build_options
@gpu_option
@click.option(
    "--timeout",
    "timeout_s",
    default=600,
    show_default=True,
    type=click.IntRange(1, MAX_TIMEOUT_S),
    help="seconds per image for the smoke tests",
)
@click.pass_obj
@user_errors
def run(ws: Workspace, /, select_expr: str | None, gpu: str, timeout_s: int, **kwargs: Any) -> None:
    """The main job: check images/ is current, build (bootstrapping local bases), smoke-test, summarize."""
    from builder.usecases.run import run, run_ok
    from builder.usecases.test import TestOptions

    specs = ws.selected(select_expr, use_default=True)
    built, tested = run(ws, specs, _build_options(kwargs), TestOptions(gpu, timeout_s), _RunSummary())
    _exit_for(run_ok(specs, built, tested))


@main.command()
@select_option
@click.option("--check", is_flag=True, help="offline: exit 1 listing locks that are missing or no longer match their inputs")
@click.option("--upgrade", is_flag=True, help="re-resolve every selected image to the newest versions its pins allow")
@click.option("-j", "--jobs", default=2, show_default=True, type=click.IntRange(1, MAX_JOBS), help="resolutions in parallel")
@click.option("--keep-going", is_flag=True, help="lock the rest after a failure, and list what failed")
@click.option(
    "--no-measure", is_flag=True, help="do not measure the CUDA images' fits from their locked wheels (fit.json stays missing or stale)"
)
@_options(*BUILD_SOURCE_OPTIONS)
@click.pass_obj
@user_errors
def lock(
    ws: Workspace, /, select_expr: str | None, check: bool, upgrade: bool, jobs: int, keep_going: bool, no_measure: bool, **kwargs: Any
) -> None:
    """Resolve each image for its target into images/<id>/requirements.lock (every package, sha256
    hashes), then measure each CUDA image's fit from its locked wheels into images/<id>/fit.json."""
    from builder.ui.lock import LockLines, MeasureLines, print_lock_summary
    from builder.usecases import lock as locking

    specs = ws.selected(select_expr, use_default=False)
    if check:
        results = locking.check(specs)
        bad = [r for r in results if r.status in ("missing", "stale")]
        for r in bad:
            click.echo(f"{r.status}: {ws.images_dir.name}/{r.id}/{r.file} ({r.detail})")
        unlocked = sum(r.status == "unlocked" for r in results)
        tail = f"; {unlocked} unlocked by matrix.yaml" if unlocked else ""
        click.echo(f"{len(results) - len(bad) - unlocked} locks current, {len(bad)} missing or stale{tail}", err=True)
        _exit_for(not bad)
    options = locking.LockOptions(
        jobs=jobs,
        upgrade=upgrade,
        keep_going=keep_going,
        include_unlocked=select_expr is not None,
        sources=_sources(kwargs),
        measure=not no_measure,
    )
    results = locking.lock_images(ws, specs, options, LockLines(err))
    print_lock_summary(out, results)
    for r in results:
        if r.status in locking.FAILED:
            click.echo(f"error: {r.id}: {r.detail}", err=True)
    failed = any(r.status in (*locking.FAILED, "not-locked") for r in results)
    if not failed or keep_going:
        measured = locking.measure_locked(ws, specs, options, MeasureLines(err))
        for m in measured:
            if m.status == "failed":
                click.echo(f"error: {m.id}: fit not measured: {m.detail}", err=True)
        failed |= any(m.status == "failed" for m in measured)
    _exit_for(not failed)


@main.command()
@click.option("--stale", is_flag=True, help="also remove this matrix's images that the plan no longer lists")
@click.option("--all", "everything", is_flag=True, help="also remove the current images and the bootstrapped bases")
@click.option("--dry-run", is_flag=True, help="list what would be removed, remove nothing")
@click.pass_obj
@user_errors
def clean(ws: Workspace, stale: bool, everything: bool, dry_run: bool) -> None:
    """Remove the containers, images and files this tool made and no longer needs (only those)."""
    from builder.engine import client as engine
    from builder.engine import leftovers

    planned = {s.tag for s in ws.decided.images} if stale else None
    removed = leftovers.clean(
        engine.open_engine(), ws.build_dir, repository=ws.matrix.registry, planned=planned, everything=everything, dry_run=dry_run
    )
    verb = "would remove" if dry_run else "removed"
    for kind, names in (("container", removed.containers), ("image", removed.images), ("folder", removed.folders)):
        for name in names:
            click.echo(f"{verb} {kind} {name}")
    for note in removed.skipped:
        click.echo(f"kept {note}", err=True)
    click.echo(f"{verb} {removed.count()} item(s)", err=True)


catalog_option = click.option("--catalog", "catalog_dir", metavar="DIR", help="the catalog folder (default: catalog/ beside matrix.yaml)")
# The one evidence check of pull, catalog --verify and the env commands (publish/verify.py's `signers`).
VERIFY_OPTIONS = (
    click.option(
        "--allowed-signers",
        "allowed_signers",
        type=click.Path(path_type=Path),
        metavar="FILE",
        help="OpenSSH allowed_signers the evidence is checked against (default: $BUILDER_ALLOWED_SIGNERS, else CATALOG/allowed_signers)",
    ),
    click.option("--no-verify", "no_verify", is_flag=True, help="do not check the records' signatures (the output says `not verified`)"),
)
verify_options = _options(*VERIFY_OPTIONS)


def _signers(catalog: Any, allowed_signers: Path | None, no_verify: bool) -> Any:
    """VERIFY_OPTIONS as the signers a command checks against (exit 2 when they contradict or cannot be used)."""
    from builder.publish.verify import signers

    _one_of(allowed_signers, no_verify)
    return signers(catalog, allowed_signers, not no_verify)


def _one_of(allowed_signers: Path | None, no_verify: bool) -> None:
    if no_verify and allowed_signers is not None:
        raise UserError("--no-verify checks no signatures, so --allowed-signers would be ignored: drop one of them")


@main.command()
@select_option
@click.option("--registry", metavar="REPO", help="repository to push to, e.g. 127.0.0.1:5000/gpu-images (default: matrix.yaml's registry)")
@click.option("--dry-run", is_flag=True, help="say what would be pushed and recorded; push and write nothing")
@click.option("--accept-gpu-skipped", is_flag=True, help="also publish CUDA/ROCm images tested without a GPU (the record says so)")
@click.option(
    "--push-timeout",
    "push_timeout",
    type=click.FloatRange(min=1, max=1e6),
    metavar="SECONDS",
    help="a push that has not finished by then is cancelled (default: $BUILDER_PUSH_DEADLINE_S or 3600)",
)
@click.option(
    "--sign-key",
    "sign_key",
    type=click.Path(path_type=Path),
    envvar="BUILDER_SIGN_KEY",
    metavar="KEY",
    help="SSH private key: sign each attestation and record with ssh-keygen -Y sign (default: $BUILDER_SIGN_KEY; unsigned without)",
)
@catalog_option
@click.pass_obj
@user_errors
def publish(
    ws: Workspace,
    select_expr: str | None,
    registry: str | None,
    dry_run: bool,
    accept_gpu_skipped: bool,
    push_timeout: float | None,
    sign_key: Path | None,
    catalog_dir: str | None,
) -> None:
    """Push images whose smoke tests passed for their current build; record them as known-good."""
    from builder.ui.catalog import PublishLines, print_publish_summary
    from builder.usecases.publish import PublishOptions, publish, publish_ok

    catalog = ws.store.catalog(catalog_dir)
    options = PublishOptions(
        registry=registry, dry_run=dry_run, accept_gpu_skipped=accept_gpu_skipped, push_deadline_s=push_timeout, sign_key=sign_key
    )
    outcomes = publish(ws, ws.selected(select_expr, use_default=True), options, catalog, PublishLines(err))
    print_publish_summary(out, outcomes)
    published = [o for o in outcomes if o.status == "published"]
    if published:
        click.echo(
            plain(f"recorded {len(published)} image(s) in {catalog.file}; a teammate runs: builder pull id={published[0].id}"), err=True
        )
    _exit_for(publish_ok(outcomes))


# The host a fit is judged for (`builder fit`, `pull`, `doctor --image`): detected, or these in its place.
FIT_HOST_OPTIONS = (
    click.option(
        "--gpu-cc",
        "gpu_cc",
        multiple=True,
        metavar="X.Y",
        help="a GPU's compute capability, e.g. 8.6 (repeat for each GPU; default: nvidia-smi's)",
    ),
    click.option("--driver", metavar="VERSION", help="the NVIDIA driver, e.g. 550.54.15 (default: nvidia-smi's)"),
    click.option(
        "--gfx",
        "gfx",
        multiple=True,
        metavar="gfxNNN",
        help="an AMD GPU's target as rocminfo names it, e.g. gfx942 (repeat for each GPU; default: kfd's)",
    ),
    click.option("--arch", "cpu", metavar="amd64|arm64", help="the host's CPU architecture (default: uname -m)"),
    click.option("--vendor", type=click.Choice(["nvidia", "amd", "none"]), help="the host's GPU vendor (default: detected)"),
    click.option(
        "--brand",
        metavar="BRAND",
        help="the NVIDIA GPUs' product brand as the container runtime names it, e.g. nvidia, tesla, geforce "
        "(default: nvidia-smi -q's; it decides images whose NVIDIA_REQUIRE_CUDA admits older branches by brand)",
    ),
)
fit_host_options = _options(*FIT_HOST_OPTIONS)


def _fit_host(
    gpu_cc: Sequence[str], driver: str | None, cpu: str | None, vendor: str | None, brand: str | None, gfx: Sequence[str] = ()
) -> FitHost:
    """FIT_HOST_OPTIONS as the host they describe (the detected one where they say nothing)."""
    from builder.fit import host as hosts

    return hosts.host_for(gpu_cc=gpu_cc, driver=driver, arch=cpu, vendor=vendor, brand=brand, gfx=gfx)


def _given_host_options(
    gpu_cc: Sequence[str], driver: str | None, cpu: str | None, vendor: str | None, brand: str | None, gfx: Sequence[str] = ()
) -> list[str]:
    given = {
        "--gpu-cc": bool(gpu_cc),
        "--gfx": bool(gfx),
        "--driver": driver is not None,
        "--arch": cpu is not None,
        "--vendor": vendor is not None,
        "--brand": brand is not None,
    }
    return [name for name, present in given.items() if present]


@main.command()
@click.argument("query", nargs=-1, required=True)
@fit_host_options
@click.option("--no-fit-check", is_flag=True, help="pull even a record that does not fit this host (the output says so)")
@catalog_option
@verify_options
@click.pass_obj
@user_errors
def pull(
    ws: Workspace,
    query: tuple[str, ...],
    gpu_cc: tuple[str, ...],
    driver: str | None,
    gfx: tuple[str, ...],
    cpu: str | None,
    vendor: str | None,
    brand: str | None,
    no_fit_check: bool,
    catalog_dir: str | None,
    allowed_signers: Path | None,
    no_verify: bool,
) -> None:
    """Pull the newest known-good image matching QUERY (e.g. torch=2.14 cuda=13 python=3.11) by digest.

    First checks that it fits this host (or the one the options describe), as `builder fit` does:
    a record that does not fit is refused (exit 1) naming the newest match that fits. The record's
    signatures are checked against the allowed signers; a signed catalog without them is refused
    (--no-verify pulls it unverified, and says so). A tag the registry moved off the digest is noted."""
    from builder.usecases import pull as pulling

    given = _given_host_options(gpu_cc, driver, cpu, vendor, brand, gfx)
    if no_fit_check and given:
        raise UserError(f"--no-fit-check checks nothing, so {', '.join(given)} would be ignored: drop one of them")
    check = pulling.FitCheck(skip=True) if no_fit_check else pulling.FitCheck(_fit_host(gpu_cc, driver, cpu, vendor, brand, gfx))
    try:
        build_repository: str | None = ws.matrix.registry  # builder build's names here: pull never moves them
    except UserError:
        build_repository = None  # no matrix beside the catalog: no build names to keep
    _one_of(allowed_signers, no_verify)
    pulled = pulling.pull(
        ws.store.catalog(catalog_dir, must_exist=True),
        " ".join(query),
        log=lambda line: None,
        build_repository=build_repository,
        check=check,
        allowed_signers=allowed_signers,
        verify_signatures=not no_verify,
    )
    click.echo(plain(pulled.fit, limit=MAX_LINE), err=True)
    click.echo(plain(f"pulled {pulled.record.digest} ({pulled.record.id}): digest checked; {pulled.trust}"), err=True)
    if pulled.note:
        click.echo(pulled.note, err=True)
    click.echo(pulled.run_line)


@main.command()
@click.argument("query", nargs=-1)
@fit_host_options
@click.option(
    "--library",
    "libraries",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="judge this library's own device code (or each library's under a folder) instead of catalog records (repeatable)",
)
@click.option("--reader", type=click.Choice(["fatbin", "cuobjdump"]), default="fatbin", show_default=True, help="how --library is read")
@click.option(
    "--planned", is_flag=True, help="judge the matrix's planned images (their fit measured from their locked wheels), not catalog records"
)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@catalog_option
@click.pass_obj
@user_errors
def fit(
    ws: Workspace,
    query: tuple[str, ...],
    gpu_cc: tuple[str, ...],
    driver: str | None,
    gfx: tuple[str, ...],
    cpu: str | None,
    vendor: str | None,
    brand: str | None,
    libraries: tuple[Path, ...],
    reader: str,
    planned: bool,
    fmt: str,
    catalog_dir: str | None,
) -> None:
    """Say whether each known-good image matching QUERY (or each --library, or with --planned each
    planned image) runs on this host, or the one described, and why.

    Exit 0 when an image fits (with --library: when every library does), else 1."""
    from builder.ui.fit import print_fit
    from builder.usecases import fit as fitting

    if libraries and (query or planned):
        raise UserError("give QUERY (catalog records, or planned images with --planned) or --library (files), not both")
    if planned and catalog_dir:
        raise UserError("--planned judges the matrix's planned images, not a catalog: drop --catalog or --planned")
    host = _fit_host(gpu_cc, driver, cpu, vendor, brand, gfx)
    if libraries:
        report = fitting.fit_libraries(libraries, host, "cuobjdump" if reader == "cuobjdump" else "fatbin")
    elif planned:
        report = fitting.fit_planned(ws.decided.images, " ".join(query), host)
    else:
        report = fitting.fit(ws.store.catalog(catalog_dir, must_exist=True), " ".join(query), host)
    if fmt == "json":
        emit_json(report.to_json())
    else:
        print_fit(out, report)
    _exit_for(report.ok)


@main.command()
@click.argument("query", nargs=-1)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--verify",
    is_flag=True,
    help="check each listed record's signatures, and its tags and evidence in its registry (exit 1 on any mismatch)",
)
@catalog_option
@verify_options
@click.pass_obj
@user_errors
def catalog(
    ws: Workspace, query: tuple[str, ...], fmt: str, verify: bool, catalog_dir: str | None, allowed_signers: Path | None, no_verify: bool
) -> None:
    """List the known-good records (matching QUERY, newest first).

    --verify checks each one's signed evidence (catalog/evidence/) against the allowed signers, and
    the registry's side: its immutable and floating tags point at its digest, and its .sbom and
    .att tags hold that evidence; each mismatch is one line naming the tag (exit 1)."""
    from builder.catalog.indexes import image_name
    from builder.compat import lifecycle
    from builder.ui.catalog import print_catalog
    from builder.usecases import catalog as catalogs
    from builder.usecases import pull as pulling

    store = ws.store.catalog(catalog_dir, must_exist=True)
    if (allowed_signers is not None or no_verify) and not verify:
        raise UserError("--allowed-signers and --no-verify say how --verify checks; add --verify")
    chosen = _signers(store, allowed_signers, no_verify) if verify else None
    records = catalogs.find(store, " ".join(query))
    checked = catalogs.verify(store, records, chosen) if chosen is not None else []
    runs_on = catalogs.runs_on_each(records)
    if fmt == "json":
        data: dict[str, Any] = {"images": [r.to_json() for r in records], "runs_on": {i: r.to_json() for i, r in runs_on.items()}}
        data["end_of_life"] = {r.id: lifecycle.to_json(pulling.record_end_of_life(r)) for r in records}
        data["support_window"] = {r.id: lifecycle.window_json(pulling.record_end_of_life(r)) for r in records}
        names = {image_name(r.id) for r in records}
        data["indexes"] = {name: index.to_json() for name, index in store.indexes().items() if name in names}
        if verify:
            data["verify"] = {v.record.id: {"ok": v.ok, "detail": v.detail, "findings": list(v.findings)} for v in checked}
        emit_json(data)
    else:
        print_catalog(out, records, checked, runs_on)
    for v in checked:
        for finding in v.findings:
            click.echo(plain(f"{v.record.id}: {finding}", limit=MAX_LINE), err=True)
    if query and not records:
        click.echo(f"error: {plain(catalogs.no_match_message(store, ' '.join(query)), limit=MAX_LINE)}", err=True)
        sys.exit(1)
    _exit_for(all(v.ok for v in checked))


@main.command()
@click.option("--markdown", "markdown_path", metavar="FILE", help="default: docs/support-matrix.md beside matrix.yaml")
@click.option("--html", "html_path", metavar="FILE", help="default: build/report/index.html")
@catalog_option
@click.pass_obj
@user_errors
def report(ws: Workspace, markdown_path: str | None, html_path: str | None, catalog_dir: str | None) -> None:
    """The support matrix (every planned image, its status and digest; a base x stack grid) as Markdown and HTML."""

    from builder.usecases import report as reporting

    files = reporting.report(
        ws,
        ws.store.catalog(catalog_dir, must_exist=True),
        Path(markdown_path) if markdown_path else ws.store.report_markdown,
        Path(html_path) if html_path else ws.store.report_html,
    )
    for note in files.notes:
        click.echo(plain(f"note: {note}", limit=MAX_LINE), err=True)
    click.echo(", ".join(f"{n} {status}" for status, n in files.counts.items()), err=True)
    click.echo(plain(f"wrote {files.markdown} and {files.html}"))


index_json_option = click.option(
    "--index-json-url",
    metavar="URL",
    envvar="BUILDER_INDEX_JSON_URL",
    help="the package index's JSON API (default https://pypi.org/pypi; or a mirror)",
)


@main.command()
@click.option("--apply", "do_apply", is_flag=True, help="add the releases the rules can place to matrix.yaml (comments and order kept)")
@click.option(
    "--max-new",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="with --apply: add at most this many releases per framework (the newest)",
)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@index_json_option
@click.option("--ca-bundle", metavar="FILE", help="PEM bundle to trust for the index (or $BUILDER_CA_BUNDLE)")
@click.pass_obj
@user_errors
def updates(ws: Workspace, do_apply: bool, max_new: int, fmt: str, index_json_url: str | None, ca_bundle: str | None) -> None:
    """Releases newer than matrix.yaml lists, what their metadata says, and whether the rules can place them."""
    from builder.ui.nightly import print_releases
    from builder.updates import apply, releases

    found = releases.check(ws.matrix, base_url=index_json_url, ca_bundle=ca_bundle)
    edits = apply.apply(ws.matrix_path, found.releases, max_new) if do_apply else []
    if fmt == "json":
        emit_json({**found.to_json(), "applied": edits})
    else:
        print_releases(out, found.releases)
    for line in edits:
        click.echo(line, err=True)


@main.command()
@select_option
@click.option("--no-updates", is_flag=True, help="do not ask the index for new releases (locks still upgrade)")
@click.option("--no-apply", is_flag=True, help="report new releases, do not add them to matrix.yaml")
@index_json_option
@click.option("--registry", metavar="REPO", help="repository to publish to (default: matrix.yaml's registry)")
@click.option("--no-publish", is_flag=True, help="build and test, publish nothing")
@click.option("--accept-gpu-skipped", is_flag=True, help="also publish CUDA/ROCm images tested without a GPU")
@click.option(
    "--summary", "summary_path", metavar="FILE", help="the Markdown summary (default build/nightly/summary.md; CI: $GITHUB_STEP_SUMMARY)"
)
@click.option("-j", "--jobs", default=1, show_default=True, type=click.IntRange(1, MAX_JOBS), help="images built in parallel")
@gpu_option
@click.option(
    "--timeout",
    "timeout_s",
    default=600,
    show_default=True,
    type=click.IntRange(1, MAX_TIMEOUT_S),
    help="seconds per image for the smoke tests",
)
@click.option(
    "--rebuild-past-eol",
    "rebuild_past_eol",
    is_flag=True,
    help="keep rebuilding images with a line (Python, OS, CUDA, framework) past its end of life (default: stop, and say so)",
)
@catalog_option
@_options(*BUILD_SOURCE_OPTIONS)
@click.pass_obj
@user_errors
def nightly(
    ws: Workspace, /, select_expr: str | None, summary_path: str | None, jobs: int, gpu: str, timeout_s: int, **kwargs: Any
) -> None:
    """updates -> plan -> lock -> build what changed -> test -> publish what passed -> report; exit 1 on a regression."""
    from builder.nightly import summary
    from builder.report.output import check_summary, write_summary
    from builder.ui.nightly import NightlyLines, print_nightly
    from builder.usecases import nightly as loop
    from builder.usecases.build import BuildOptions
    from builder.usecases.test import TestOptions

    options = loop.NightlyOptions(
        select=select_expr,
        updates=not kwargs["no_updates"],
        apply=not kwargs["no_apply"],
        index_json_url=kwargs["index_json_url"],
        build=BuildOptions(jobs=jobs, sources=_sources(kwargs)),
        test=TestOptions(gpu, timeout_s),
        publish=not kwargs["no_publish"],
        registry=kwargs["registry"],
        accept_gpu_skipped=kwargs["accept_gpu_skipped"],
        catalog_dir=kwargs["catalog_dir"],
        rebuild_past_eol=kwargs["rebuild_past_eol"],
    )
    if options.publish:  # a bad repository is a usage error before anything runs
        from builder.publish.publisher import check_repository

        check_repository(options.registry or ws.matrix.registry)
    target = Path(summary_path) if summary_path else ws.store.nightly_summary
    inputs = (ws.matrix_path, ws.store.catalog(options.catalog_dir).file)
    check_summary(target, inputs)  # a summary path that cannot be written stops it before the run, not after
    report = loop.nightly(ws.matrix_path, options, NightlyLines(err))
    write_summary(target, summary.render(report), inputs)
    print_nightly(out, report)
    click.echo(plain(f"summary: {target}"), err=True)
    failing_notes = [n for n in report.notes if not n.startswith(loop.LIFECYCLE_NOTE)]  # a line retired on its date is news, not a failure
    _exit_for(not report.regressed and not failing_notes)


@main.command()
@select_option
@click.option("--image", "image_ref", metavar="REF", help="judge this local image (a name, id or digest builder labelled) for this host")
@fit_host_options
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.pass_obj
@user_errors
def doctor(
    ws: Workspace,
    select_expr: str | None,
    image_ref: str | None,
    gpu_cc: tuple[str, ...],
    driver: str | None,
    gfx: tuple[str, ...],
    cpu: str | None,
    vendor: str | None,
    brand: str | None,
    fmt: str,
) -> None:
    """What this host can run: engine, GPU vendor, driver, runtime, a verdict per planned image.

    With --image REF: whether that local image runs on this host (or the one the options describe),
    judged from its io.builder.* labels as `builder fit` judges records; exit 1 when it does not fit."""
    from builder.host import doctor as doctor_mod
    from builder.host import facts

    given = _given_host_options(gpu_cc, driver, cpu, vendor, brand, gfx)
    if image_ref is None and given:
        raise UserError(f"{', '.join(given)} describe the host for --image: give --image REF too")
    if image_ref is not None:
        if select_expr is not None:
            raise UserError("--select picks planned images, --image one local image: give one of them")
        _doctor_image(image_ref, _fit_host(gpu_cc, driver, cpu, vendor, brand, gfx), fmt)
        return
    host = facts.gather()
    checks = doctor_mod.host_checks(host)
    images = ws.selected(select_expr, use_default=False) if ws.matrix_path.exists() else ()
    verdicts = doctor_mod.image_verdicts(host, images)
    if fmt == "json":
        emit_json(doctor_mod.report_json(host, checks, verdicts))
    else:
        from builder.ui.doctor import render_table

        render_table(out, host, checks, verdicts)
    _exit_for(not any(c.status == "fail" for c in checks) and not any(v.status == "fail" for v in verdicts))


def _doctor_image(ref: str, host: FitHost, fmt: str) -> None:
    from builder.ui.fit import print_image_fit
    from builder.usecases.doctor import image_fit

    result = image_fit(ref, host)
    if fmt == "json":
        emit_json(result.to_json())
    else:
        print_image_fit(out, result)
    _exit_for(result.ok)


# -- team environments (builder/env/, builder/usecases/env.py) -------------------------------------------

env_file_option = click.option(
    "--file",
    "env_path",
    default="gpu-env.yaml",
    show_default=True,
    metavar="PATH",
    help="the env file (its own lock, named after it, is written beside it)",
)


@main.group("env")
def env_group() -> None:
    """A team's environment on a known-good image: gpu-env.yaml -> gpu-env.lock -> a derived image.

    \b
    builder env lock    resolve the requirements on the base's own lock (nothing of the base moves)
    builder env build   build FROM the base's digest, installing only the lock (hashes required)
    builder env test    the base's smoke tests and pip check in the derived image
    builder env shell   open it (GPU flags, the folder mounted, your uid); writes .devcontainer/
    """


def _env_file(env_path: str) -> Any:
    from builder.env.envfile import load

    return load(Path(env_path).expanduser().absolute())


@env_group.command("lock")
@env_file_option
@click.option(
    "--upgrade", is_flag=True, help="move to the newest record the base names (for a digest: of the same line) and report what moved"
)
@click.option("--check", is_flag=True, help="offline: exit 1 when the lock is missing or stale (or its base's record changed)")
@catalog_option
@verify_options
@_options(*BUILD_SOURCE_OPTIONS)
@click.pass_obj
@user_errors
def env_lock(
    ws: Workspace, /, env_path: str, upgrade: bool, check: bool, catalog_dir: str | None, allowed_signers: Path | None, no_verify: bool,
    **kwargs: Any,
) -> None:  # fmt: skip
    """Lock the env file's requirements with uv on top of the base image's lock (its evidence checked as `pull` does).

    The lock is named after the env file (gpu-env.yaml -> gpu-env.lock, other.yaml -> other.lock)
    and names the record and digest it was made on."""
    from builder.publish.verify import vouch
    from builder.usecases import env as envs

    env = _env_file(env_path)
    catalog = ws.store.catalog(catalog_dir, must_exist=True)
    chosen = _signers(catalog, allowed_signers, no_verify)
    if check:
        try:
            base, _ = envs.locked_base(ws, catalog, env)
        except UserError as exc:
            click.echo(plain(f"stale: {exc}"), err=True)
            sys.exit(1)
        trust = vouch(catalog, base.record, chosen)
        click.echo(plain(f"current: {env.lock_path.name} on {base.record.id} ({base.record.digest}); {trust}"))
        return
    done = envs.lock_env(ws, catalog, env, chosen, upgrade=upgrade, chosen_sources=_sources(kwargs))
    if done.moved_from:
        click.echo(plain(f"base moved: {done.moved_from} -> {done.digest}"))
    click.echo(
        plain(f"{done.status}: {env.lock_path.name} on {done.base} ({done.digest}); adds {len(done.added)} package(s); {done.trust}")
    )
    for name, version in done.added:
        click.echo(plain(f"  + {name}=={version}"))
    for name, old, new in done.changes:
        click.echo(plain(f"  moved {name}: {old or '-'} -> {new or '-'}"))


class _EnvLines:
    def line(self, image: str, text: str) -> None:
        pass  # the whole log is in build/env/<name>/logs/


@env_group.command("build")
@env_file_option
@click.option("--force", is_flag=True, help="rebuild even when the image with this content hash exists")
@click.option("--no-cache", is_flag=True, help="build every step again (with --force: a rebuild from clean)")
@catalog_option
@verify_options
@_options(*BUILD_SOURCE_OPTIONS)
@click.pass_obj
@user_errors
def env_build(
    ws: Workspace, /, env_path: str, force: bool, no_cache: bool, catalog_dir: str | None, allowed_signers: Path | None, no_verify: bool,
    **kwargs: Any,
) -> None:  # fmt: skip
    """Build the derived image FROM the base's digest (skipped when its content hash is built; the base's evidence checked as `pull` does)."""
    from builder.usecases import env as envs

    env = _env_file(env_path)
    catalog = ws.store.catalog(catalog_dir, must_exist=True)
    chosen = _signers(catalog, allowed_signers, no_verify)
    ready, result = envs.build_env(ws, catalog, env, _EnvLines(), chosen, force, _sources(kwargs), no_cache=no_cache)
    click.echo(plain(f"base {ready.base.record.id}: {ready.trust}"), err=True)
    click.echo(plain(f"{result.status}: {ready.spec.tag} ({ready.spec.content_hash}) FROM {ready.base.record.digest}"))
    if result.status not in ("built", "up-to-date"):
        click.echo(plain(f"error: {result.error or ''} {result.cause or ''} {result.fix or ''} (log: {result.log})"), err=True)
    _exit_for(result.status in ("built", "up-to-date"))


@env_group.command("test")
@env_file_option
@click.option("--gpu", type=click.Choice(["auto", "require", "off"]), default="auto", show_default=True)
@click.option("--timeout", "timeout_s", default=600, show_default=True, type=click.IntRange(1, MAX_TIMEOUT_S))
@catalog_option
@verify_options
@click.pass_obj
@user_errors
def env_test(
    ws: Workspace, env_path: str, gpu: str, timeout_s: int, catalog_dir: str | None, allowed_signers: Path | None, no_verify: bool
) -> None:
    """The base's smoke tests (and pip check) in the derived image: its verdict must be the base's."""
    from builder.usecases import env as envs

    env = _env_file(env_path)
    catalog = ws.store.catalog(catalog_dir, must_exist=True)
    ready, tested = envs.test_env(ws, catalog, env, _signers(catalog, allowed_signers, no_verify), gpu, timeout_s)
    click.echo(plain(f"base {ready.base.record.id}: {ready.trust}"), err=True)
    click.echo(plain(f"{'same' if tested.same else 'DIFFERENT'}: {ready.spec.id}: {tested.note} (base {ready.base.record.id})"))
    for failure in tested.smoke.failures[:5]:
        click.echo(plain(f"  {failure}"), err=True)
    _exit_for(tested.same)


@env_group.command("shell")
@env_file_option
@click.option("--print", "print_only", is_flag=True, help="only print the `docker run` line (and write .devcontainer/)")
@catalog_option
@verify_options
@click.pass_obj
@user_errors
def env_shell(
    ws: Workspace, env_path: str, print_only: bool, catalog_dir: str | None, allowed_signers: Path | None, no_verify: bool
) -> None:
    """Open the environment: evidence and fit checks, GPU flags for this host, the folder mounted, your uid.

    Writes .devcontainer/devcontainer.json (another env file: .devcontainer/<name>/), replacing only
    a file builder wrote there."""
    import os

    from builder.usecases import env as envs

    env = _env_file(env_path)
    catalog = ws.store.catalog(catalog_dir, must_exist=True)
    plan = envs.plan_shell(ws, catalog, env, Path.cwd(), os.getuid(), os.getgid(), _signers(catalog, allowed_signers, no_verify))
    click.echo(plain(f"base: {plan.trust}"), err=True)
    click.echo(plain(f"fit: {plan.fit.status}: {plan.fit.reason}"), err=True)
    click.echo(plain(f"wrote {plan.devcontainer}"), err=True)
    click.echo(plain(plan.line))
    if not print_only:
        sys.exit(envs.open_shell(plan))


if __name__ == "__main__":
    main()
