"""Where packages come from: the sources a person names (Sources) and what a build or a lock
resolves them to (BuildSettings: the CA bundle, the proxies and pip's sources).

Records only, with the foundations: `build` and `lock` hold one Sources each instead of copying
its fields, engine/settings.py turns it into BuildSettings (reading the host's pip configuration),
and both engine/ and lock/ (uv) read those, so neither stage imports the other for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Sources:
    """The package sources given on the command line (--index-url, --extra-index-url,
    --wheelhouse, --ca-bundle, --no-host-settings), shared by `build`, `lock` and `nightly`."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    wheelhouse: tuple[str, ...] = ()
    ca_bundle: str | None = None
    use_host: bool = True  # also the host's CA bundle and pip configuration


@dataclass(frozen=True)
class PipSources:
    """Where pip looks: remote indexes go into the build; local folders feed the wheelhouse."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    local_dirs: tuple[Path, ...] = ()  # find-links folders and file:// simple indexes


@dataclass(frozen=True)
class BuildSettings:
    ca_bundle: Path | None = None
    proxies: tuple[tuple[str, str], ...] = ()
    pip: PipSources = field(default_factory=PipSources)

    @property
    def build_args(self) -> dict[str, str]:
        """Only Docker's predefined proxy args: the classic builder keeps those out of `docker history`."""
        return dict(self.proxies)
