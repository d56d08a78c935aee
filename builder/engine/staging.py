"""Stage a build context: the rendered files (from memory, never copied from images/, so a link or
a hand edit there cannot reach the engine), the probe, and, for an apt step, `.builder/ca.pem`.

Every Dockerfile is one stage, so whatever a build copies in is in a layer of the image: none of
the host's build settings is written into the context. The CA bundle, the pip.conf (index URLs,
maybe credentials, the local wheels' find-links page) and local.txt (the requirements the local
wheels satisfy: an unlocked image installs them first, from the served page alone) are served to
the build from 127.0.0.1 (engine/secrets.py), as are the pinned local wheels themselves (only the
wheels the image pins, never a whole mirror). The one exception is the public CA bundle of an
image whose Python comes from apt: that step runs before there is a Python to fetch it with, so
the context keeps `.builder/ca.pem` when the Dockerfile copies it (templates/partials/python.j2).
"""

from __future__ import annotations

import functools
import hashlib
import html.parser
import json
import os
import platform
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from builder.engine.settings import BuildSettings
from builder.lock.target import ARCH
from builder.model.plan import ImageSpec
from builder.util.errors import UserError


@dataclass(frozen=True)
class Staged:
    path: Path
    wheels: tuple[str, ...]  # file names of the local wheels the build is served
    extra_index_urls: tuple[str, ...]  # what the build still needs to reach
    pip_conf_to_serve: bytes | None = None  # the build's pip.conf, served, never written
    wheel_files: tuple[Path, ...] = ()  # the local wheels themselves, served by name
    served_ca: bytes | None = None  # the CA bundle, served instead of written
    served_local: bytes | None = None  # local.txt: the requirement lines the local wheels satisfy (an unlocked image's)
    index_url: str | None = None  # the default index the build uses (None: PyPI)
    uv: bool = False  # the Dockerfile installs with the served uv (UV_DOCKERFILE_ARG): serve it a uv.toml too

    def served_pip_conf(self, wheels_url: str | None) -> bytes | None:
        """The pip.conf to serve once the wheels are published at `wheels_url` (None: nothing to serve,
        the context's .builder/pip.conf is the build's whole configuration)."""
        if not self.wheel_files:
            return self.pip_conf_to_serve
        if wheels_url is None or self.pip_conf_to_serve is None:
            raise RuntimeError("local wheels to serve but no URL or pip.conf for them")
        return self.pip_conf_to_serve + f"find-links = {wheels_url}\n".encode()

    def served_uv_conf(self, wheels_url: str | None) -> bytes | None:
        """The uv.toml to serve to a uv-installed image: the pip.conf's sources, in uv's words, and
        pip's choice among them (the best match across every index, not the first index's)."""
        if not self.uv:
            return None
        lines = ['index-strategy = "unsafe-best-match"']
        if self.index_url:
            lines.append(f"index-url = {_toml(self.index_url)}")
        if self.extra_index_urls:
            lines.append(f"extra-index-url = [{', '.join(map(_toml, self.extra_index_urls))}]")
        if wheels_url:
            lines.append(f"find-links = [{_toml(wheels_url)}]")
        return ("\n".join(lines) + "\n").encode()


