"""What a package index publishes, and whether a lock's hashes are among it (pure).

A lock's `# body:` digest and `builder lock --check` prove a lock is what `builder lock` writes for
its inputs: integrity against accidents, not against an editor, who recomputes the digest after
changing a hash, a version or adding a package. `builder lock --check --index` asks the lock's own
sources instead (the simple index, PEP 503 HTML or PEP 691 JSON, of the default index, the
framework indexes and local mirrors; the wheel files of local folders): every hash a pin allows
must be the sha256 of a file those sources publish for that very project and version. This module
reads the pages and judges; builder/updates/simple.py fetches them.
"""

from __future__ import annotations

import html.parser
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

from builder.model.plan import Lock
from builder.util.text import printable

_SHA256 = re.compile(r"[0-9a-f]{64}")
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
ACCEPT = f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"


class PageError(ValueError):
    """A page that is neither a PEP 691 JSON nor a PEP 503 HTML project page."""


def release_of(filename: str) -> tuple[str, Version] | None:
    """(normalized project, version) a distribution file is of, by its name; None for any other name."""
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
        elif filename.endswith((".tar.gz", ".zip")):
            name, version = parse_sdist_filename(filename)
        else:
            return None
    except ValueError:  # InvalidWheelFilename / InvalidSdistFilename, or a version over 4,300 digits
        return None
    return str(name), version


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.files: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag != "a":
            return
        href = dict(attrs).get("href") or ""
        url, _, fragment = href.partition("#")
        kind, _, digest = fragment.partition("=")
        if kind == "sha256" and _SHA256.fullmatch(digest):
            self.files[unquote(urlsplit(url).path.rsplit("/", 1)[-1])] = digest


def files_of(body: bytes, content_type: str, where: str) -> dict[str, str]:
    """file name -> sha256 (hex) of every file a project page lists with one (files it lists
    without a sha256 prove nothing and are left out)."""
    if content_type.split(";")[0].strip().lower() == JSON_TYPE or body.lstrip()[:1] == b"{":
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            raise PageError(f"{where}: not a JSON project page") from None
        entries = doc.get("files") if isinstance(doc, dict) else None
        if not isinstance(entries, list):
            raise PageError(f"{where}: a JSON page without `files`: not a PEP 691 project page")
        found: dict[str, str] = {}
        for entry in entries:
            hashes = entry.get("hashes") if isinstance(entry, dict) else None
            name, digest = (entry.get("filename"), hashes.get("sha256")) if isinstance(hashes, dict) else (None, None)
            if isinstance(name, str) and isinstance(digest, str) and _SHA256.fullmatch(digest):
                found[name] = digest
        return found
    parser = _Links()
    try:
        parser.feed(body.decode("utf-8", errors="replace"))
        parser.close()
    except AssertionError:  # html.parser's own refusal of some malformed markup
        raise PageError(f"{where}: not an HTML project page") from None
    return parser.files


@dataclass(frozen=True)
class Problem:
    """A pin whose hashes are not all among what its sources publish."""

    package: str
    version: str
    reason: str

    def line(self) -> str:
        return f"{self.package}=={self.version}: {self.reason}"


def published_for(project: str, version: str, files: Mapping[str, str]) -> frozenset[str]:
    """The sha256 digests of the files of `project` `version` among `files` (name -> sha256)."""
    want = (str(canonicalize_name(project)), Version(version))
    return frozenset(digest for name, digest in files.items() if release_of(name) == want)


def judge_pin(project: str, version: str, allowed: Iterable[str], published: frozenset[str], looked: str) -> Problem | None:
    """None when every hash the pin allows is a published file's; else what is wrong, in one line."""
    hashes = sorted(set(allowed))
    if not hashes:
        return Problem(project, version, "the lock allows no hash for it (a lock `builder lock` wrote always does)")
    if not published:
        return Problem(project, version, f"no file of this version is published on {looked}")
    foreign = [h for h in hashes if h not in published]
    if foreign:
        shown = ", ".join(f"sha256:{printable(h, 16)}" for h in foreign[:3]) + (" ..." if len(foreign) > 3 else "")
        return Problem(project, version, f"{len(foreign)} hash(es) the lock allows are of no file published for it on {looked}: {shown}")
    return None


def pins_of(lock: Lock) -> list[tuple[str, str, tuple[str, ...]]]:
    """(package, version, the hashes it allows) for every pin of a lock."""
    hashes = dict(lock.hashes)
    return [(name, version, hashes.get(name, ())) for name, version in lock.pins]
