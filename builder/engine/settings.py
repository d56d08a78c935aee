"""Build settings for corporate networks and offline builds: CA bundle, proxies, pip sources.

By default a build trusts what the host trusts and uses the host's pip sources (environment
and pip config files); `--no-host-settings` turns that off. Nothing here touches Docker.
"""

from __future__ import annotations

import configparser
import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlsplit

from builder.engine import secrets
from builder.model.sources import BuildSettings as BuildSettings  # named here too: engine/ and its tests read them here
from builder.model.sources import PipSources as PipSources
from builder.model.sources import Sources
from builder.spec import grammar
from builder.util.errors import UserError
from builder.util.fsio import MiB, read_text

CA_ENV = "BUILDER_CA_BUNDLE"
HOST_CA_ENV = ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE")
HOST_CA_FILES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
PIP_CONFIG_LIMIT = MiB  # a pip.conf is a few lines; more is not one
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


def pip_config_files(env: Mapping[str, str]) -> list[Path]:
    """pip's own lookup order: global, user, then $PIP_CONFIG_FILE (later wins); os.devnull means none."""
    if env.get("PIP_CONFIG_FILE") == os.devnull:
        return []
    home = Path(env.get("HOME", "~")).expanduser()
    xdg = env.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    files = [Path(d) / "pip" / "pip.conf" for d in xdg] + [Path("/etc/pip.conf")]
    files += [home / ".pip" / "pip.conf", Path(env.get("XDG_CONFIG_HOME", home / ".config")) / "pip" / "pip.conf"]
    if env.get("PIP_CONFIG_FILE") and env["PIP_CONFIG_FILE"] != os.devnull:
        files.append(Path(env["PIP_CONFIG_FILE"]))
    return files


def _split(value: str) -> list[str]:
    return [part for part in value.replace("\n", " ").split() if part]


def _local_path(location: str) -> Path | None:
    if location.startswith("file://"):
        try:
            return Path(unquote(urlsplit(location).path))
        except ValueError:  # `file://[::1/x`: not a folder; check_index_url names it
            return None
    if "://" not in location:
        return Path(location).expanduser()
    return None


def read_pip_sources(env: Mapping[str, str], files: list[Path] | None = None) -> PipSources:
    """index-url, extra-index-url and find-links from pip config files and PIP_* variables."""
    values: dict[str, str] = {}
    parsers = []
    for path in files if files is not None else pip_config_files(env):
        parser = configparser.RawConfigParser()  # as pip: '%' in a URL is literal
        try:
            # bounded and regular files only: PIP_CONFIG_FILE=/dev/zero or a FIFO hung the lock for ever;
            # one that is no config file is skipped, as /dev/null (pip's own "no config") always was
            parser.read_string(read_text(Path(path), PIP_CONFIG_LIMIT, "pip configuration file"), str(path))
        except (configparser.Error, UserError):
            continue
        parsers.append(parser)
    for section in ("global", "install"):  # pip orders by section first, then by file
        for parser in parsers:
            if parser.has_section(section):
                values.update({k: v for k, v in parser.items(section) if k in ("index-url", "extra-index-url", "find-links")})
    for key in ("index-url", "extra-index-url", "find-links"):
        env_key = "PIP_" + key.upper().replace("-", "_")
        if env.get(env_key):
            values[key] = env[env_key]
    index = values.get("index-url")
    locations = _split(values.get("extra-index-url", "")) + _split(values.get("find-links", ""))
    local = [p for p in (_local_path(loc) for loc in locations) if p is not None and p.is_dir()]
    remote_extras = [loc for loc in _split(values.get("extra-index-url", "")) if _local_path(loc) is None]
    index_path = _local_path(index) if index else None
    if index_path is not None:
        local += [index_path] if index_path.is_dir() else []
        index = None
    return PipSources(index_url=index, extra_index_urls=tuple(remote_extras), local_dirs=tuple(dict.fromkeys(local)))


def host_ca_bundle(env: Mapping[str, str]) -> Path | None:
    for key in HOST_CA_ENV:
        if env.get(key) and Path(env[key]).is_file():
            return Path(env[key])
    return next((Path(p) for p in HOST_CA_FILES if Path(p).is_file()), None)