def _toml(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's (quotes, backslashes, control characters, \\u escapes)."""
    return json.dumps(value)


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def _candidates(folder: Path, project: str) -> list[Path]:
    """Wheel files for `project` in a find-links folder or a file:// simple index."""
    # regular files only: a FIFO (or a link to /dev/zero) named like a wheel hung `lock` past SIGTERM
    found = [p for p in folder.glob("*.whl") if _project(p.name) == project and p.is_file()]
    page = folder / project / "index.html"
    if page.is_file():
        links = _Links()
        links.feed(page.read_text(encoding="utf-8", errors="replace"))
        for href in links.hrefs:
            target = (page.parent / unquote(urlsplit(href).path)).resolve()
            if target.name.endswith(".whl") and target.is_file():
                found.append(target)
    return found


def _project(filename: str) -> str | None:
    try:
        return str(canonicalize_name(parse_wheel_filename(filename)[0]))
    except ValueError:  # InvalidWheelFilename, or a version number over 4,300 digits
        return None


def fits(filename: str, version: Version, python: str, arch: str | None = None) -> bool:
    """Exact version, a tag this image's CPython and architecture accept (`arch`: x86_64, aarch64;
    this machine's when not given)."""
    _, wheel_version, _, tags = parse_wheel_filename(filename)
    if wheel_version != version:
        return False
    cp = "cp" + python.replace(".", "")
    arch = arch or platform.machine()
    for tag in tags:
        interp_ok = tag.interpreter in (cp, "py3", f"py{python.replace('.', '')}") or (
            tag.abi == "abi3" and tag.interpreter.startswith("cp3") and int(tag.interpreter[3:]) <= int(cp[3:])
        )
        plat_ok = tag.platform == "any" or (tag.platform.endswith(arch) and tag.platform.startswith(("manylinux", "linux")))
        if interp_ok and plat_ok:
            return True
    return False


def local_wheels(spec: ImageSpec, folders: tuple[Path, ...]) -> dict[str, Path]:
    """requirement line -> a local wheel that satisfies it exactly. A locked image looks for every
    package its lock pins, and takes a local file only when its sha256 is one the lock allows (so
    the hash check in the build passes, and a different build of the same version is fetched)."""
    out: dict[str, Path] = {}
    allowed = dict(spec.lock.hashes) if spec.lock else {}
    lines = list(spec.packages) + ([f"{name}=={version}" for name, version in spec.lock.pins] if spec.lock else [])
    for line in dict.fromkeys(lines):
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        pinned = next((s.version for s in req.specifier if s.operator == "=="), None)
        if pinned is None:
            continue
        project = str(canonicalize_name(req.name))
        for folder in folders:
            match = next((p for p in _candidates(folder, project) if fits(p.name, Version(pinned), spec.python, ARCH[spec.platform])), None)
            if match is not None and (not spec.lock or project not in allowed or sha256_of(match) in allowed[project]):
                out[line] = match
                break
    return out


def sha256_of(path: Path) -> str:
    """The file's sha256, read once per run for an unchanged file (the lock check and the served
    page's `#sha256=` both ask; a wheel is GBs): keyed by its inode, size and mtime."""
    try:
        found = path.stat()
    except OSError:
        return _read_sha256(path)  # let the read say why
    if not stat.S_ISREG(found.st_mode):
        return _read_sha256(path)  # refused there, never cached
    return _cached_sha256(str(path), found.st_ino, found.st_size, found.st_mtime_ns)


@functools.lru_cache(maxsize=4096)
def _cached_sha256(path: str, inode: int, size: int, mtime_ns: int) -> str:
    return _read_sha256(Path(path))


def _read_sha256(path: Path) -> str:
    """Opened non-blocking and checked on the descriptor, so a wheel swapped for a FIFO or a
    device after it was listed is refused instead of read for ever."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UserError(f"{path} is not a regular file (a device, FIFO or socket); a wheel is a file")
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def needed_indexes(spec: ImageSpec, satisfied: set[str]) -> tuple[str, ...]:
    """Framework indexes still needed: one whose every requirement is in the wheelhouse is dropped."""
    keep: list[str] = []
    for install in spec.installs:
        if all(req in satisfied for req in install.requirements):
            continue
        keep += [u for u in install.index_urls if u in spec.index_urls and u not in keep]
    return tuple(keep)


def pip_conf(settings: BuildSettings, extra_index_urls: tuple[str, ...] = ()) -> str:
    """The build's whole pip configuration: with it the build ignores the rendered index default.
    The served wheels' `find-links` line is added when they are published (Staged.served_pip_conf)."""
    lines = ["[global]", "disable-pip-version-check = true"]
    if settings.pip.index_url:
        lines.append(f"index-url = {settings.pip.index_url}")
    if extra_index_urls:
        lines.append("extra-index-url =" + "".join(f"\n    {url}" for url in extra_index_urls))
    return "\n".join(lines) + "\n"


APT_CA_COPY = b".builder/ca.pe[m]"  # how templates/partials/python.j2 copies the CA bundle for apt
UV_DOCKERFILE_ARG = b"ARG BUILDER_UV_URL="  # a Dockerfile that installs with the served uv (Dockerfile.j2)


def stage(spec: ImageSpec, files: Mapping[str, bytes], staging_root: Path, settings: BuildSettings) -> Staged:
    """Write the rendered context `files` (Dockerfile, requirements, the probe) to
    staging_root/<id>/; returns what the build needs served. Nothing of the build settings is
    written but the CA bundle for a Dockerfile's apt step (APT_CA_COPY)."""
    target = staging_root / spec.id
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    target.chmod(0o700)  # a CA bundle may live here for the length of the build
    for name, data in files.items():
        (target / name).write_bytes(data)
    wheels = local_wheels(spec, settings.pip.local_dirs)
    served = {w.name: w for w in wheels.values()}  # `jax[cuda13]==X` and the lock's `jax==X` are one file
    served_ca = None
    if settings.ca_bundle is not None:
        served_ca = settings.ca_bundle.read_bytes()
        if APT_CA_COPY in files.get("Dockerfile", b""):
            (target / ".builder").mkdir()
            shutil.copyfile(settings.ca_bundle, target / ".builder" / "ca.pem")
    indexes = needed_indexes(spec, set(wheels)) + tuple(u for u in settings.pip.extra_index_urls if u not in spec.index_urls)
    return Staged(
        path=target,
        wheels=tuple(sorted(served)),
        extra_index_urls=indexes,
        pip_conf_to_serve=pip_conf(settings, indexes).encode(),
        wheel_files=tuple(served[name] for name in sorted(served)),
        served_ca=served_ca,
        served_local="".join(f"{line}\n" for line in sorted(wheels)).encode() if wheels and spec.lock is None else None,
        index_url=settings.pip.index_url,
        uv=UV_DOCKERFILE_ARG in files.get("Dockerfile", b""),
    )
