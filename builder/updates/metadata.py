"""What a release's own metadata states, read from the index's documents (pure): which releases a
project has (final, not yanked, with a wheel for Linux x86_64: a platform wheel or a pure-Python one),
its `Meta`, and from its Requires-Python and Requires-Dist what every framework shares: the Pythons
and NumPy it accepts. What a framework's metadata says of its CUDA build is read by its own rule
module (builder.compat.rules.<name>: `built_for`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from builder.compat.requires import Meta, extras, requirements
from builder.spec import grammar
from builder.util.errors import RunFailure

_LINUX_PLATFORM = re.compile(r"(?:manylinux\d*(?:_\d+)*|linux)_x86_64")  # manylinux1/2010/2014, manylinux_2_28, linux
_LOWER_FIRST = {">=": 0, ">": 0, "~=": 0, "==": 0, "===": 0, "!=": 1, "<": 2, "<=": 2}


# --- the index's documents --------------------------------------------------------------------


def is_linux_wheel(file: Mapping[str, Any]) -> bool:
    """A non-yanked wheel that installs on the images' platform (glibc Linux x86_64): one of its
    platform tags is manylinux*/linux x86_64, or `any` (a pure-Python wheel: jax ships only
    `py3-none-any`). Read from the file name's tags, never a substring of the name."""
    name = str(file.get("filename", ""))
    if file.get("yanked") is True or not name.endswith(".whl") or file.get("packagetype", "bdist_wheel") != "bdist_wheel":
        return False
    try:
        tags = parse_wheel_filename(name)[3]
    except ValueError:  # InvalidWheelFilename, or a version number over 4,300 digits
        return False
    return any(_LINUX_PLATFORM.fullmatch(t.platform) or (t.platform == "any" and not t.interpreter.startswith("py2")) for t in tags)


def available(doc: Mapping[str, Any], project: str) -> set[str]:
    """Versions with a Linux x86_64 wheel that is not yanked (a release whose files are all yanked is yanked)."""
    releases = doc.get("releases")
    if not isinstance(releases, Mapping):
        raise RunFailure(f"the package index's document for {project} has no `releases` mapping; is it a PyPI-style JSON API?")
    return {
        str(v)
        for v, files in releases.items()
        if isinstance(files, list) and any(isinstance(f, Mapping) and is_linux_wheel(f) for f in files)
    }


def candidates(doc: Mapping[str, Any], project: str, newer_than: str) -> list[str]:
    """Final releases newer than `newer_than` that are installable on Linux x86_64, ascending."""
    floor = Version(newer_than)
    out = []
    for text in available(doc, project):
        try:
            version = Version(text)
        except ValueError:  # InvalidVersion, or int()'s refusal of a number over 4,300 digits
            continue
        if version > floor and not version.is_prerelease and not version.is_devrelease and grammar.is_version(text):
            out.append(text)
    return sorted(out, key=Version)


def read_meta(doc: Mapping[str, Any], project: str, version: str) -> Meta:
    info = doc.get("info")
    if not isinstance(info, Mapping):
        raise RunFailure(f"the package index's document for {project} {version} has no `info`; is it a PyPI-style JSON API?")
    requires_python = info.get("requires_python")
    dist = info.get("requires_dist") or ()
    return Meta(
        project=project,
        version=version,
        requires_python=str(requires_python).strip() or None if requires_python else None,
        requires_dist=tuple(str(line) for line in dist) if isinstance(dist, list) else (),
    )


# --- what the metadata says ---------------------------------------------------------------------


def _environment(python: str) -> dict[str, str]:
    return {
        "python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux", "platform_system": "Linux",
        "platform_machine": "x86_64", "os_name": "posix", "implementation_name": "cpython", "platform_python_implementation": "CPython",
        "extra": "",
    }  # fmt: skip


def _spec_text(spec: SpecifierSet) -> str:
    return ",".join(str(s) for s in sorted(spec, key=lambda s: (_LOWER_FIRST.get(s.operator, 1), s.version)))


def _numpy_requirements(lines: Iterable[str]) -> list[Requirement]:
    return [r for r in requirements(lines) if canonicalize_name(r.name) == "numpy" and not extras(r)]


def numpy_bounds(lines: Iterable[str]) -> str | None:
    """The NumPy requirement outside extras: ">=1.24,<2.4" (conditional ones follow with their marker)."""
    parts = []
    for req in _numpy_requirements(lines):
        text = _spec_text(req.specifier) or "any"
        parts.append(text if req.marker is None else f"{text} if {req.marker}")
    return "; ".join(parts) or None


def numpy_allows(lines: Iterable[str], python: str, numpy: str) -> bool:
    """Does the release accept this NumPy under this Python (Linux x86_64)?"""
    env = _environment(python)
    for req in _numpy_requirements(lines):
        if req.marker is not None and not Marker(str(req.marker)).evaluate(env):
            continue
        if not req.specifier.contains(numpy, prereleases=True):
            return False
    return True


def python_allows(requires_python: str | None, python: str) -> bool | None:
    """Does Requires-Python admit this Python minor (any of its patches)? None when it states nothing readable."""
    if not requires_python:
        return None
    try:
        spec = SpecifierSet(requires_python)
    except InvalidSpecifier:
        return None
    return any(spec.contains(f"{python}.{patch}", prereleases=True) for patch in ("0", "99"))
