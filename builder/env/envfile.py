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
LOCK_FILE = "gpu-env.lock"  # gpu-env.yaml's; another env file's is named after it (lock_name)
DEVCONTAINER = Path(".devcontainer") / "devcontainer.json"
KEYS = ("name", "base", "requirements", "apt", "workdir")
DEFAULT_WORKDIR = "/workspace"
MAX_REQUIREMENTS = 500
APT_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]{1,62}$")  # Debian policy 5.6.1: package names
# One component after each slash: the pattern cannot match a string two ways, so it runs in linear
# time (the old `^/(?:[A-Za-z0-9._-]+/?)*$` took exponential time to refuse 40 characters).
WORKDIR = re.compile(r"^(?:/[A-Za-z0-9._-]+)+/?$")
MAX_WORKDIR = 255
# Where the project folder must not be mounted: the system's folders and the image's own (its venv,
# its user's home, the shell's HOME=/tmp). A mount at, above or inside one hides what the image needs.
IMAGE_FOLDERS = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/root", "/run", "/sbin", "/sys", "/tmp",
    "/usr", "/var", "/opt/venv", "/home/app",
)  # fmt: skip
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
    requirements_line: int = 0  # the `requirements:` key's line (the mapping's first line without one)

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def lock_path(self) -> Path:
        """The env file's own lock beside it: gpu-env.yaml -> gpu-env.lock, other-env.yaml -> other-env.lock."""
        return self.folder / lock_name(self.path.name)

    @property
    def devcontainer(self) -> Path:
        """Where `env shell` writes the Dev Container file: .devcontainer/devcontainer.json for
        gpu-env.yaml, .devcontainer/<stem>/devcontainer.json (the spec's place for a second
        configuration) for any other env file, so two environments of a folder never share one."""
        if self.path.name == ENV_FILE:
            return self.folder / DEVCONTAINER
        return self.folder / DEVCONTAINER.parent / _stem(self.path.name) / DEVCONTAINER.name

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


def _stem(name: str) -> str:
    for suffix in (".yaml", ".yml"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def lock_name(env_file: str) -> str:
    """The lock of an env file, named after it (never the env file itself: `x.lock` locks as `x.lock.lock`)."""
    stem = _stem(env_file)
    return f"{stem}.lock" if stem != env_file else f"{env_file}.lock"


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
    requirements_line = data.line_of("requirements") if "requirements" in data else data.line
    requirements, lines = _requirements(data.get("requirements"), where, requirements_line)
    return EnvFile(
        path=path,
        name=_name(data.get("name"), path, where, data.line_of("name")),
        base=base,
        requirements=requirements,
        apt=_apt(data.get("apt"), where, data.line_of("apt")),
        workdir=_workdir(data.get("workdir"), where, data.line_of("workdir")),
        base_line=data.line_of("base"),
        requirement_lines=lines,
        requirements_line=requirements_line,
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
    if value is None:  # the folder's name; another env file than gpu-env.yaml adds its own (one image each)
        folder = path.resolve().parent.name.lower() + ("" if path.name == ENV_FILE else f"-{_stem(path.name).lower()}")
        name = re.sub(r"[^a-z0-9._-]+", "-", folder).strip("._-") or "env"
        return name[:63].strip("._-") or "env"
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
    shown = repr(value)[:80]
    if not isinstance(value, str) or len(value) > MAX_WORKDIR or not WORKDIR.fullmatch(value) or {".", ".."} & set(value.split("/")):
        raise UserError(f"workdir: {shown} must be an absolute folder like /workspace (letters, digits, . _ -; no ..)", where, line)
    folder = value.rstrip("/")
    for system in IMAGE_FOLDERS:
        if folder == system or folder.startswith(system + "/") or system.startswith(folder + "/"):
            raise UserError(
                f"workdir: {folder} would mount the project over the image's {system} and hide what is there; "
                f"use a folder of its own like {DEFAULT_WORKDIR}",
                where,
                line,
            )
    return folder
