"""What a lock's sources publish for a project: the file names and sha256 digests of its simple
index pages (http(s) or a file:// mirror) and of the wheel files of local folders, each source read
once per project and run. `builder lock --check --index` judges a lock by them (lock/published.py).

The pages are fetched as the index client fetches (updates/transport.py): a whole-page deadline,
credentials only to their own origin, no redirect to another scheme, a bounded body, retries only
for network failures. PyPI's JSON API (`/pypi/<project>/json`) is not needed: the simple index is
what pip and uv install from, and it is what every mirror serves.
"""

from __future__ import annotations

import base64
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit
from urllib.request import url2pathname

from packaging.utils import canonicalize_name

from builder import __version__
from builder.engine.retry import GaveUp, retry_network
from builder.engine.staging import sha256_of
from builder.lock.published import ACCEPT, PageError, files_of, release_of
from builder.updates import transport
from builder.util import fsio
from builder.util.errors import RunFailure, UserError
from builder.util.text import printable, redact

MAX_PAGE = 64 * 2**20  # numpy's PEP 691 page is a few MiB; far more is not a project page
DEADLINE_S = 120.0
TIMEOUT_S = 20.0
ATTEMPTS = 3


class _Transient(Exception):
    pass


@dataclass
class IndexPages:
    """The lock's sources in its resolution order: indexes (http(s) or file:// simple indexes) and
    folders of wheels. `files(project, i)` is what source `i` publishes for `project`; a source
    that cannot be read says so by RunFailure."""

    indexes: tuple[str, ...]
    folders: tuple[Path, ...] = ()
    ca_bundle: Path | None = None
    deadline_s: float = DEADLINE_S
    backoff_s: float = 1.0
    _cache: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)

    def names(self) -> list[str]:
        return [printable(redact(u)) for u in self.indexes] + [str(f) for f in self.folders]

    def count(self) -> int:
        return len(self.indexes) + len(self.folders)

    def files(self, project: str, source: int) -> dict[str, str]:
        name = str(canonicalize_name(project))
        where = self.indexes[source] if source < len(self.indexes) else str(self.folders[source - len(self.indexes)])
        key = (where, name)
        if key not in self._cache:
            if source >= len(self.indexes):
                self._cache[key] = _folder(Path(where), name)
            elif where.startswith("file:"):
                self._cache[key] = _local_index(where, name)
            else:
                self._cache[key] = _remote_index(where, name, self.ca_bundle, self.deadline_s, self.backoff_s)
        return self._cache[key]


def _folder(folder: Path, project: str) -> dict[str, str]:
    """The wheels of `project` in a find-links folder, each hashed (once per run: staging.sha256_of)."""
    try:
        entries = sorted(folder.iterdir()) if folder.is_dir() else []
    except OSError as exc:
        raise RunFailure(f"cannot list the wheel folder {folder}: {exc.strerror}") from None
    found = {}
    for path in entries:
        release = release_of(path.name)
        if release is not None and release[0] == project and path.is_file():
            try:
                found[path.name] = sha256_of(path)
            except UserError as exc:
                raise RunFailure(f"cannot read the wheel {path}: {exc.message}") from None
    return found


def _local_index(url: str, project: str) -> dict[str, str]:
    """A file:// simple index's page of `project` (<root>/<project>/index.html); none when it has none."""
    page = Path(url2pathname(urlsplit(url).path)) / project / "index.html"
    if not page.exists():
        return {}
    try:
        body = fsio.read_bytes(page, MAX_PAGE, "simple index page")
        return files_of(body, "text/html", str(page))
    except (UserError, PageError) as exc:
        raise RunFailure(f"the local index {url} cannot be read for {project}: {exc}") from None


def _remote_index(base: str, project: str, ca_bundle: Path | None, deadline_s: float, backoff_s: float) -> dict[str, str]:
    shown = printable(redact(base))
    url, auth = _without_credentials(base)
    page = f"{url.rstrip('/')}/{quote(project, safe='')}/"
    where = transport.origin(page)
    context = ssl.create_default_context(cafile=str(ca_bundle) if ca_bundle else None) if page.startswith("https://") else None
    local = urlsplit(page).hostname in ("127.0.0.1", "localhost", "::1")
    opener = transport.opener(context, {} if local else None, (where, auth) if auth and where else None)
    request = urllib.request.Request(page, headers={"Accept": ACCEPT, "User-Agent": f"gpu-image-builder/{__version__}"})
    if auth:
        request.add_unredirected_header("Authorization", auth)

    def once(attempt: int) -> tuple[bytes, str] | None:
        try:
            with opener.open(request, timeout=deadline.socket_timeout(TIMEOUT_S)) as response:
                return _bounded(response, shown, project), str(response.headers.get("Content-Type", ""))
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code == 404:
                return None  # not on this index
            if exc.code == 429 or exc.code >= 500:
                raise _Transient(f"HTTP {exc.code}") from None
            raise RunFailure(f"the package index {shown} answered HTTP {exc.code} for {project}: check its URL and credentials") from None
        except transport.Refused as exc:
            raise RunFailure(f"the package index {shown} {printable(redact(str(exc)), 200)} for {project}; refused") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise RunFailure(
                    f"cannot reach the package index {shown} (TLS: {reason.verify_message}): give its CA bundle (--ca-bundle)"
                ) from None
            raise _Transient(printable(" ".join(str(reason).split()) or type(reason).__name__, 200)) from None

    try:
        with transport.Deadline(deadline_s) as deadline:
            got = retry_network(
                once, flake=lambda exc: isinstance(exc, _Transient), attempts=ATTEMPTS, wait_s=backoff_s, time_left=deadline.left
            )
            if deadline.expired:
                raise _Transient("the deadline passed")
    except GaveUp as exc:
        raise RunFailure(f"cannot read {project}'s page from the package index {shown} ({exc.reason}; {exc.attempts} tries)") from None
    except _Transient as exc:
        raise RunFailure(f"no complete page for {project} from the package index {shown} within {deadline_s:g} s ({exc})") from None
    if got is None:
        return {}
    try:
        return files_of(got[0], got[1], f"{shown} for {project}")
    except PageError as exc:
        raise RunFailure(f"the package index {shown} answered a page that is not a simple index page ({exc})") from None


def _bounded(response: Any, shown: str, project: str) -> bytes:
    body = bytes(response.read(MAX_PAGE + 1))
    if len(body) > MAX_PAGE:
        raise RunFailure(f"the package index {shown} answered more than {MAX_PAGE // 2**20} MiB for {project}: not a project page")
    return body


def _without_credentials(url: str) -> tuple[str, str | None]:
    """The URL without `user:password@`, and the Basic Authorization header for them."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, None
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    netloc = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)), "Basic " + base64.b64encode(pair.encode()).decode()
