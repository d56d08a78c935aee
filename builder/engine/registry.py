"""The registry's own HTTP API (OCI distribution), for the one thing the Docker engine cannot do:
put an image index (manifest list) that names each platform's manifest.

The Registry protocol is what publish uses (tests give it tests/fake_registry.py); HttpRegistry is
the adapter. It speaks plain HTTP to a registry on the loopback (127.0.0.1, localhost: what Docker
itself treats as insecure by default) and HTTPS, checked against the host's CA bundle, to any other.
Credentials are those `docker login` stored in $DOCKER_CONFIG/config.json (`auths`, base64 user:pass),
sent only after the registry asks (Basic, or Bearer through its token realm); a credential helper's
store is not read, and a registry that refuses says so in one line naming `docker login`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from builder.catalog.indexes import DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST
from builder.engine.port import EngineFault

ACCEPT = ", ".join((OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST))
MAX_MANIFEST = 4 * 1024 * 1024  # the OCI distribution spec's limit a registry must accept
LOOPBACK = re.compile(r"^(127(?:\.\d{1,3}){3}|localhost|\[::1\])(?::\d{1,5})?$")
TIMEOUT_S = 60


@dataclass(frozen=True)
class Manifest:
    media_type: str
    digest: str  # sha256:<hex> of `body`
    body: bytes


class Registry(Protocol):
    """What publish needs of a registry beyond the engine's push: read a manifest, put one."""

    def manifest(self, repository: str, reference: str) -> Manifest:
        """repository (host[:port]/path) and a tag or sha256 digest; EngineFault when it cannot be read."""
        ...

    def put_manifest(self, repository: str, tag: str, media_type: str, body: bytes) -> str:
        """Put `body` as repository:tag; the digest the registry reports (checked against the body)."""
        ...

    def blob(self, repository: str, digest: str, limit: int) -> bytes:
        """The blob `digest` (sha256:<hex>) of `repository`, checked against its digest; EngineFault
        when it cannot be read, is larger than `limit` bytes, or is not what its digest says."""
        ...


def split(repository: str) -> tuple[str, str]:
    """127.0.0.1:5000/gpu-images -> ("127.0.0.1:5000", "gpu-images"); Docker Hub names keep their host."""
    host, _, path = repository.partition("/")
    if not path or ("." not in host and ":" not in host and host != "localhost"):
        return "registry-1.docker.io", repository if path else f"library/{repository}"
    return host, path


