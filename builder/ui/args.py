"""Each command's options as one record (builder/ui/options.py), and its one mapping to the
use-case's options: the click declarations are the command line's contract (names, defaults, help
texts), so they stay as they were written; what a combination of them means is said here once.

To add an option: one field in the command's record (or in a shared group of builder/ui/flags.py,
for every command holding it), named as the option's parameter, and its use in the record's
mapping; cli.py does not change. Use-case modules are imported inside the mappings: `builder plan`
never loads the Docker SDK.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from builder.ui.flags import (
    MAX_JOBS,
    MAX_TIMEOUT_S,
    BuildFlags,
    FitHostFlags,
    SourceFlags,
    VerifyFlags,
    allowed_signers,
    catalog,
    gpu,
    index_json,
    jobs,
    query,
    select,
    smoke_timeout,
    table_or_json,
)
from builder.ui.options import group, option
from builder.util.errors import UserError

if TYPE_CHECKING:
    from builder.catalog.store import Catalog
    from builder.publish.signing import Signers
    from builder.usecases.clean import CleanOptions
    from builder.usecases.fit import FitAsked, Reader
    from builder.usecases.lock import LockOptions
    from builder.usecases.nightly import NightlyOptions
    from builder.usecases.publish import PublishOptions
    from builder.usecases.pull import FitCheck
    from builder.usecases.test import TestOptions
    from builder.usecases.updates import UpdatesOptions


# -- plan, render, probe -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PlanArgs:
    select_expr: str | None = select()
    fmt: str = option(
        "--format",
        "fmt",
        type=click.Choice(["table", "json", "github", "bake"]),
        default="table",
        show_default=True,
        help="bake: a docker-bake.json for `docker buildx bake` (run it from this folder)",
    )
    explain: bool = option("--explain", is_flag=True, help="also list skipped combinations with reasons")
    contexts_dir: str | None = option(
        "--contexts", "contexts_dir", metavar="DIR", help="with --format bake: where the complete build contexts go (default build/bake)"
    )
    layers: bool = option(
        "--layers",
        is_flag=True,
        help="with --format bake: the canonical images too, their contexts with the venv layer made from the lock (build/bake-canonical)",
    )

    def contexts(self) -> str | None:
        if self.contexts_dir is not None and self.fmt != "bake":
            raise click.UsageError("--contexts goes with --format bake (where its build contexts are written)")
        if self.layers and self.fmt != "bake":
            raise click.UsageError("--layers goes with --format bake (the canonical images' contexts)")
        return self.contexts_dir


@dataclass(frozen=True, kw_only=True)
class RenderArgs:
    check: bool = option("--check", is_flag=True, help="write nothing; exit 1 listing stale files")
    out_dir: str | None = option("--out", "out_dir", metavar="DIR", help="output folder (default images/ beside the matrix)")
    force: bool = option("--force", is_flag=True, help="replace generated files that were edited by hand (never other files)")


@dataclass(frozen=True, kw_only=True)
class ProbeArgs:
    as_json: bool = option("--json", "as_json", is_flag=True, help="print the probe's JSON document")
    timeout: int = option("--timeout", default=180, show_default=True, type=click.IntRange(1, MAX_TIMEOUT_S), help="seconds per framework")
    require_gpu: bool = option("--require-gpu", is_flag=True, help="no GPU is a failure, not a skip")

    def argv(self, python: str) -> list[str]:
        """The probe run by `python` (this environment's), with these options."""
        from builder.render.context import PROBE

        return [
            python,
            str(PROBE),
            "--timeout",
            str(self.timeout),
            *(["--json"] if self.as_json else []),
            *(["--require-gpu"] if self.require_gpu else []),
        ]


# -- build, test, run, lock, clean ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BuildArgs:
    select_expr: str | None = select()
    build: BuildFlags = group(BuildFlags)


@dataclass(frozen=True, kw_only=True)
class BakeArgs:
    select_expr: str | None = select()
    builder: str | None = option(
        "--builder", metavar="NAME", help="the buildx builder to bake on (a remote or Kubernetes one; default: buildx's current one)"
    )


@dataclass(frozen=True, kw_only=True)
class TestArgs:
    __test__ = False  # not a pytest class
    select_expr: str | None = select()
    gpu: str = gpu()
    timeout_s: int = smoke_timeout("seconds per image before the container is killed")
    base: str | None = option(
        "--base",
        metavar="NAME",
        default=None,
        help="test this bootstrapped ROCm base itself (bootstrapped first): HIP checks up to the device call, its measured AMD fit",
    )

    def options(self) -> TestOptions:
        from builder.usecases.test import TestOptions

        return TestOptions(self.gpu, self.timeout_s)


@dataclass(frozen=True, kw_only=True)
class RunArgs:
    select_expr: str | None = select()
    build: BuildFlags = group(BuildFlags)
    gpu: str = gpu()
    timeout_s: int = smoke_timeout("seconds per image for the smoke tests")

    def test(self) -> TestOptions:
        from builder.usecases.test import TestOptions

        return TestOptions(self.gpu, self.timeout_s)


@dataclass(frozen=True, kw_only=True)
class LockArgs:
    select_expr: str | None = select()
    check: bool = option("--check", is_flag=True, help="offline: exit 1 listing locks that are missing or no longer match their inputs")
    against_index: bool = option(
        "--index",
        "against_index",
        is_flag=True,
        help="with --check, online: also ask the lock's sources that every hash it allows is a file they publish (docs/sources.md)",
    )
    upgrade: bool = option("--upgrade", is_flag=True, help="re-resolve every selected image to the newest versions its pins allow")
    jobs: int = option("-j", "--jobs", default=2, show_default=True, type=click.IntRange(1, MAX_JOBS), help="resolutions in parallel")
    keep_going: bool = option("--keep-going", is_flag=True, help="lock the rest after a failure, and list what failed")
    no_measure: bool = option(
        "--no-measure", is_flag=True, help="do not measure the CUDA images' fits from their locked wheels (fit.json stays missing or stale)"
    )
    sources: SourceFlags = group(SourceFlags)

    def options(self) -> LockOptions:
        """What `builder lock` (not --check) locks with; --index alone is refused."""
        from builder.usecases.lock import LockOptions

        if self.against_index:
            raise UserError("--index goes with --check: `builder lock --check --index` asks the lock's sources about its hashes")
        return LockOptions(
            jobs=self.jobs,
            upgrade=self.upgrade,
            keep_going=self.keep_going,
            include_unlocked=self.select_expr is not None,
            sources=self.sources.sources(),
            measure=not self.no_measure,
        )


@dataclass(frozen=True, kw_only=True)
class CleanArgs:
    stale: bool = option("--stale", is_flag=True, help="also remove this workspace's images of this matrix that the plan no longer lists")
    everything: bool = option(
        "--all",
        "everything",
        is_flag=True,
        help="also remove its current images, the CUDA line images and the bootstrapped bases nothing else is built on",
    )
    orphans: bool = option(
        "--orphans",
        is_flag=True,
        help="also remove what no workspace owns any more (a checkout that is gone, older versions' leftovers), listed apart",
    )
    dry_run: bool = option("--dry-run", is_flag=True, help="list what would be removed, remove nothing")

    def options(self) -> CleanOptions:
        from builder.usecases.clean import CleanOptions

        return CleanOptions(stale=self.stale, everything=self.everything, orphans=self.orphans, dry_run=self.dry_run)


# -- publish, pull, fit, catalog, report ---------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PublishArgs:
    select_expr: str | None = select()
    registry: str | None = option(
        "--registry", metavar="REPO", help="repository to push to, e.g. 127.0.0.1:5000/gpu-images (default: matrix.yaml's registry)"
    )
    dry_run: bool = option("--dry-run", is_flag=True, help="say what would be pushed and recorded; push and write nothing")
    accept_gpu_skipped: bool = option(
        "--accept-gpu-skipped", is_flag=True, help="also publish CUDA/ROCm images tested without a GPU (the record says so)"
    )
    push_timeout: float | None = option(
        "--push-timeout",
        "push_timeout",
        type=click.FloatRange(min=1, max=1e6),
        metavar="SECONDS",
        help="a push that has not finished by then is cancelled (default: $BUILDER_PUSH_DEADLINE_S or 3600)",
    )
    sign_key: Path | None = option(
        "--sign-key",
        "sign_key",
        type=click.Path(path_type=Path),
        envvar="BUILDER_SIGN_KEY",
        metavar="KEY",
        help="SSH private key: sign each attestation and record with ssh-keygen -Y sign (default: $BUILDER_SIGN_KEY; unsigned without)",
    )
    catalog_dir: str | None = catalog()

    def options(self) -> PublishOptions:
        from builder.usecases.publish import PublishOptions

        return PublishOptions(
            registry=self.registry,
            dry_run=self.dry_run,
            accept_gpu_skipped=self.accept_gpu_skipped,
            push_deadline_s=self.push_timeout,
            sign_key=self.sign_key,
        )


@dataclass(frozen=True, kw_only=True)
class PullArgs:
    query: tuple[str, ...] = query(required=True)
    host: FitHostFlags = group(FitHostFlags)
    no_fit_check: bool = option("--no-fit-check", is_flag=True, help="pull even a record that does not fit this host (the output says so)")
    catalog_dir: str | None = catalog()
    evidence: VerifyFlags = group(VerifyFlags)

    def fit_check(self) -> FitCheck:
        from builder.usecases.pull import FitCheck

        given = self.host.given()
        if self.no_fit_check and given:
            raise UserError(f"--no-fit-check checks nothing, so {', '.join(given)} would be ignored: drop one of them")
        return FitCheck(skip=True) if self.no_fit_check else FitCheck(self.host.host())


@dataclass(frozen=True, kw_only=True)
class FitArgs:
    query: tuple[str, ...] = query()
    host: FitHostFlags = group(FitHostFlags)
    libraries: tuple[Path, ...] = option(
        "--library",
        "libraries",
        multiple=True,
        type=click.Path(exists=True, path_type=Path),
        help="judge this library's own device code (or each library's under a folder) instead of catalog records (repeatable)",
    )
    reader: str = option(
        "--reader", type=click.Choice(["fatbin", "cuobjdump"]), default="fatbin", show_default=True, help="how --library is read"
    )
    planned: bool = option(
        "--planned",
        is_flag=True,
        help="judge the matrix's planned images (their fit measured from their locked wheels), not catalog records",
    )
    fmt: str = table_or_json()
    catalog_dir: str | None = catalog()

    def asked(self) -> FitAsked:
        from builder.usecases.fit import FitAsked

        if self.libraries and (self.query or self.planned):
            raise UserError("give QUERY (catalog records, or planned images with --planned) or --library (files), not both")
        if self.planned and self.catalog_dir:
            raise UserError("--planned judges the matrix's planned images, not a catalog: drop --catalog or --planned")
        reader: Reader = "cuobjdump" if self.reader == "cuobjdump" else "fatbin"
        return FitAsked(" ".join(self.query), self.libraries, reader, self.planned, self.catalog_dir)


@dataclass(frozen=True, kw_only=True)
class CatalogArgs:
    query: tuple[str, ...] = query()
    fmt: str = table_or_json()
    verify: bool = option(
        "--verify",
        is_flag=True,
        help="check each listed record's signatures, and its tags and evidence in its registry (exit 1 on any mismatch)",
    )
    catalog_dir: str | None = catalog()
    evidence: VerifyFlags = group(VerifyFlags)

    def signers(self, store: Catalog) -> Signers | None:
        """Who --verify checks against; None without --verify (whose options it refuses)."""
        if (self.evidence.allowed_signers is not None or self.evidence.no_verify) and not self.verify:
            raise UserError("--allowed-signers and --no-verify say how --verify checks; add --verify")
        return self.evidence.signers(store) if self.verify else None


@dataclass(frozen=True, kw_only=True)
class ReproduceArgs:
    query: tuple[str, ...] = query(required=True)
    catalog_dir: str | None = catalog()
    allowed_signers: Path | None = allowed_signers()


@dataclass(frozen=True, kw_only=True)
class ReportArgs:
    markdown_path: str | None = option(
        "--markdown", "markdown_path", metavar="FILE", help="default: docs/support-matrix.md beside matrix.yaml"
    )
    html_path: str | None = option("--html", "html_path", metavar="FILE", help="default: build/report/index.html")
    catalog_dir: str | None = catalog()


# -- updates, nightly, doctor --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class UpdatesArgs:
    do_apply: bool = option(
        "--apply", "do_apply", is_flag=True, help="add the releases the rules can place to matrix.yaml (comments and order kept)"
    )
    max_new: int = option(
        "--max-new",
        type=click.IntRange(min=1),
        default=3,
        show_default=True,
        help="with --apply: add at most this many releases per framework (the newest)",
    )
    fmt: str = table_or_json()
    index_json_url: str | None = index_json()
    ca_bundle: str | None = option("--ca-bundle", metavar="FILE", help="PEM bundle to trust for the index (or $BUILDER_CA_BUNDLE)")

    def options(self) -> UpdatesOptions:
        from builder.usecases.updates import UpdatesOptions

        return UpdatesOptions(apply=self.do_apply, max_new=self.max_new, index_json_url=self.index_json_url, ca_bundle=self.ca_bundle)


@dataclass(frozen=True, kw_only=True)
class NightlyArgs:
    select_expr: str | None = select()
    no_updates: bool = option("--no-updates", is_flag=True, help="do not ask the index for new releases (locks still upgrade)")
    no_apply: bool = option("--no-apply", is_flag=True, help="report new releases, do not add them to matrix.yaml")
    no_index_check: bool = option(
        "--no-index-check", is_flag=True, help="do not ask the locks' sources about their hashes (`builder lock --check --index`)"
    )
    index_json_url: str | None = index_json()
    registry: str | None = option("--registry", metavar="REPO", help="repository to publish to (default: matrix.yaml's registry)")
    no_publish: bool = option("--no-publish", is_flag=True, help="build and test, publish nothing")
    accept_gpu_skipped: bool = option("--accept-gpu-skipped", is_flag=True, help="also publish CUDA/ROCm images tested without a GPU")
    summary_path: str | None = option(
        "--summary",
        "summary_path",
        metavar="FILE",
        help="the Markdown summary (default build/nightly/summary.md; CI: $GITHUB_STEP_SUMMARY)",
    )
    jobs: int = jobs()
    gpu: str = gpu()
    timeout_s: int = smoke_timeout("seconds per image for the smoke tests")
    rebuild_past_eol: bool = option(
        "--rebuild-past-eol",
        "rebuild_past_eol",
        is_flag=True,
        help="keep rebuilding images with a line (Python, OS, CUDA, framework) past its end of life (default: stop, and say so)",
    )
    catalog_dir: str | None = catalog()
    sources: SourceFlags = group(SourceFlags)

    def options(self) -> NightlyOptions:
        from builder.usecases.build import BuildOptions
        from builder.usecases.nightly import NightlyOptions
        from builder.usecases.test import TestOptions

        return NightlyOptions(
            select=self.select_expr,
            updates=not self.no_updates,
            apply=not self.no_apply,
            index_json_url=self.index_json_url,
            build=BuildOptions(jobs=self.jobs, sources=self.sources.sources()),
            test=TestOptions(self.gpu, self.timeout_s),
            publish=not self.no_publish,
            registry=self.registry,
            accept_gpu_skipped=self.accept_gpu_skipped,
            catalog_dir=self.catalog_dir,
            rebuild_past_eol=self.rebuild_past_eol,
            check_index=not self.no_index_check,
            summary=self.summary_path,
        )


@dataclass(frozen=True, kw_only=True)
class DoctorArgs:
    select_expr: str | None = select()
    image_ref: str | None = option(
        "--image", "image_ref", metavar="REF", help="judge this local image (a name, id or digest builder labelled) for this host"
    )
    host: FitHostFlags = group(FitHostFlags)
    fmt: str = table_or_json()

    def image(self) -> str | None:
        """The --image to judge (None: this host and the planned images); the host options go only with it."""
        given = self.host.given()
        if self.image_ref is None and given:
            raise UserError(f"{', '.join(given)} describe the host for --image: give --image REF too")
        if self.image_ref is not None and self.select_expr is not None:
            raise UserError("--select picks planned images, --image one local image: give one of them")
        return self.image_ref
