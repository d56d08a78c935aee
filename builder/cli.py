"""The `builder` command line: thin click commands over the pipeline modules."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from builder import render as render_mod
from builder.errors import UserError
from builder.plan import image_entry
from builder.planview import github_matrix, plan_json, print_table
from builder.workspace import Workspace

F = TypeVar("F", bound=Callable[..., Any])
out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, soft_wrap=True)


def user_errors(func: F) -> F:
    """UserError -> one line on stderr, exit 2, no traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except UserError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--matrix", "matrix_path", metavar="PATH", help="matrix file (default ./matrix.yaml or $BUILDER_MATRIX)")
@click.pass_context
def main(ctx: click.Context, matrix_path: str | None) -> None:
    """Known-good GPU container images from one matrix.yaml."""
    ctx.obj = Workspace.locate(matrix_path)


select_option = click.option("--select", "select_expr", metavar="EXPR", help="key=glob filters, e.g. stack=torch,base=cuda12.*")


@main.command()
@select_option
@click.option("--format", "fmt", type=click.Choice(["table", "json", "github"]), default="table", show_default=True)
@click.option("--explain", is_flag=True, help="also list skipped combinations with reasons")
@click.pass_obj
@user_errors
def plan(ws: Workspace, select_expr: str | None, fmt: str, explain: bool) -> None:
    """Expand and validate the matrix; print the images it yields."""
    images = ws.selected(select_expr, use_default=False)
    if fmt == "json":
        emit_json(plan_json(images, ws.decided.skipped))
    elif fmt == "github":
        click.echo(json.dumps(github_matrix(images), sort_keys=True))
    else:
        print_table(out, ws.decided, images, explain)


@main.command()
@click.option("--check", is_flag=True, help="write nothing; exit 1 listing stale files")
@click.option("--out", "out_dir", metavar="DIR", help="output folder (default images/ beside the matrix)")
@click.pass_obj
@user_errors
def render(ws: Workspace, check: bool, out_dir: str | None) -> None:
    """Write images/<id>/ build contexts from the plan."""
    target = Path(out_dir).absolute() if out_dir else ws.images_dir
    expected = rendered_tree(ws)
    if check:
        stale = render_mod.stale(target, expected)
        for path in stale:
            click.echo(f"stale: {target.name}/{path}")
        if stale:
            click.echo(f"{len(stale)} stale files; run `builder render`", err=True)
            sys.exit(1)
        click.echo(f"{target.name}/ is current ({len(ws.decided.images)} images)", err=True)
        return
    changed = render_mod.write_tree(target, expected)
    click.echo(f"rendered {len(ws.decided.images)} images into {target}; {len(changed)} files changed", err=True)


def rendered_tree(ws: Workspace) -> dict[str, bytes]:
    env = render_mod.environment([ws.templates])
    probe = render_mod.probe_bytes()
    name = ws.matrix_path.name
    contexts = {s.id: render_mod.context_files(s, env, ws.matrix.source, probe, name) for s in ws.decided.images}
    entries = {s.id: image_entry(replace(s, content_hash=render_mod.content_hash(contexts[s.id]))) for s in ws.decided.images}
    return render_mod.tree(entries, contexts)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="print the probe's JSON document")
@click.option("--timeout", default=180, show_default=True, help="seconds per framework")
@click.option("--require-gpu", is_flag=True, help="no GPU is a failure, not a skip")
def probe(as_json: bool, timeout: int, require_gpu: bool) -> None:
    """Run the hello-GPU probes in this Python environment (no Docker)."""
    import subprocess

    args = [sys.executable, str(render_mod.PROBE), "--timeout", str(timeout)]
    args += ["--json"] if as_json else []
    args += ["--require-gpu"] if require_gpu else []
    sys.exit(subprocess.call(args))


def _gpu_option(func: F) -> F:
    return click.option(
        "--gpu",
        type=click.Choice(["auto", "require", "off"]),
        default="auto",
        show_default=True,
        help="attach GPUs: if present / always (fail without) / never",
    )(func)


