"""Stage a build context: images/<id>/ plus `.builder/` (CA bundle, pip.conf, pinned local wheels).

`.builder/` is read only by the build stage of the Dockerfile, so none of it reaches the final
image. Only the wheels the image pins are copied, never a whole mirror.
"""

from __future__ import annotations

import html.parser
import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from builder.engine.settings import BuildSettings
from builder.records import ImageSpec
from builder.render.context import PROBE, PROBE_NAME

WHEELS_IN_IMAGE = "/tmp/builder/wheels"


@dataclass(frozen=True)
class Staged:
    path: Path
    wheels: tuple[str, ...]  # file names copied into the wheelhouse
    extra_index_urls: tuple[str, ...]  # what the build still needs to reach


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def _candidates(folder: Path, project: str) -> list[Path]:
    """Wheel files for `project` in a find-links folder or a file:// simple index."""
    found = [p for p in folder.glob("*.whl") if _project(p.name) == project]
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
    except InvalidWheelFilename:
        return None


def _fits(filename: str, version: Version, python: str) -> bool:
    """Exact version, a tag this image's CPython and this machine's architecture accept."""
    _, wheel_version, _, tags = parse_wheel_filename(filename)
    if wheel_version != version:
        return False
    cp = "cp" + python.replace(".", "")
    arch = platform.machine()
    for tag in tags:
        interp_ok = tag.interpreter in (cp, "py3", f"py{python.replace('.', '')}") or (
            tag.abi == "abi3" and tag.interpreter.startswith("cp3") and int(tag.interpreter[3:]) <= int(cp[3:])
        )
        plat_ok = tag.platform == "any" or (tag.platform.endswith(arch) and tag.platform.startswith(("manylinux", "linux")))
        if interp_ok and plat_ok:
            return True
    return False


def local_wheels(spec: ImageSpec, folders: tuple[Path, ...]) -> dict[str, Path]:
    """requirement line -> a local wheel that satisfies it exactly."""
    out: dict[str, Path] = {}
    for line in spec.packages:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        pinned = next((s.version for s in req.specifier if s.operator == "=="), None)
        if pinned is None:
            continue
        project = str(canonicalize_name(req.name))
        for folder in folders:
            match = next((p for p in _candidates(folder, project) if _fits(p.name, Version(pinned), spec.python)), None)
            if match is not None:
                out[line] = match
                break
    return out


def needed_indexes(spec: ImageSpec, satisfied: set[str]) -> tuple[str, ...]:
    """Framework indexes still needed: one whose every requirement is in the wheelhouse is dropped."""
    keep: list[str] = []
    for install in spec.installs:
        if all(req in satisfied for req in install.requirements):
            continue
        keep += [u for u in install.index_urls if u in spec.index_urls and u not in keep]
    return tuple(keep)


def pip_conf(settings: BuildSettings, has_wheels: bool) -> str:
    lines = ["[global]", "disable-pip-version-check = true"]
    if settings.pip.index_url:
        lines.append(f"index-url = {settings.pip.index_url}")
    if has_wheels:
        lines.append(f"find-links = {WHEELS_IN_IMAGE}")
    return "\n".join(lines) + "\n"


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def stage(spec: ImageSpec, source: Path, staging_root: Path, settings: BuildSettings) -> Staged:
    """Copy images/<id>/ to staging_root/<id>/, add the probe (one copy, in the package) and
    .builder/; returns what the build needs."""
    target = staging_root / spec.id
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    shutil.copyfile(PROBE, target / PROBE_NAME)
    extra = target / ".builder"
    extra.mkdir()
    wheels = local_wheels(spec, settings.pip.local_dirs)
    if wheels:
        (extra / "wheels").mkdir()
        for wheel in wheels.values():
            _link_or_copy(wheel, extra / "wheels" / wheel.name)
    if settings.ca_bundle is not None:
        shutil.copyfile(settings.ca_bundle, extra / "ca.pem")
    (extra / "pip.conf").write_text(pip_conf(settings, bool(wheels)), encoding="utf-8")
    indexes = needed_indexes(spec, set(wheels)) + tuple(u for u in settings.pip.extra_index_urls if u not in spec.index_urls)
    return Staged(path=target, wheels=tuple(sorted(w.name for w in wheels.values())), extra_index_urls=indexes)
