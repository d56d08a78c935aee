"""A built image made reproducible: its saved archive rewritten so its ID depends on what it holds.

The classic builder (and BuildKit without rewrite-timestamp) writes the build's clock into the image:
the config's `created` and each history entry's, the last step's container ID (`container`,
`container_config`), the engine's version (`docker_version`), and the mtimes of every file a RUN or
COPY step wrote. Here, on the archive `docker save` wrote (a docker-archive: manifest.json, the
config, one layer.tar per layer):

- every timestamp of the config is the lock's SOURCE_DATE_EPOCH, and the fields that name the build's
  container or engine are dropped (all optional in the image spec), as is `config.Image` (the ID of
  the build's previous step image);
- every layer above the base's is written again with its entries in the same order, each mtime
  clamped to the epoch, no user or group names and no access or change times (uid, gid, modes,
  links and extended attributes kept), which is what BuildKit's `rewrite-timestamp` does; the
  base's layers are left as they are, so the image still shares them;
- the config's diff IDs follow the rewritten layers, and the config is written as sorted compact JSON.

The image ID is the sha256 of that config, so the same lock on the same base gives the same ID.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import IO, Any

from builder.util.text import utc_stamp

DROPPED = ("container", "container_config", "docker_version")  # the build's container and engine, not the image's content
_TIMES = ("atime", "ctime", "mtime")


class NotAnArchive(Exception):
    """The saved file is not the docker-archive this rewrites (one line)."""


def normalize_config(config: dict[str, Any], epoch: int, diff_ids: list[str]) -> bytes:
    """The config with the epoch's timestamps, without the build's container and engine, and these diff IDs."""
    out = {k: v for k, v in config.items() if k not in DROPPED}
    if isinstance(config.get("config"), dict) and "Image" in config["config"]:
        out["config"] = {**config["config"], "Image": ""}  # the classic builder's last step image: an ID of this build's
    out["created"] = utc_stamp(epoch)
    out["history"] = [{**entry, "created": utc_stamp(epoch)} for entry in config.get("history") or []]
    out["rootfs"] = {**(config.get("rootfs") or {"type": "layers"}), "diff_ids": diff_ids}
    return json.dumps(out, sort_keys=True, separators=(",", ":")).encode()


def clamp_layer(source: IO[bytes], out: IO[bytes], epoch: int) -> str:
    """A layer tar rewritten with clamped times and no names (same entries, same order); its sha256 (the diff ID)."""
    digest = _Hashing(out)
    with tarfile.open(fileobj=source, mode="r|") as src, tarfile.open(fileobj=digest, mode="w|", format=tarfile.PAX_FORMAT) as dst:
        for member in src:
            member.mtime = min(int(member.mtime), epoch)
            member.uname, member.gname = "", ""
            member.pax_headers = {k: v for k, v in member.pax_headers.items() if k not in _TIMES and k not in ("uname", "gname")}
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    return "sha256:" + digest.hexdigest()


class _Hashing(io.RawIOBase):
    """A write-only stream that hashes what passes through it."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._sha = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = bytes(data)
        self._sha.update(view)
        self._out.write(view)
        return len(view)

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def normalize_archive(saved: Path, out: Path, epoch: int, keep: int, tags: list[str] | None = None) -> str:
    """Rewrite the docker-archive `saved` into `out`: the first `keep` layers (the base's) as they
    are, the rest clamped, the config normalized, named by `tags` when given (else as saved).
    Returns the new image ID (sha256 of the config)."""
    with tarfile.open(saved) as src:
        manifest = _json(src, "manifest.json")
        if not isinstance(manifest, list) or len(manifest) != 1:
            raise NotAnArchive(f"{saved.name}: manifest.json names {len(manifest) if isinstance(manifest, list) else 'no'} images, not one")
        entry = manifest[0]
        config = _json(src, entry["Config"])
        layers: list[str] = list(entry["Layers"])
        diff_ids: list[str] = list(config["rootfs"]["diff_ids"])
        if len(layers) != len(diff_ids) or keep > len(layers):
            raise NotAnArchive(f"{saved.name}: {len(layers)} layers for {len(diff_ids)} diff IDs, {keep} of them the base's")
        with tarfile.open(out, "w") as dst:
            for index, name in enumerate(layers):
                if index < keep:
                    _copy(src, dst, name)
                else:
                    diff_ids[index] = _clamped(src, dst, name, epoch, out.parent)
            body = normalize_config(config, epoch, diff_ids)
            image_id = "sha256:" + hashlib.sha256(body).hexdigest()
            config_name = image_id.removeprefix("sha256:") + ".json"
            _add(dst, config_name, body)
            named = {**entry, "Config": config_name, **({"RepoTags": tags} if tags is not None else {})}
            _add(dst, "manifest.json", json.dumps([named], separators=(",", ":")).encode())
    return image_id


def _json(src: tarfile.TarFile, name: str) -> Any:
    handle = src.extractfile(name)
    if handle is None:
        raise NotAnArchive(f"the saved image has no {name}")
    return json.loads(handle.read())


def _copy(src: tarfile.TarFile, dst: tarfile.TarFile, name: str) -> None:
    member = src.getmember(name)
    dst.addfile(member, src.extractfile(member))


def _clamped(src: tarfile.TarFile, dst: tarfile.TarFile, name: str, epoch: int, scratch: Path) -> str:
    member = src.getmember(name)
    handle = src.extractfile(member)
    if handle is None:
        raise NotAnArchive(f"the saved image's {name} is not a file")
    temp = scratch / (hashlib.sha256(name.encode()).hexdigest()[:16] + ".layer")
    try:
        with temp.open("wb") as out:
            diff_id = clamp_layer(handle, out, epoch)
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = temp.stat().st_size, 0o644, epoch
        with temp.open("rb") as data:
            dst.addfile(info, data)
    finally:
        temp.unlink(missing_ok=True)
    return diff_id


def _add(dst: tarfile.TarFile, name: str, body: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(body), 0o644
    dst.addfile(info, io.BytesIO(body))
