"""The engine-side jobs behind `build`, `test` and `run`: glue between the CLI and the modules.

Progress goes to stderr (rich), summaries and data to stdout.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from builder import engine, hostinfo, push, settings
from builder.build import Builder, BuildResult, check_rendered, git_revision
from builder.records import ImageSpec
from builder.testrun import SmokeResult, merge_junit, smoke_one
from builder.workspace import Workspace

_STYLE = {
    "built": "green",
    "up-to-date": "green",
    "passed": "green",
    "gpu-skipped": "yellow",
    "failed": "red",
    "interrupted": "red",
    "not-built": "yellow",
}


@dataclass(frozen=True)
class BuildOptions:
    jobs: int = 1
    force: bool = False
    keep_going: bool = False
    push: bool = False
    ca_bundle: str | None = None
    use_host: bool = True
    wheelhouse: tuple[str, ...] = ()
    index_url: str | None = None
    no_cache: bool = False
    extra_index_urls: tuple[str, ...] = ()


def _styled(status: str) -> str:
    return f"[{_STYLE.get(status, 'white')}]{status}[/]"


def build_images(ws: Workspace, specs: Sequence[ImageSpec], options: BuildOptions, out: Console, err: Console) -> list[BuildResult]:
    check_rendered(specs, ws.images_dir)
    chosen = settings.resolve(
        os.environ,
        ca_bundle=options.ca_bundle,
        matrix_ca_bundle=ws.matrix.ca_bundle,
        use_host=options.use_host,
        wheelhouse=options.wheelhouse,
        index_url=options.index_url,
        extra_index_urls=options.extra_index_urls,
    )
    client = engine.connect()  # fail with the one-line fix before any progress is drawn; reused for --push
    builder = Builder(
        make_client=lambda: engine.connect(timeout=3600),
        settings=chosen,
        images_dir=ws.images_dir,
        build_dir=ws.build_dir,
        revision=git_revision(ws.root),
        no_cache=options.no_cache,
    )
    err.print(f"CA bundle: {chosen.ca_bundle or 'none'}; local wheel folders: {', '.join(map(str, chosen.pip.local_dirs)) or 'none'}")
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as progress:
        overall = progress.add_task("building", total=len(specs))
        steps: dict[str, Any] = {}

        def on_line(image: str, line: str) -> None:
            if line.startswith("Step "):
                task = steps.get(image)
                if task is None:
                    task = steps[image] = progress.add_task(image, total=None)
                progress.update(task, description=f"{image}: {line.strip()[:70]}")

        def on_done(result: BuildResult) -> None:
            progress.advance(overall)
            if result.id in steps:
                progress.remove_task(steps.pop(result.id))
            progress.console.print(f"{_styled(result.status)} {result.id} ({result.seconds:.1f}s)")

        builder.on_line = on_line
        results = builder.build_all(specs, jobs=options.jobs, force=options.force, keep_going=options.keep_going, on_done=on_done)
    if options.push:
        by_id = {s.id: s for s in specs}
        for result in results:
            if result.status in ("built", "up-to-date"):
                push.push_image(client, by_id[result.id].tag, log=lambda line: err.print(line, highlight=False))
    _write_json(ws, "build.json", [asdict(r) for r in results])
    print_build_summary(out, results)
    return results


def print_build_summary(out: Console, results: Sequence[BuildResult]) -> None:
    table = Table(title="build", title_justify="left")
    for column in ("image", "status", "seconds", "size MB", "attempts", "log / cause"):
        table.add_column(column, overflow="fold")
    for r in results:
        detail = r.cause or r.error or (r.log or "")
        if r.fix:
            detail += f" -> {r.fix}"
        table.add_row(r.id, _styled(r.status), f"{r.seconds:.1f}", "" if r.size_mb is None else f"{r.size_mb:.0f}", str(r.attempts), detail)
    out.print(table)


def test_images(ws: Workspace, specs: Sequence[ImageSpec], mode: str, timeout_s: int, out: Console, err: Console) -> list[SmokeResult]:
    client = engine.connect()
    host = hostinfo.gather(engine=lambda: hostinfo.EngineFacts(True, engine.engine_version(client), tuple(engine.gpu_runtimes(client))))
    results_dir = ws.build_dir / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for spec in specs:
        if engine.image_labels(client, spec.tag) is None:
            result = SmokeResult(
                spec.id,
                spec.tag,
                "not-built",
                {"attached": False, "reason": "image not built"},
                0.0,
                failures=("run `builder build` first",),
            )
        else:
            err.print(f"testing {spec.id} ...")
            result = smoke_one(client, spec, host, mode, timeout_s, results_dir)
        err.print(f"{_styled(result.verdict)} {spec.id} ({result.seconds:.1f}s)")
        results.append(result)
    merge_junit(results_dir, [s.id for s in specs])
    print_test_summary(out, results)
    return results


def print_test_summary(out: Console, results: Sequence[SmokeResult]) -> None:
    table = Table(title="smoke tests", title_justify="left")
    for column in ("image", "verdict", "frameworks", "gpu", "tests", "seconds", "diagnosis"):
        table.add_column(column, overflow="fold")
    for r in results:
        frameworks = " ".join(
            f"{name}:{res.get('status')}"
            for name, res in ((r.probe or {}).get("frameworks") or {}).items()
            if res.get("status") != "not-installed"
        )
        tests = (
            f"{r.tests.get('tests', 0) - r.tests.get('failures', 0) - r.tests.get('errors', 0)}/{r.tests.get('tests', 0)}"
            if r.tests
            else "-"
        )
        diagnosis = "; ".join(f"{d.get('framework', '')}: {d['cause']} -> {d['fix']}" for d in r.diagnoses) or "; ".join(r.failures)[:300]
        table.add_row(r.id, _styled(r.verdict), frameworks, r.gpu.get("reason", ""), tests, f"{r.seconds:.1f}", diagnosis)
    out.print(table)


def _write_json(ws: Workspace, name: str, data: Any) -> None:
    path = ws.build_dir / "results" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