def digest_of(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


class HttpRegistry:
    def __init__(self, ca_bundle: Path | None = None, docker_config: Path | None = None) -> None:
        self._context = ssl.create_default_context(cafile=str(ca_bundle) if ca_bundle else None)
        self._config = docker_config or Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker")) / "config.json"
        self._tokens: dict[tuple[str, str], str] = {}  # (host, scope) -> Authorization header value

    def manifest(self, repository: str, reference: str) -> Manifest:
        host, path = split(repository)
        status, headers, body = self._call("GET", host, path, f"/v2/{path}/manifests/{reference}", {"Accept": ACCEPT}, None, "pull")
        if status != 200:
            raise EngineFault(f"{repository}@{reference}: the registry answered {status} to reading its manifest", status)
        media_type = headers.get("content-type", "").split(";")[0].strip()
        if not media_type:
            try:
                found = json.loads(body)
            except ValueError:
                found = None
            media_type = str(found.get("mediaType", "")) if isinstance(found, dict) else ""
        return Manifest(media_type, digest_of(body), body)

    def put_manifest(self, repository: str, tag: str, media_type: str, body: bytes) -> str:
        host, path = split(repository)
        headers = {"Content-Type": media_type}
        status, answer, text = self._call("PUT", host, path, f"/v2/{path}/manifests/{tag}", headers, body, "pull,push")
        if status not in (200, 201):
            detail = text[:200].decode(errors="replace").strip()
            raise EngineFault(f"{repository}:{tag}: the registry refused the manifest ({status}): {detail}", status)
        reported = answer.get("docker-content-digest", digest_of(body))
        if reported != digest_of(body):
            raise EngineFault(f"{repository}:{tag}: the registry reports digest {reported}, not the {digest_of(body)} that was sent")
        return reported

    def blob(self, repository: str, digest: str, limit: int) -> bytes:
        host, path = split(repository)
        status, _, body = self._call("GET", host, path, f"/v2/{path}/blobs/{digest}", {}, None, "pull", limit)
        if status != 200:
            raise EngineFault(f"{repository}@{digest}: the registry answered {status} to reading the blob", status)
        if len(body) > limit:
            raise EngineFault(f"{repository}@{digest}: the blob is larger than {limit} bytes, which no evidence is")
        if digest_of(body) != digest:
            raise EngineFault(f"{repository}@{digest}: the registry sent a blob whose digest is {digest_of(body)}")
        return body

    def _call(
        self, method: str, host: str, path: str, url_path: str, headers: Mapping[str, str], body: bytes | None, actions: str,
        limit: int = MAX_MANIFEST,
    ) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
        scope = f"repository:{path}:{actions}"
        base = f"{'http' if LOOPBACK.match(host) else 'https'}://{host}"
        status, answer, text = self._open(method, base + url_path, self._with_auth(headers, host, scope), body, limit)
        if status == 401:  # asked to log in: once, as the challenge says, then the same request again
            self._tokens[host, scope] = self._authorize(host, answer.get("www-authenticate", ""), scope)
            status, answer, text = self._open(method, base + url_path, self._with_auth(headers, host, scope), body, limit)
            if status == 401:
                raise EngineFault(f"{host}: the registry refused the credentials for {path} (log in with `docker login {host}`)", 401)
        return status, answer, text

    def _with_auth(self, headers: Mapping[str, str], host: str, scope: str) -> dict[str, str]:
        token = self._tokens.get((host, scope))
        return {**headers, **({"Authorization": token} if token else {})}

    def _open(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, limit: int = MAX_MANIFEST
    ) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({} if LOOPBACK.match(urllib.parse.urlsplit(url).netloc) else None),
            urllib.request.HTTPSHandler(context=self._context),
        )
        try:
            with opener.open(request, timeout=TIMEOUT_S) as answer:
                return answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read(limit + 1)
        except urllib.error.HTTPError as exc:
            return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read(4096)
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise EngineFault(f"{urllib.parse.urlsplit(url).netloc}: the registry cannot be reached: {reason}") from None

    def _authorize(self, host: str, challenge: str, scope: str) -> str:
        """The Authorization header the registry's challenge asks for (Basic, or a Bearer token from its realm)."""
        user = self._login(host)
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() == "basic":
            if user is None:
                raise EngineFault(f"{host}: the registry asks for a login (run `docker login {host}`)", 401)
            return "Basic " + user
        if scheme.lower() != "bearer":
            raise EngineFault(f"{host}: the registry asks for {scheme or 'an unknown'} authentication, which builder does not speak", 401)
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        query = urllib.parse.urlencode({"service": fields.get("service", host), "scope": fields.get("scope", scope)})
        status, _, text = self._open("GET", f"{fields.get('realm', '')}?{query}", {"Authorization": "Basic " + user} if user else {}, None)
        if status != 200:
            raise EngineFault(f"{host}: its token service answered {status} (log in with `docker login {host}`)", status)
        answer = json.loads(text)
        token = answer.get("token") or answer.get("access_token")
        if not token:
            raise EngineFault(f"{host}: its token service gave no token")
        return f"Bearer {token}"

    def _login(self, host: str) -> str | None:
        """base64(user:password) that `docker login` stored for `host`, or None."""
        try:
            auths = json.loads(self._config.read_text(encoding="utf-8")).get("auths", {})
        except (OSError, ValueError, AttributeError):
            return None
        for key in (host, f"https://{host}", f"http://{host}", *(("https://index.docker.io/v1/",) if "docker.io" in host else ())):
            entry = auths.get(key) if isinstance(auths, dict) else None
            if isinstance(entry, dict) and isinstance(entry.get("auth"), str) and entry["auth"]:
                base64.b64decode(entry["auth"], validate=True)  # refuses a damaged entry here, not at the registry
                return str(entry["auth"])
        return None
