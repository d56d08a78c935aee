"""The files an index lists for a project (its simple API) and one of them fetched by its sha256.

For reading an image's device code from its lock (usecases/measure.py): the lock names each wheel
by its hashes, the index says where the file is. The simple API is what every index serves (PyPI,
mirrors, file:// trees like /opt/pypi/simple); PEP 691's JSON is asked for first, PEP 503's HTML
read when that is what comes. A local folder of wheels (pip's find-links) is listed by name.

A fetched wheel is written to a temporary file while its sha256 is computed and kept only when the
digest is the lock's: nothing unchecked is ever read. Requests go through transport.py (http(s)
only, redirects that cannot downgrade, a wall-clock deadline per file), transient failures are
tried again by the one retry loop (engine/retry.py), and an index's credentials are sent only to
its own origin.
"""

from __future__ import annotations

import hashlib
import html.parser
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin, urlsplit
from urllib.request import url2pathname

from builder import __version__
from builder.engine import staging
from builder.engine.retry import GaveUp, retry_network
from builder.lock.wheels import IndexFile
from builder.updates import transport
from builder.updates.index import _LOOPBACK, _split_url
from builder.util.errors import UserError
from builder.util.text import printable, redact

MAX_LISTING = 64 * 2**20  # a project page with every file of every release (torch's is a few MB)
MAX_WHEEL = 8 * 2**30
LISTING_DEADLINE_S = 120.0
MIN_WHEEL_DEADLINE_S = 600.0
BYTES_PER_S = 2 * 2**20  # the slowest download a wheel's deadline allows for (900 MB: 450 s)
ATTEMPTS = 4
CHUNK = 1 << 22
_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"


class FetchFailed(Exception):
    """A listing or a wheel could not be had (one line, credentials masked)."""


class _Transient(Exception):
    pass


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []  # (href, text)
        self._href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self.links.append((self._href, data.strip()))
            self._href = None


def parse_listing(body: bytes, content_type: str, page: str) -> list[IndexFile]:
    """A project page's files: PEP 691 JSON or PEP 503 HTML (`#sha256=` fragments); URLs made absolute."""
    if "json" in content_type:
        doc = json.loads(body)
        files = doc.get("files") if isinstance(doc, dict) else None
        if not isinstance(files, list):
            raise ValueError("its JSON has no `files` list")
        out = []
        for item in files:
            if not isinstance(item, dict) or not isinstance(item.get("filename"), str) or not isinstance(item.get("url"), str):
                continue
            hashes = item.get("hashes") if isinstance(item.get("hashes"), dict) else {}
            digest = hashes.get("sha256") if isinstance(hashes, dict) else None
            size = item.get("size")
            out.append(
                IndexFile(
                    item["filename"],
                    urljoin(page, item["url"]),
                    digest if isinstance(digest, str) else None,
                    size if type(size) is int else None,
                )
            )
        return out
    parser = _Anchors()
    parser.feed(body.decode("utf-8", errors="replace"))
    out = []
    for href, text in parser.links:
        url, _, fragment = urljoin(page, href).partition("#")
        digest = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None
        name = text or url.rsplit("/", 1)[-1]
        out.append(IndexFile(name, url, digest))
    return out


