"""`pip check`'s verdict on an image, with one guarded exception: a wheel whose WHEEL file names its
platform by a vendor's alias (pure; the smoke check test_pip_check_is_clean runs it).

pip >= 23.3 also reports each installed wheel whose WHEEL `Tag:` lines name no tag the interpreter
supports ("X 1.0 is not supported on this platform"). NVIDIA's aarch64 cuSPARSELt wheel is published
as `nvidia_cusparselt_cu13-0.8.1-py3-none-manylinux2014_aarch64.whl`, but its WHEEL file says
`Tag: py3-none-manylinux2014_sbsa`: SBSA (Arm's Server Base System Architecture) is NVIDIA's name for
its aarch64 server builds. So every arm64 image holding it fails a recent pip's check, although the
wheel's file name, its ELF files and the resolver all agree it is the aarch64 build (Debian 12's pip
23.0.1, which the RUN images' venvs carry, does not read the tags; the canonical venvs' pip 25 does).

Such a line is accepted only when the dist's WHEEL tags, with the alias's platform word replaced by
the architecture it names (ALIASES), include a tag the image's own pip lists as supported (`pip debug
--verbose`); any other line of pip check's output, an unknown alias, or an aliased tag the image does
not support fails the check. What was accepted is said in the check's report.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from email.parser import Parser

from packaging.tags import parse_tag

# a WHEEL tag's platform word -> the architecture it stands for (the word pip knows)
ALIASES: dict[str, str] = {
    "sbsa": "aarch64",  # NVIDIA's aarch64 server builds: nvidia-cusparselt-cu13 0.8.1's WHEEL file
}

UNSUPPORTED = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*) \S+ is not supported on this platform")


@dataclass(frozen=True)
class Report:
    """pip check's output split: dists it calls unsupported, and every other line (each a failure)."""

    unsupported: tuple[str, ...]
    other: tuple[str, ...]


def read_report(stdout: str) -> Report:
    unsupported: list[str] = []
    other: list[str] = []
    for line in (raw.strip() for raw in stdout.splitlines()):
        if not line:
            continue
        match = UNSUPPORTED.fullmatch(line)
        if match:
            unsupported.append(match["name"])
        else:
            other.append(line)
    return Report(tuple(unsupported), tuple(other))


def supported_tags(debug_output: str) -> frozenset[str]:
    """The tags `pip debug --verbose` lists under "Compatible tags" (one per indented line)."""
    tags: set[str] = set()
    listing = False
    for line in debug_output.splitlines():
        if line.startswith("Compatible tags"):
            listing = True
        elif listing and line.startswith(" "):
            tags |= _tags(line)
        elif listing:
            listing = False
    return frozenset(tags)


def wheel_tags(wheel_file: str) -> tuple[str, ...]:
    """The expanded `Tag:` lines of a dist's WHEEL file (a compressed tag set is one tag per part),
    sorted; a line that is no tag is left out (it cannot make a line acceptable)."""
    out: set[str] = set()
    for value in Parser().parsestr(wheel_file).get_all("Tag", []):
        out |= _tags(str(value))
    return tuple(sorted(out))


def _tags(text: str) -> set[str]:
    """The tags `text` spells (packaging's parse_tag expands a compressed set); none if it is no tag."""
    with contextlib.suppress(ValueError):
        return {str(tag) for tag in parse_tag(text.strip())}
    return set()


def aliased(tag: str) -> str | None:
    """`tag` with its platform's alias word replaced (py3-none-manylinux2014_sbsa ->
    py3-none-manylinux2014_aarch64); None when its platform names no alias."""
    python, abi, platform = tag.split("-")
    head, _, word = platform.rpartition("_")
    if not head or word not in ALIASES:
        return None
    return f"{python}-{abi}-{head}_{ALIASES[word]}"


def accept(name: str, wheel_file: str, supported: frozenset[str]) -> str | None:
    """Why `name`'s "not supported" line is a vendor's alias the image supports ("WHEEL says T, the
    image supports T'"), or None: the line stands as a failure."""
    for tag in wheel_tags(wheel_file):
        alias = aliased(tag)
        if alias is not None and alias in supported:
            return (
                f"{name}: its WHEEL file says {tag}, {tag.rpartition('_')[2]} is {alias.rpartition('_')[2]}, and the image supports {alias}"
            )
    return None
