"""The `builder env` commands' options, one record each (builder/ui/options.py), and what every one
of them opens first: the env file, its catalog and the signers its base's evidence is checked against."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import click

from builder.ui.flags import MAX_TIMEOUT_S, SourceFlags, VerifyFlags, catalog
from builder.ui.options import group, option

if TYPE_CHECKING:
    from builder.catalog.store import Catalog
    from builder.env.envfile import EnvFile
    from builder.publish.signing import Signers
    from builder.workspace import Workspace


def env_file() -> Any:
    return option(
        "--file",
        "env_path",
        default="gpu-env.yaml",
        show_default=True,
        metavar="PATH",
        help="the env file (its own lock, named after it, is written beside it)",
    )


class EnvCommand(Protocol):
    """What every env command names: the env file, the catalog and how its evidence is checked."""

    @property
    def env_path(self) -> str: ...
    @property
    def catalog_dir(self) -> str | None: ...
    @property
    def evidence(self) -> VerifyFlags: ...


def opened(ws: Workspace, args: EnvCommand) -> tuple[EnvFile, Catalog, Signers]:
    """The env file read, its catalog, and the signers its base's evidence is checked against."""
    from builder.env.envfile import load

    env = load(Path(args.env_path).expanduser().absolute())
    catalog = ws.store.catalog(args.catalog_dir, must_exist=True)
    return env, catalog, args.evidence.signers(catalog)


@dataclass(frozen=True, kw_only=True)
class EnvLockArgs:
    env_path: str = env_file()
    upgrade: bool = option(
        "--upgrade", is_flag=True, help="move to the newest record the base names (for a digest: of the same line) and report what moved"
    )
    check: bool = option("--check", is_flag=True, help="offline: exit 1 when the lock is missing or stale (or its base's record changed)")
    catalog_dir: str | None = catalog()
    evidence: VerifyFlags = group(VerifyFlags)
    sources: SourceFlags = group(SourceFlags)


@dataclass(frozen=True, kw_only=True)
class EnvBuildArgs:
    env_path: str = env_file()
    force: bool = option("--force", is_flag=True, help="rebuild even when the image with this content hash exists")
    no_cache: bool = option("--no-cache", is_flag=True, help="build every step again (with --force: a rebuild from clean)")
    catalog_dir: str | None = catalog()
    evidence: VerifyFlags = group(VerifyFlags)
    sources: SourceFlags = group(SourceFlags)


@dataclass(frozen=True, kw_only=True)
class EnvTestArgs:
    __test__ = False  # not a pytest class
    env_path: str = env_file()
    gpu: str = option("--gpu", type=click.Choice(["auto", "require", "off"]), default="auto", show_default=True)
    timeout_s: int = option("--timeout", "timeout_s", default=600, show_default=True, type=click.IntRange(1, MAX_TIMEOUT_S))
    catalog_dir: str | None = catalog()
    evidence: VerifyFlags = group(VerifyFlags)


@dataclass(frozen=True, kw_only=True)
class EnvShellArgs:
    env_path: str = env_file()
    print_only: bool = option("--print", "print_only", is_flag=True, help="only print the `docker run` line (and write .devcontainer/)")
    catalog_dir: str | None = catalog()
    evidence: VerifyFlags = group(VerifyFlags)