class WheelFiles:
    """The indexes and local folders a lock was resolved from, local ones first (where a file both
    list is the same file, it is read where it is); one per run (project pages are kept)."""

    def __init__(
        self, indexes: Sequence[str], folders: Sequence[Path] = (), ca_bundle: Path | None = None, proxies: dict[str, str] | None = None
    ):
        self.indexes = tuple(indexes)
        self.folders = tuple(folders)
        self._context = ssl.create_default_context(cafile=str(ca_bundle) if ca_bundle else None)
        self._proxies = proxies
        self._pages: dict[str, list[IndexFile]] = {}
        self._listed: dict[tuple[str, str], list[IndexFile]] = {}  # (source, project) -> its files
        self._auth: dict[transport.Origin, str] = {}  # an index's credentials, for its own origin only
        for index in self.indexes:
            if not index.startswith("file:"):
                base, auth, _ = _split_url(index, printable(redact(index), 200))
                where = transport.origin(base)
                if auth is not None and where is not None:
                    self._auth[where] = auth

    def files(self, project: str) -> list[IndexFile]:
        """Every file the sources list for the project (remote indexes, file:// trees, wheel folders)."""
        if project not in self._pages:
            found: list[IndexFile] = []
            for listing in self._listings(project):
                found += listing
            self._pages[project] = found
        return self._pages[project]

    def first(self, project: str, choose: Callable[[list[IndexFile]], IndexFile | None]) -> IndexFile | None:
        """The file `choose` picks from the first source (in order: local ones first) that lists one it
        picks; the sources after it are not asked. A hash-pinned file is the same file wherever it is
        listed, so an index that cannot be reached fails a run only when no source before it has the file."""
        if project in self._pages:
            return choose(self._pages[project])
        for listing in self._listings(project):
            chosen = choose(listing)
            if chosen is not None:
                return chosen
        return None

    def _listings(self, project: str) -> Iterator[list[IndexFile]]:
        """Each source's files of the project, in order; each source asked once per run."""
        for folder in self.folders:
            yield self._once(str(folder), project, partial(_folder_files, folder, project))
        for index in self.indexes:
            yield self._once(index, project, partial(self._listing, index, project))

    def _once(self, source: str, project: str, listing: Callable[[], list[IndexFile]]) -> list[IndexFile]:
        if (source, project) not in self._listed:
            self._listed[source, project] = listing()
        return self._listed[source, project]

    def _listing(self, index: str, project: str) -> list[IndexFile]:
        if index.startswith("file:"):
            root = Path(url2pathname(urlsplit(index).path))
            return _folder_files(root, project)
        base, _, _ = _split_url(index, printable(redact(index), 200))
        page = f"{base}/{quote(project, safe='')}/"
        body, kind = self._get(page, LISTING_DEADLINE_S, None)
        if body is None:
            return []
        try:
            listed = parse_listing(body, kind, page)
        except ValueError as exc:
            raise FetchFailed(f"the index {printable(redact(base))} answered {printable(redact(page))} with no file list ({exc})") from None
        # a remote index names files on the network only: a file:// (or any other) URL it lists would
        # have this machine read its own files for it
        return [f for f in listed if transport.origin(f.url) is not None]

    def fetch(self, file: IndexFile, sha256: str, folder: Path) -> Path:
        """The wheel as a local file whose sha256 is `sha256`: a local one where it is, a remote one
        downloaded into `folder`; FetchFailed when the bytes are not the lock's."""
        if file.url.startswith("file:"):
            path = Path(url2pathname(urlsplit(file.url).path))
            if _sha256(path) != sha256:
                raise FetchFailed(f"{path} is not the file the lock pins (its sha256 differs)")
            return path
        target = folder / "wheel.whl"
        seconds = max(MIN_WHEEL_DEADLINE_S, (file.size or 0) / BYTES_PER_S)
        digest = self._get(file.url, seconds, target)[0]
        if digest is None or digest.decode() != sha256:
            target.unlink(missing_ok=True)
            raise FetchFailed(
                f"{printable(redact(file.url))} is not the file the lock pins (its sha256 differs); check the index or mirror"
            )
        return target

    def _get(self, url: str, seconds: float, target: Path | None) -> tuple[bytes | None, str]:
        """A page's bytes (None on 404), or, with `target`, the file written there and its sha256 hex as bytes."""
        shown = printable(redact(url), 300)
        where = transport.origin(url)
        auth = self._auth.get(where) if where is not None else None
        local = urlsplit(url).hostname in _LOOPBACK  # no proxy can reach this machine's loopback
        opener = transport.opener(
            self._context, {} if local else self._proxies, (where, auth) if where is not None and auth is not None else None
        )

        def once(attempt: int) -> tuple[bytes | None, str]:
            request = urllib.request.Request(url, headers={"Accept": _ACCEPT, "User-Agent": f"gpu-image-builder/{__version__}"})
            if auth is not None:
                request.add_unredirected_header("Authorization", auth)
            with transport.Deadline(seconds) as deadline:
                try:
                    with opener.open(request, timeout=deadline.socket_timeout(60.0)) as response:
                        kind = str(response.headers.get("Content-Type", ""))
                        result = _body(response, target, shown)
                except urllib.error.HTTPError as exc:
                    exc.close()
                    if exc.code == 404 and target is None:
                        return None, ""
                    if exc.code == 429 or exc.code >= 500:
                        raise _Transient(f"HTTP {exc.code}") from None
                    raise FetchFailed(f"{shown} answered HTTP {exc.code}; check the index, its credentials or the mirror") from None
                except transport.Refused as exc:
                    raise FetchFailed(f"{shown}: {printable(redact(str(exc)), 200)}") from None
                except (urllib.error.URLError, OSError) as exc:
                    raise _Transient(printable(redact(str(getattr(exc, "reason", exc))), 200)) from None
                if deadline.expired:
                    raise _Transient(f"not complete within {seconds:g} s")
                return result, kind

        try:
            return retry_network(once, flake=lambda exc: isinstance(exc, _Transient), attempts=ATTEMPTS, wait_s=2.0)
        except GaveUp as exc:
            raise FetchFailed(
                f"cannot fetch {shown} ({exc.reason}; {exc.attempts} tries): check the network, the CA bundle or name a mirror"
            ) from None


def _body(response: Any, target: Path | None, shown: str) -> bytes:
    limit = MAX_LISTING if target is None else MAX_WHEEL
    if target is None:
        data = response.read(limit + 1)
        if len(data) > limit:
            raise FetchFailed(f"{shown} is larger than {limit >> 20} MiB, which no project page is")
        return bytes(data)
    digest = hashlib.sha256()
    size = 0
    with open(target, "wb") as out:
        while chunk := response.read(CHUNK):
            size += len(chunk)
            if size > limit:
                raise FetchFailed(f"{shown} is larger than {limit >> 30} GiB, which no wheel is")
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest().encode()


def _folder_files(folder: Path, project: str) -> list[IndexFile]:
    """A file:// simple tree's project page, or the wheels in a find-links folder named for the project."""
    page = folder / project / "index.html"
    if page.is_file():
        return parse_listing(page.read_bytes()[:MAX_LISTING], "text/html", page.as_uri())
    prefix = project.replace("-", "_").lower() + "-"
    return [
        IndexFile(p.name, p.as_uri(), _sha256(p), p.stat().st_size)
        for p in sorted(folder.glob("*.whl"))
        if p.name.lower().startswith(prefix) and p.is_file()
    ]


def _sha256(path: Path) -> str:
    """A local file's sha256, read once per run for an unchanged file (staging.sha256_of: a CUDA line's
    members and its image ask for the same GBs of wheels); FetchFailed for what is not a regular file."""
    try:
        return staging.sha256_of(path)
    except UserError as exc:
        raise FetchFailed(exc.message) from None
