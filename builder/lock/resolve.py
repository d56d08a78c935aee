"""Resolve a lock target with uv (`uv pip compile`) through the build's own sources: its default
index or mirror, the plan's framework indexes, local wheel folders, CA bundle and proxies.

uv runs with a scrubbed environment and `--no-config`, so only the sources given here count (no
stray UV_* variable or uv.toml adds an index), wheels only (`--only-binary :all:`: nothing is
built on the host), and never downloads an interpreter. A failure is classified: an index that
cannot be reached (named), requirements that cannot be resolved (the resolver's own reason), or
anything else; none of them writes a lock.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from builder.lock import children
from builder.lock.target import PYPI, LockTarget
from builder.model.sources import BuildSettings
from builder.util.text import printable, redact

TIMEOUT_S = 900
_FETCH = re.compile(r"Failed to fetch: `?(\S+?)`?$", re.MULTILINE)
_CAUSE = re.compile(r"^\s*(?:error|cause|hint): (.+)$", re.MULTILINE)


class LockFailed(Exception):
    """uv could not lock the target; `kind` is unreachable | unresolvable | failed."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class Sources:
    """Where uv looks, in pip's terms (engine.settings), split the way uv wants them."""

    default_index: str
    indexes: tuple[str, ...]  # framework indexes, mirrors, file:// simple indexes
    find_links: tuple[str, ...]  # folders of wheel files


def uv_binary() -> str:
    from uv import find_uv_bin  # the `uv` package from PyPI, a dependency

    return str(find_uv_bin())


def sources(needed_indexes: tuple[str, ...], settings: BuildSettings) -> Sources:
    """The build's sources for a lock, in priority order: the default index (PyPI or the mirror
    that replaces it) first, so a version both it and a local folder offer is locked with the
    default index's hashes (portable); then the framework indexes the build still needs
    (engine.staging.needed_indexes) and the extra ones; local folders last, as file:// indexes
    (a PEP 503 tree) or find-links (a folder of wheels)."""
    default = settings.pip.index_url or PYPI
    indexes = [default, *needed_indexes, *(u for u in settings.pip.extra_index_urls if u not in needed_indexes)]
    links = []
    for folder in settings.pip.local_dirs:
        if any(folder.glob("*/index.html")):
            indexes.append(folder.resolve().as_uri())
        else:
            links.append(str(folder))
    return Sources(default_index=default, indexes=tuple(dict.fromkeys(indexes)), find_links=tuple(links))


def command(uv: str, target: LockTarget, where: Sources, requirements: Path, constraints: Path | None, output: Path) -> list[str]:
    argv = [
        uv, "pip", "compile", str(requirements), "--no-config", "--quiet",
        "--python-version", target.python, "--python-platform", target.platform,
        "--only-binary", ":all:", "--no-python-downloads", "--generate-hashes", "--no-header",
        "--index-strategy", "unsafe-best-match",  # as pip: the best version across every index
        "--output-file", str(output),
    ]  # fmt: skip
    for folder in where.find_links:
        argv += ["--find-links", folder]
    if constraints is not None:
        argv += ["--constraint", str(constraints)]
    return argv


def environment(settings: BuildSettings, cache_dir: Path, where: Sources) -> dict[str, str]:
    """Only what uv needs: PATH, HOME, the cache, the indexes, the CA bundle and the proxies (no UV_* or
    PIP_* from the caller).

    The indexes go here, not on uv's command line: an index URL may carry a password (from pip's
    config or $PIP_INDEX_URL, which no other user can read), and a command line is world-readable
    (`ps`, /proc/<pid>/cmdline) while a process's environment is its owner's alone. UV_INDEX is
    space-separated in priority order, as repeated `--index` options are."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"), "UV_CACHE_DIR": str(cache_dir)}
    env["UV_NO_CONFIG"] = "1"
    env["UV_DEFAULT_INDEX"] = where.default_index
    if where.indexes:
        env["UV_INDEX"] = " ".join(where.indexes)
    if settings.ca_bundle is not None:
        env["SSL_CERT_FILE"] = str(settings.ca_bundle)
    env.update(dict(settings.proxies))
    return env


def resolve(
    target: LockTarget, where: Sources, settings: BuildSettings, cache_dir: Path, previous: str | None = None, uv: str | None = None
) -> str:
    """uv's requirements-format lock for the target; LockFailed when it cannot. `previous` (an
    older lock's text) makes uv keep its pins where they still fit (no needless drift)."""
    with children.work_folder() as folder:  # removed by the next run if this one is killed
        requirements = folder / "requirements.in"
        requirements.write_text("".join(f"{line}\n" for line in target.requirements), encoding="utf-8")
        constraints = None
        if target.constraints:
            constraints = folder / "constraints.txt"
            constraints.write_text("".join(f"{line}\n" for line in target.constraints), encoding="utf-8")
        output = folder / "requirements.lock"
        if previous:
            output.write_text(previous, encoding="utf-8")
        argv = command(uv or uv_binary(), target, where, requirements, constraints, output)
        try:
            done = children.run(argv, environment(settings, cache_dir, where), TIMEOUT_S)  # uv ends with this process
        except subprocess.TimeoutExpired:
            raise LockFailed("failed", f"uv did not finish within {TIMEOUT_S} s") from None
        except children.Stopped:
            raise LockFailed("failed", "not started: the run is being interrupted") from None
        if done.returncode != 0:
            raise classify(done.returncode, done.stderr)
        return output.read_text(encoding="utf-8")


def classify(returncode: int, stderr: str) -> LockFailed:
    """uv's failure as one line: credentials in any URL masked (engine.secrets.redact), and what the
    index sent (an error page, a name) with its control characters escaped (builder.util.text)."""
    failed = _classify(returncode, redact(stderr))
    return LockFailed(failed.kind, printable(failed.message, 2000))


def _classify(returncode: int, text: str) -> LockFailed:
    fetch = _FETCH.search(text)
    if fetch and returncode == 2:
        url = fetch.group(1)
        if url.endswith("/"):
            index = re.sub(r"[^/]+/$", "", url)  # uv names the project page; the index is above it
            return LockFailed("unreachable", f"index {index} cannot be reached ({_last_cause(text)}); check the network or name a mirror")
        return LockFailed("unreachable", f"cannot fetch {url} ({_last_cause(text)}); check the index or the mirror")
    causes = [c.strip() for c in _CAUSE.findall(text)]
    if "No solution found" in text:
        paragraph = text.split("cause:", 1)[1].split("\n\n", 1)[0].split("hint:", 1)[0] if "cause:" in text else "no solution"
        return LockFailed("unresolvable", " ".join(paragraph.split()))
    return LockFailed(
        "failed", " ".join((causes[-1] if causes else text.strip().splitlines()[-1] if text.strip() else "uv failed").split())
    )


def _last_cause(text: str) -> str:
    causes = _CAUSE.findall(text)
    return " ".join(causes[-1].split()) if causes else "no answer"