def resolve(
    env: Mapping[str, str],
    *,
    ca_bundle: str | None = None,
    matrix_ca_bundle: str | None = None,
    use_host: bool = True,
    wheelhouse: tuple[str, ...] = (),
    index_url: str | None = None,
    extra_index_urls: tuple[str, ...] = (),
) -> BuildSettings:
    """--ca-bundle, then $BUILDER_CA_BUNDLE, then matrix.yaml build.ca_bundle, then the host's."""
    chosen = ca_bundle or env.get(CA_ENV) or matrix_ca_bundle
    if chosen:
        ca: Path | None = check_ca_bundle(Path(chosen).expanduser(), chosen)
    else:
        ca = host_ca_bundle(env) if use_host else None
    for url, source in [(index_url, "--index-url"), *((u, "--extra-index-url") for u in extra_index_urls)]:
        if url is not None:
            check_index_url(url, source)
    pip = read_pip_sources(env) if use_host else PipSources()
    for url in (pip.index_url, *pip.extra_index_urls):
        if url is not None:
            check_index_url(url, "the host's pip configuration (pip config list; PIP_INDEX_URL, PIP_EXTRA_INDEX_URL)")
    extra_dirs = []
    for folder in wheelhouse:
        path = Path(folder).expanduser()
        if not path.is_dir():
            raise UserError(f"wheelhouse {folder!r} is not a folder; pass a folder of .whl files to --wheelhouse")
        extra_dirs.append(path)
    # A file:// index named on the command line is a local folder, as one in pip's configuration is:
    # its pinned wheels are served to the build from 127.0.0.1 (staging, secrets), never handed to
    # pip inside the build verbatim, where that path does not exist.
    remote_extras = []
    for url, source in [(index_url, "--index-url"), *((u, "--extra-index-url") for u in extra_index_urls)]:
        local = _local_path(url) if url is not None and url.startswith("file://") else None
        if url is None:
            continue
        if local is None:
            if source == "--extra-index-url":
                remote_extras.append(url)
            continue
        if not local.is_dir():
            raise UserError(f"{source} {url}: no such folder; give a file:// URL of a folder of wheels or a PEP 503 tree")
        extra_dirs.append(local)
        if source == "--index-url":
            index_url = None
    pip = PipSources(
        index_url=index_url or pip.index_url,
        extra_index_urls=tuple(dict.fromkeys([*remote_extras, *pip.extra_index_urls])),
        local_dirs=tuple(dict.fromkeys([*extra_dirs, *pip.local_dirs])),
    )
    proxies = tuple((k, env[k]) for k in PROXY_VARS if env.get(k))
    return BuildSettings(ca_bundle=ca, proxies=proxies, pip=pip)


def for_sources(env: Mapping[str, str], sources: Sources, matrix_ca_bundle: str | None) -> BuildSettings:
    """`resolve` for the Sources a command was given (build, lock and nightly share it)."""
    return resolve(
        env,
        ca_bundle=sources.ca_bundle,
        matrix_ca_bundle=matrix_ca_bundle,
        use_host=sources.use_host,
        wheelhouse=sources.wheelhouse,
        index_url=sources.index_url,
        extra_index_urls=sources.extra_index_urls,
    )


def check_index_url(url: str, source: str) -> None:
    """An index URL pip can use, before any build runs: http(s)://host/... or file:///path, and one
    urllib parses too (`http://[::1` or a port past 65535 passes a pattern, not a parser)."""
    if not (grammar.is_index_url(url) and _parses(url)):
        raise UserError(
            f"{source}: {secrets.redact(url)!r} is not a package index URL; give http(s)://host/path/ or file:///path/ (e.g. https://pypi.org/simple/)"
        )


def _parses(url: str) -> bool:
    try:
        parts = urlsplit(url)
        return parts.scheme == "file" or (bool(parts.hostname) and (parts.port is None or parts.port > 0))
    except ValueError:
        return False


def check_ca_bundle(path: Path, given: str) -> Path:
    """A readable file of PEM certificates, checked with the same loader pip's TLS uses."""
    where = "(--ca-bundle, $BUILDER_CA_BUNDLE or build.ca_bundle)"
    if path.is_dir():
        raise UserError(f"CA bundle {given!r} is a folder; give the PEM file inside it {where}")
    if not path.is_file():
        what = "is not a regular file (a device, FIFO or socket)" if path.exists() else "does not exist"
        raise UserError(f"CA bundle {given!r} {what}; pass a PEM file {where}")
    try:
        ssl.create_default_context(cafile=str(path))
    except (ssl.SSLError, OSError, UnicodeDecodeError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise UserError(f"CA bundle {given!r} holds no usable PEM certificates ({reason}); give a PEM bundle {where}") from None
    return path