def _build_options(func: F) -> F:
    options = [
        click.option("-j", "--jobs", default=1, show_default=True, help="images built in parallel"),
        click.option("--force", is_flag=True, help="rebuild even when the content hash is already built"),
        click.option("--no-cache", is_flag=True, help="with --force: do not use the engine's layer cache either"),
        click.option("--keep-going", is_flag=True, help="build the rest after a failure"),
        click.option("--push", is_flag=True, help="push built images to the registry"),
        click.option(
            "--ca-bundle", metavar="FILE", help="PEM bundle pip/apt trust during the build (or $BUILDER_CA_BUNDLE, build.ca_bundle)"
        ),
        click.option("--no-host-settings", is_flag=True, help="do not take the host's CA bundle and pip sources"),
        click.option("--wheelhouse", metavar="DIR", multiple=True, help="folder of wheels; pinned ones are copied into the build"),
        click.option("--index-url", metavar="URL", help="primary package index for the build (company mirror)"),
        click.option("--extra-index-url", metavar="URL", multiple=True, help="more package indexes for the build"),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _options(kwargs: dict[str, Any]) -> Any:
    from builder.jobs import BuildOptions

    return BuildOptions(
        jobs=kwargs["jobs"],
        force=kwargs["force"],
        no_cache=kwargs["no_cache"],
        keep_going=kwargs["keep_going"],
        push=kwargs["push"],
        ca_bundle=kwargs["ca_bundle"],
        use_host=not kwargs["no_host_settings"],
        wheelhouse=tuple(kwargs["wheelhouse"]),
        index_url=kwargs["index_url"],
        extra_index_urls=tuple(kwargs["extra_index_url"]),
    )


def _exit_for(ok: bool) -> None:
    sys.exit(0 if ok else 1)


@main.command()
@select_option
@_build_options
@click.pass_obj
@user_errors
def build(ws: Workspace, /, select_expr: str | None, **kwargs: Any) -> None:
    """Build what is stale (default: the matrix's defaults.select)."""
    from builder import jobs

    results = jobs.build_images(ws, ws.selected(select_expr, use_default=True), _options(kwargs), out, err)
    _exit_for(all(r.status in ("built", "up-to-date") for r in results))


@main.command()
@select_option
@_gpu_option
@click.option("--timeout", "timeout_s", default=600, show_default=True, help="seconds per image before the container is killed")
@click.pass_obj
@user_errors
def test(ws: Workspace, select_expr: str | None, gpu: str, timeout_s: int) -> None:
    """Smoke-test built images in locked-down containers; results in build/results/."""
    from builder import jobs

    results = jobs.test_images(ws, ws.selected(select_expr, use_default=True), gpu, timeout_s, out, err)
    _exit_for(all(r.verdict in ("passed", "gpu-skipped") for r in results))


@main.command()
@select_option
@_build_options
@_gpu_option
@click.option("--timeout", "timeout_s", default=600, show_default=True, help="seconds per image for the smoke tests")
@click.pass_obj
@user_errors
def run(ws: Workspace, /, select_expr: str | None, gpu: str, timeout_s: int, **kwargs: Any) -> None:
    """The main job: check images/ is current, build (bootstrapping local bases), smoke-test, summarize."""
    from builder import jobs

    expected = rendered_tree(ws)
    stale = render_mod.stale(ws.images_dir, expected)
    if stale:
        raise UserError(f"images/ is stale ({len(stale)} files, e.g. {stale[0]}); run `builder render` and commit the result")
    specs = ws.selected(select_expr, use_default=True)
    built = jobs.build_images(ws, specs, _options(kwargs), out, err)
    ready = tuple(s for s, r in zip(specs, built, strict=True) if r.status in ("built", "up-to-date"))
    tested = jobs.test_images(ws, ready, gpu, timeout_s, out, err) if ready else []
    ok = len(ready) == len(specs) and all(r.verdict in ("passed", "gpu-skipped") for r in tested)
    _exit_for(ok)


@main.command()
@select_option
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.pass_obj
@user_errors
def doctor(ws: Workspace, select_expr: str | None, fmt: str) -> None:
    """What this host can run: engine, GPU vendor, driver, runtime, a verdict per planned image."""
    from builder import doctor as doctor_mod
    from builder import hostinfo

    host = hostinfo.gather()
    checks = doctor_mod.host_checks(host)
    images = ws.selected(select_expr, use_default=False) if ws.matrix_path.exists() else ()
    verdicts = doctor_mod.image_verdicts(host, images)
    if fmt == "json":
        emit_json(doctor_mod.report_json(host, checks, verdicts))
    else:
        doctor_mod.render_table(out, host, checks, verdicts)
    _exit_for(not any(c.status == "fail" for c in checks) and not any(v.status == "fail" for v in verdicts))


if __name__ == "__main__":
    main()
