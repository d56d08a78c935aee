"""gpu-env.yaml: a team's environment on top of a known-good image (pure).

```yaml
name: vision-team            # optional: the folder's name; names the image builder-env/<name>
base: numba=0.60 python=3.11 # a catalog query (the newest record it matches), or repository@sha256:...
requirements:                # PEP 508 lines, locked by `builder env lock` on top of the base's lock
  - requests==2.32.3
  - pandas>=2.2
apt: [git, make]             # optional Debian packages (names only)
workdir: /workspace          # optional: where the project folder is mounted and the shell starts
```

Every value is checked here, before it reaches uv or a template: a wrong one is a one-line error
naming the file, the line and the fix (exit 2), as matrix.yaml's are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from builder.spec import grammar
from builder.util import yamlsrc
from builder.util.errors import UserError

ENV_FILE = "gpu-env.yaml"
LOCK_FILE = "gpu-env.lock"
KEYS = ("name", "base", "requirements", "apt", "workdir")
DEFAULT_WORKDIR = "/workspace"
MAX_REQUIREMENTS = 500
APT_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]{1,62}$")  # Debian policy 5.6.1: package names
WORKDIR = re.compile(r"^/(?:[A-Za-z0-9._-]+/?)*$")
BASE_DIGEST = re.compile(r"^(?:(?P<repository>[^@\s]+)@)?(?P<digest>sha256:[0-9a-f]{64})$")


@dataclass(frozen=True)
class EnvFile:
    path: Path
    name: str  # a Docker repository component
    base: str  # the query or digest as written
    requirements: tuple[str, ...]  # as written, each a valid PEP 508 requirement on an index
    apt: tuple[str, ...] = ()
    workdir: str = DEFAULT_WORKDIR
    base_line: int = 0
    requirement_lines: tuple[int, ...] = ()

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def lock_path(self) -> Path:
        return self.folder / LOCK_FILE

    @property
    def id(self) -> str:
        """The derived image's id (a Docker tag, like an image id)."""
        return f"env-{self.name}"

    @property
    def tag(self) -> str:
        return f"builder-env/{self.name}:latest"

    @property
    def base_digest(self) -> str | None:
        """repository@sha256:... or sha256:... when `base:` names a digest; None for a query."""
        return self.base if BASE_DIGEST.fullmatch(self.base) else None

    def requirement_names(self) -> set[str]:
        return {str(canonicalize_name(Requirement(line).name)) for line in self.requirements}


def load(path: Path) -> EnvFile:
    """The env file at `path`, every value checked (UserError naming file:line and the fix)."""
    where = str(path)
    if not path.exists():
        raise UserError(f"no such file; write one ({ENV_FILE}: base, requirements; see `builder env --help`) or pass --file", where)
    data = yamlsrc.load(path, where)
    if not isinstance(data, yamlsrc.LDict):
        raise UserError("must be a mapping with base: and requirements:", where, 1)
    for key in data:
        if key not in KEYS:
            raise UserError(f"unknown key {key!r}; the keys are {', '.join(KEYS)}", where, data.line_of(key))
    if "base" not in data:
        raise UserError("no base: give a catalog query (e.g. base: torch=2.5 cuda=12.4) or repository@sha256:<digest>", where, data.line)
    base = _base(data["base"], where, data.line_of("base"))
    requirements, lines = _requirements(
        data.get("requirements"), where, data.line_of("requirements") if "requirements" in data else data.line
    )
    return EnvFile(
        path=path,
        name=_name(data.get("name"), path, where, data.line_of("name")),
        base=base,
        requirements=requirements,
        apt=_apt(data.get("apt"), where, data.line_of("apt")),
        workdir=_workdir(data.get("workdir"), where, data.line_of("workdir")),
        base_line=data.line_of("base"),
        requirement_lines=lines,
    )


def _base(value: Any, where: str, line: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UserError("base: must be a catalog query (e.g. torch=2.5 cuda=12.4) or repository@sha256:<digest>", where, line)
    text = " ".join(value.split())
    if not text.isprintable() or len(text) > 500:
        raise UserError("base: is one printable line of at most 500 characters", where, line)
    found = BASE_DIGEST.fullmatch(text)
    if found and found["repository"] and not grammar.REPOSITORY.fullmatch(found["repository"]):
        raise UserError(f"base: {found['repository']!r} is not an image repository (e.g. ghcr.io/org/gpu-images)", where, line)
    if "@" in text and not found:
        raise UserError("base: a digest is repository@sha256:<64 hex digits> (copy it from `builder catalog`)", where, line)
    return text


def _name(value: Any, path: Path, where: str, line: int) -> str:
    if value is None:
        folder = path.resolve().parent.name.lower()
        name = re.sub(r"[^a-z0-9._-]+", "-", folder).strip("._-") or "env"
        return name[:63]
    if not isinstance(value, str) or not grammar.NAME.fullmatch(value):
        raise UserError(f"name: {value!r} is not a name; use lowercase letters, digits, '.', '_' and '-' (e.g. vision-team)", where, line)
    return value


def _requirements(value: Any, where: str, line: int) -> tuple[tuple[str, ...], tuple[int, ...]]:
    if value is None:
        return (), ()
    if not isinstance(value, yamlsrc.LList) or len(value) > MAX_REQUIREMENTS:
        raise UserError(f"requirements: must be a list of at most {MAX_REQUIREMENTS} lines like `requests==2.32.3`", where, line)
    out: list[str] = []
    lines: list[int] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(value):
        at = value.line_of(index)
        if not isinstance(item, str) or not item.strip() or not item.isprintable():
            raise UserError(f"requirements: {item!r} is not a requirement; write it like `requests==2.32.3`", where, at)
        text = item.strip()
        if text.startswith("-"):
            raise UserError(
                f"requirements: {text!r} is a pip option; the env file takes requirements only (the index comes from the build's sources)",
                where,
                at,
            )
        try:
            requirement = Requirement(text)
        except InvalidRequirement as exc:
            raise UserError(
                f"requirements: {text!r} is not a PEP 508 requirement ({' '.join(str(exc).split())[:120]})", where, at
            ) from None
        if requirement.url:
            raise UserError(
                f"requirements: {text!r} names a URL; a lock takes packages from an index only (publish it, or use a wheelhouse)", where, at
            )
        name = str(canonicalize_name(requirement.name))
        if name in seen:
            raise UserError(f"requirements: {requirement.name} is listed twice (first on line {seen[name]}); keep one", where, at)
        seen[name] = at
        out.append(text)
        lines.append(at)
    return tuple(out), tuple(lines)


def _apt(value: Any, where: str, line: int) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, yamlsrc.LList):
        raise UserError("apt: must be a list of Debian package names, e.g. [git, make]", where, line)
    out = []
    for index, item in enumerate(value):
        if not isinstance(item, str) or not APT_NAME.fullmatch(item):
            raise UserError(
                f"apt: {item!r} is not a Debian package name (lowercase letters, digits, + - .; no versions or options)",
                where,
                value.line_of(index),
            )
        out.append(item)
    return tuple(sorted(set(out)))


def _workdir(value: Any, where: str, line: int) -> str:
    if value is None:
        return DEFAULT_WORKDIR
    if not isinstance(value, str) or not WORKDIR.fullmatch(value) or "/../" in f"{value}/" or "/./" in f"{value}/" or value == "/":
        raise UserError(f"workdir: {value!r} must be an absolute folder like /workspace (letters, digits, . _ -; no ..)", where, line)
    return value.rstrip("/")
