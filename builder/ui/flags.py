"""The options several commands share, as field factories (--select, --catalog, --gpu, ...) and as
records of their own (the package sources, a build's flags, the host a fit is judged for, the
evidence check), each with its one mapping to what the use-cases take."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from builder.model.sources import Sources
from builder.ui.options import argument, group, option
from builder.util.errors import UserError

if TYPE_CHECKING:
    from builder.catalog.store import Catalog
    from builder.fit.host import FitHost
    from builder.publish.signing import Signers
    from builder.usecases.build import BuildOptions

MAX_JOBS = 32  # parallel builds; more only thrash the engine and the disk
MAX_TIMEOUT_S = 24 * 3600


def select() -> Any:
    return option(
        "--select",
        "select_expr",
        metavar="EXPR",
        help="key=value terms (globs; a version matches its releases), e.g. stack=torch,base=cuda12.* or torch=2.14",
    )


def catalog() -> Any:
    return option("--catalog", "catalog_dir", metavar="DIR", help="the catalog folder (default: catalog/ beside matrix.yaml)")


def gpu() -> Any:
    return option(
        "--gpu",
        type=click.Choice(["auto", "require", "off"]),
        default="auto",
        show_default=True,
        help="attach GPUs: if present / always (fail without) / never",
    )


def smoke_timeout(help: str) -> Any:
    return option("--timeout", "timeout_s", default=600, show_default=True, type=click.IntRange(1, MAX_TIMEOUT_S), help=help)


def jobs() -> Any:
    return option("-j", "--jobs", default=1, show_default=True, type=click.IntRange(1, MAX_JOBS), help="images built in parallel")


def table_or_json() -> Any:
    return option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)


def index_json() -> Any:
    return option(
        "--index-json-url",
        metavar="URL",
        envvar="BUILDER_INDEX_JSON_URL",
        help="the package index's JSON API (default https://pypi.org/pypi; or a mirror)",
    )


def allowed_signers() -> Any:
    return option(
        "--allowed-signers",
        "allowed_signers",
        type=click.Path(path_type=Path),
        metavar="FILE",
        help="OpenSSH allowed_signers the evidence is checked against (default: $BUILDER_ALLOWED_SIGNERS, else CATALOG/allowed_signers)",
    )


def query(required: bool = False) -> Any:
    return argument("query", nargs=-1, required=required)


@dataclass(frozen=True, kw_only=True)
class SourceFlags:
    """Where builds and locks get packages from: `Sources`, the one record BuildOptions and LockOptions hold."""

    ca_bundle: str | None = option(
        "--ca-bundle", metavar="FILE", help="PEM bundle pip/apt/uv trust (or $BUILDER_CA_BUNDLE, build.ca_bundle)"
    )
    no_host_settings: bool = option("--no-host-settings", is_flag=True, help="do not take the host's CA bundle and pip sources")
    wheelhouse: tuple[str, ...] = option(
        "--wheelhouse", metavar="DIR", multiple=True, help="folder of wheels; pinned ones are used from there"
    )
    index_url: str | None = option("--index-url", metavar="URL", help="primary package index (company mirror)")
    extra_index_url: tuple[str, ...] = option("--extra-index-url", metavar="URL", multiple=True, help="more package indexes")

    def sources(self) -> Sources:
        return Sources(
            index_url=self.index_url,
            extra_index_urls=tuple(self.extra_index_url),
            wheelhouse=tuple(self.wheelhouse),
            ca_bundle=self.ca_bundle,
            use_host=not self.no_host_settings,
        )


@dataclass(frozen=True, kw_only=True)
class BuildFlags:
    jobs: int = jobs()
    force: bool = option("--force", is_flag=True, help="rebuild even when the content hash is already built")
    no_cache: bool = option("--no-cache", is_flag=True, help="with --force: do not use the engine's layer cache either")
    keep_going: bool = option("--keep-going", is_flag=True, help="build the rest after a failure")
    push: bool = option("--push", is_flag=True, hidden=True, expose_value=True)  # gone: refused with the way to publish
    sources: SourceFlags = group(SourceFlags)

    def options(self) -> BuildOptions:
        from builder.usecases.build import BuildOptions

        if self.push:
            raise click.UsageError(
                "--push is gone: nothing untested is pushed; run `builder test`, then `builder publish` (it pushes images that passed)"
            )
        return BuildOptions(
            jobs=self.jobs, force=self.force, no_cache=self.no_cache, keep_going=self.keep_going, sources=self.sources.sources()
        )


@dataclass(frozen=True, kw_only=True)
class FitHostFlags:
    """The host a fit is judged for (`builder fit`, `pull`, `doctor --image`): detected, or these in its place."""

    gpu_cc: tuple[str, ...] = option(
        "--gpu-cc",
        "gpu_cc",
        multiple=True,
        metavar="X.Y",
        help="a GPU's compute capability, e.g. 8.6 (repeat for each GPU; default: nvidia-smi's)",
    )
    driver: str | None = option("--driver", metavar="VERSION", help="the NVIDIA driver, e.g. 550.54.15 (default: nvidia-smi's)")
    gfx: tuple[str, ...] = option(
        "--gfx",
        "gfx",
        multiple=True,
        metavar="gfxNNN",
        help="an AMD GPU's target as rocminfo names it, e.g. gfx942 (repeat for each GPU; default: kfd's)",
    )
    cpu: str | None = option("--arch", "cpu", metavar="amd64|arm64", help="the host's CPU architecture (default: uname -m)")
    vendor: str | None = option("--vendor", type=click.Choice(["nvidia", "amd", "none"]), help="the host's GPU vendor (default: detected)")
    brand: str | None = option(
        "--brand",
        metavar="BRAND",
        help="the NVIDIA GPUs' product brand as the container runtime names it, e.g. nvidia, tesla, geforce "
        "(default: nvidia-smi -q's; it decides images whose NVIDIA_REQUIRE_CUDA admits older branches by brand)",
    )

    def host(self) -> FitHost:
        """The host they describe (the detected one where they say nothing)."""
        from builder.fit import host as hosts

        return hosts.host_for(gpu_cc=self.gpu_cc, driver=self.driver, arch=self.cpu, vendor=self.vendor, brand=self.brand, gfx=self.gfx)

    def given(self) -> list[str]:
        """The options given, as typed (for a message that they would be ignored)."""
        given = {
            "--gpu-cc": bool(self.gpu_cc),
            "--gfx": bool(self.gfx),
            "--driver": self.driver is not None,
            "--arch": self.cpu is not None,
            "--vendor": self.vendor is not None,
            "--brand": self.brand is not None,
        }
        return [name for name, present in given.items() if present]


@dataclass(frozen=True, kw_only=True)
class VerifyFlags:
    """The one evidence check of pull, catalog --verify and the env commands (publish/verify.py's `signers`)."""

    allowed_signers: Path | None = allowed_signers()
    no_verify: bool = option(
        "--no-verify", "no_verify", is_flag=True, help="do not check the records' signatures (the output says `not verified`)"
    )

    def one_of(self) -> None:
        if self.no_verify and self.allowed_signers is not None:
            raise UserError("--no-verify checks no signatures, so --allowed-signers would be ignored: drop one of them")

    def signers(self, catalog: Catalog) -> Signers:
        """The signers to check against (exit 2 when the options contradict or the file cannot be used)."""
        from builder.publish.verify import signers

        self.one_of()
        return signers(catalog, self.allowed_signers, not self.no_verify)
