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
- what tells BuildKit's layers from the classic builder's but says nothing of the image goes: a
  directory entry with nothing below it in its layer that repeats the directory beneath (same mode,
  owner and extended attributes: only its mtime differs, and that is clamped anyway; BuildKit's RUN
  leaves one for /etc, where it mounted hosts and resolv.conf), and a layer left with no entry (a
  WORKDIR whose folder exists: BuildKit commits an empty layer, the classic builder none), whose
  history entry is then marked `empty_layer`. So an image `docker buildx bake` built from the same
  context normalizes to the same diff IDs (docs/reproducible.md, "bake");
- the config's diff IDs follow the rewritten layers, and the config is written as sorted compact JSON.

The image ID is the sha256 of that config, so the same lock on the same base gives the same ID.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import itertools
import json
import re
import tarfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, Protocol

from builder.util.text import utc_stamp

DROPPED = ("container", "container_config", "docker_version")  # the build's container and engine, not the image's content
_TIMES = ("atime", "ctime", "mtime")
_XATTR = "SCHILY.xattr."
WHITEOUT, OPAQUE = ".wh.", ".wh..wh..opq"  # the image spec's deletion markers
DirKey = tuple[int, int, int, tuple[tuple[str, str], ...]]  # a directory's permission bits, uid, gid and extended attributes


class NotAnArchive(Exception):
    """The saved file is not the docker-archive this rewrites (one line)."""


class LayerSource(Protocol):
    """A layer tar made on the host, put into an archive as it is (its diff ID is its sha256): the
    layer maker's (lock/wheel_tar.py `Layer`: its bytes made from the wheels as they are copied), or
    a tar on disk (FileLayer)."""

    @property
    def size(self) -> int: ...

    def members(self) -> list[tarfile.TarInfo]: ...

    def reader(self) -> BinaryIO: ...


@dataclass(frozen=True)
class FileLayer:
    """A layer tar on disk as a LayerSource."""

    path: Path

    @property
    def size(self) -> int:
        return self.path.stat().st_size

    def members(self) -> list[tarfile.TarInfo]:
        try:
            with tarfile.open(self.path, mode="r:") as layer:  # a layer is a plain tar
                return layer.getmembers()
        except tarfile.TarError as exc:
            raise NotAnArchive(f"{self.path.name} is not a tar ({' '.join(str(exc).split())})") from None

    def reader(self) -> BinaryIO:
        return self.path.open("rb")


def normalize_config(
    config: dict[str, Any], epoch: int, diff_ids: list[str], dropped: Iterable[int] = (), history: list[dict[str, Any]] | None = None
) -> bytes:
    """The config with the epoch's timestamps, without the build's container and engine, and these diff IDs;
    `dropped`: the indexes (among the layers as saved) of layers left out, whose history entries become
    empty; `history`: the entries as they are to be (then `dropped` is not read). The marker label of
    `marked` goes."""
    out = {k: v for k, v in config.items() if k not in DROPPED}
    inner = config.get("config")
    if isinstance(inner, dict):
        labels = inner.get("Labels")
        out["config"] = {
            **inner,
            **({"Image": ""} if "Image" in inner else {}),  # the classic builder's last step image: an ID of this build's
            **({"Labels": {k: v for k, v in labels.items() if k != MARKER_LABEL}} if isinstance(labels, dict) else {}),
        }
    out["created"] = utc_stamp(epoch)
    out["history"] = history if history is not None else list(_history(config.get("history") or [], epoch, set(dropped)))
    out["rootfs"] = {**(config.get("rootfs") or {"type": "layers"}), "diff_ids": diff_ids}
    return json.dumps(out, sort_keys=True, separators=(",", ":")).encode()


def _history(entries: list[dict[str, Any]], epoch: int, dropped: set[int]) -> Iterator[dict[str, Any]]:
    layer = 0  # the index of the layer the next entry that is not empty made
    for entry in entries:
        out = {**entry, "created": utc_stamp(epoch)}
        if not entry.get("empty_layer"):
            if layer in dropped:
                out["empty_layer"] = True
            layer += 1
        yield out


class Beneath:
    """The directories of the layers below the one being clamped (path -> DirKey), so a directory
    entry that only repeats one of them can be left out. The base's layers are read (headers only)
    the first time a path is not among those above it."""

    def __init__(self, base: Callable[[], Iterable[tarfile.TarInfo]] = lambda: ()) -> None:
        self._base: Callable[[], Iterable[tarfile.TarInfo]] | None = base
        self._above: list[list[tarfile.TarInfo]] = []
        self._dirs: dict[str, DirKey] = {}
        self._names: list[str] = []  # the keys of _dirs, sorted: a folder's subtree is one run of it

    def key(self, name: str) -> DirKey | None:
        if name not in self._dirs and self._base is not None:
            base, self._base = self._base, None
            above, self._dirs, self._names = self._above, {}, []
            self.add(base())  # the base first, then what the layers above it did
            for layer in above:
                self.add(layer)
        return self._dirs.get(name)

    def add(self, members: Iterable[tarfile.TarInfo]) -> None:
        """A layer applied on top: its whiteouts delete, its directories are known from here on."""
        members = list(members)
        if self._base is not None:
            self._above.append(members)
        for member in members:
            name = _path(member.name)
            folder, _, leaf = name.rpartition("/")
            if leaf == OPAQUE:
                self._forget(folder, keep_self=True)
            elif leaf.startswith(WHITEOUT):
                self._forget(f"{folder}/{leaf.removeprefix(WHITEOUT)}" if folder else leaf.removeprefix(WHITEOUT))
            elif member.isdir():
                if name not in self._dirs:
                    bisect.insort(self._names, name)
                self._dirs[name] = _dir_key(member)
            else:
                self._forget(name)

    def _forget(self, name: str, keep_self: bool = False) -> None:
        """`name`'s subtree is gone (and `name` itself unless `keep_self`): found by bisection, not by
        a scan of every known folder for every file of the layer (a torch venv's 15,000 files)."""
        below = f"{name}/" if name else ""
        start = end = bisect.bisect_left(self._names, below)
        while end < len(self._names) and self._names[end].startswith(below):
            del self._dirs[self._names[end]]
            end += 1
        del self._names[start:end]
        if not keep_self and name in self._dirs:
            del self._dirs[name]
            del self._names[bisect.bisect_left(self._names, name)]


def _path(name: str) -> str:
    return name.removeprefix("./").rstrip("/")


def _dir_key(member: tarfile.TarInfo) -> DirKey:
    xattrs = tuple(sorted((k, v) for k, v in member.pax_headers.items() if k.startswith(_XATTR)))
    return (member.mode & 0o7777, member.uid, member.gid, xattrs)


def _repeats(members: list[tarfile.TarInfo], beneath: Beneath) -> set[str]:
    """The directory entries with nothing below them in this layer that repeat the directory beneath."""
    parents = {_path(m.name).rpartition("/")[0] for m in members}
    ancestors = set(parents)
    for parent in parents:
        while parent:
            parent = parent.rpartition("/")[0]
            ancestors.add(parent)
    return {_path(m.name) for m in members if m.isdir() and _path(m.name) not in ancestors and beneath.key(_path(m.name)) == _dir_key(m)}


def clamp_layer(source: IO[bytes], out: IO[bytes], epoch: int, beneath: Beneath | None = None) -> str | None:
    """A layer tar rewritten with clamped times and no names (same entries, same order, less what
    repeats a directory of `beneath`); its sha256 (the diff ID), or None when no entry is left
    (nothing is written then). `source` is read twice: it must be seekable."""
    with tarfile.open(fileobj=source, mode="r:") as src:
        members = src.getmembers()
        dropped = _repeats(members, beneath) if beneath is not None else set()
        kept = [m for m in members if _path(m.name) not in dropped]
        if beneath is not None:
            beneath.add(kept)
        if not kept:
            return None
        digest = _Hashing(out)
        with tarfile.open(fileobj=digest, mode="w|", format=tarfile.PAX_FORMAT) as dst:
            for member in kept:
                data = src.extractfile(member) if member.isfile() else None
                member.mtime = min(int(member.mtime), epoch)
                member.uname, member.gname = "", ""
                member.pax_headers = {k: v for k, v in member.pax_headers.items() if k not in _TIMES and k not in ("uname", "gname")}
                dst.addfile(member, data)
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


MARKER_LABEL = "io.builder.layer"  # `builder build`'s stand-in for a step that ADDs a layer tar made on the host
_MARKER = re.compile(r"\bLABEL " + re.escape(MARKER_LABEL) + r'="?([\w.-]+)"?')
_BUILDKIT_ADD = re.compile(r"^ADD ([\w.-]+) / # buildkit$")  # BuildKit's history of `ADD venv.tar /`


def marked(dockerfile: str, names: Iterable[str]) -> str:
    """The Dockerfile with each `ADD <name> /` step (a layer tar made on the host) replaced by a
    LABEL step naming it: the build commits no layer for it and sends no tar as its context;
    `normalize_archive` puts the tar in that place. NotAnArchive unless each is there once."""
    lines = dockerfile.split("\n")
    for name in names:
        at = [i for i, line in enumerate(lines) if line.strip() == f"ADD {name} /"]
        if len(at) != 1:
            raise NotAnArchive(f"the Dockerfile has {len(at)} steps `ADD {name} /`, not one")
        lines[at[0]] = f"LABEL {MARKER_LABEL}={name}"
    return "\n".join(lines)


def from_base(dockerfile: str, below: str, base: str) -> str:
    """The Dockerfile built FROM `base` instead of `below` (a CUDA line's image: the base plus one
    layer): `normalize_archive` splices that layer back in (`Splice`). NotAnArchive unless the
    Dockerfile has one FROM and it names `below` (after flags such as an arm64 image's
    `--platform=linux/arm64`, which stay)."""
    lines = dockerfile.split("\n")
    at = [i for i, line in enumerate(lines) if line.strip().upper().startswith("FROM ")]
    words = lines[at[0]].split() if len(at) == 1 else []
    flags = words[1:-1]
    if not words or words[0] != "FROM" or words[-1] != below or not all(flag.startswith("--") for flag in flags):
        raise NotAnArchive(f"the Dockerfile does not say `FROM {below}` once (its FROM steps: {len(at)})")
    lines[at[0]] = " ".join(["FROM", *flags, base])
    return "\n".join(lines)


@dataclass(frozen=True)
class Splice:
    """One layer the engine has but the saved image was built without (`from_base`): a CUDA line's
    NVIDIA layer, put back where the line's image has it, so the normalized image is the one a build
    FROM the line's image gives, bit for bit, without `docker save` streaming the line's gigabytes.
    `at_layer`: the base's layer count (the layer goes above them); `at_history`: the base's history
    entries (its entry goes after them); `labels`: what the line image's config adds to the base's;
    `members`: the layer's entries (headers), read only when the normalization has to know a
    directory beneath (`Beneath`)."""

    diff_id: str
    at_layer: int
    at_history: int
    entry: Mapping[str, Any]
    labels: Mapping[str, str]
    members: Callable[[], Iterable[tarfile.TarInfo]]

    def into(self, config: dict[str, Any], layers: list[str]) -> tuple[dict[str, Any], list[str]]:
        """The saved config and manifest layers with this layer spliced in (its file is not in the archive)."""
        history = list(config.get("history") or [])
        made = sum(1 for entry in history[: self.at_history] if not entry.get("empty_layer"))
        if len(history) < self.at_history or made != self.at_layer or len(layers) < self.at_layer:
            raise NotAnArchive(
                f"the saved image does not start with its base's {self.at_layer} layers and {self.at_history} history entries"
            )
        inner = dict(config.get("config") or {})
        inner["Labels"] = {**(inner.get("Labels") or {}), **self.labels}
        rootfs = dict(config.get("rootfs") or {})
        diff_ids = list(rootfs.get("diff_ids") or [])
        spliced = {
            **config,
            "config": inner,
            "history": [*history[: self.at_history], dict(self.entry), *history[self.at_history :]],
            "rootfs": {**rootfs, "diff_ids": [*diff_ids[: self.at_layer], self.diff_id, *diff_ids[self.at_layer :]]},
        }
        return spliced, [*layers[: self.at_layer], self.diff_id.removeprefix("sha256:") + "/layer.tar", *layers[self.at_layer :]]


def added_by(entry: dict[str, Any], files: Mapping[str, LayerSource]) -> str | None:
    """The layer tar of `files` this history entry stands for: `marked`'s LABEL (the classic builder),
    or BuildKit's own `ADD <name> /` (bake builds the Dockerfile as it is)."""
    text = str(entry.get("created_by") or "")
    found = _MARKER.search(text) if entry.get("empty_layer") else _BUILDKIT_ADD.match(text)
    return found.group(1) if found and found.group(1) in files else None


def normalize_archive(
    saved: Path,
    out: Path | IO[bytes],
    epoch: int,
    keep: int,
    tags: list[str] | None = None,
    *,
    kept_files: bool = True,
    files: Mapping[str, LayerSource] | None = None,
    splice: Splice | None = None,
) -> str:
    """Rewrite the docker-archive `saved` into `out` (a file, or a stream written in order: a
    load's pipe, engine port `load_stream`): the first `keep` layers (the base's) as they
    are, the rest clamped (a layer left empty is left out), the config normalized, named by `tags`
    when given (else as saved). Returns the new image ID (sha256 of the config).

    `files`: layer tars made on the host (venv.tar, nvidia.tar), each the layer of the step that
    stands for it (`added_by`): the tar as it is, its diff ID its sha256, its history entry
    `ADD <name> /`. Where the build committed a layer for it (BuildKit), that layer is left out.

    Without `kept_files`, the base's layers are named by the manifest but their files are left out
    of `out`: an engine that has those layers (the one the image was built on) loads it all the same
    (a load reads a layer's file only when no layer of that chain is there), and a line member's
    archive is then its own GBs, not its base's and its line's too.

    `splice`: a layer the image was built without, put in above the first `keep` layers (which
    then include it): the archive names it, and an engine that has it (the line's image) loads the
    image on it; needs `kept_files` off."""
    if splice is not None and kept_files:
        raise ValueError("a spliced layer's file is not in the archive: kept_files must be off")
    files = dict(files or {})
    with tarfile.open(saved) as src:
        manifest = archive_json(src, "manifest.json")
        if not isinstance(manifest, list) or len(manifest) != 1:
            raise NotAnArchive(f"{saved.name}: manifest.json names {len(manifest) if isinstance(manifest, list) else 'no'} images, not one")
        entry = manifest[0]
        config = archive_json(src, entry["Config"])
        layers: list[str] = list(entry["Layers"])
        below = layers[:keep]  # the base's layer files (of the archive `docker save` wrote)
        if splice is not None:
            config, layers = splice.into(config, layers)
            keep += 1
        diff_ids: list[str] = list(config["rootfs"]["diff_ids"])
        if len(layers) != len(diff_ids) or keep > len(layers):
            raise NotAnArchive(f"{saved.name}: {len(layers)} layers for {len(diff_ids)} diff IDs, {keep} of them the base's")
        steps = _steps(config.get("history") or [], len(layers), files)
        beneath = Beneath(lambda: itertools.chain(_members(src, below), splice.members() if splice is not None else ()))
        kept_layers, kept_ids, history = [], [], []
        with writing(out) as dst:
            for entry_in, index, name in steps:
                if name is not None:
                    kept_layers.append(f"{name}/layer.tar")
                    kept_ids.append(_file_layer(dst, files[name], f"{name}/layer.tar", beneath))
                    history.append({**entry_in, "created": utc_stamp(epoch), "created_by": f"ADD {name} /"} | {"empty_layer": False})
                    continue
                if index is None:
                    history.append({**entry_in, "created": utc_stamp(epoch)})
                    continue
                if index < keep:
                    diff_id: str | None = diff_ids[index]
                    if kept_files:
                        _copy(src, dst, layers[index])
                else:
                    diff_id = _clamped(src, dst, layers[index], epoch, saved.parent, beneath)
                history.append({**entry_in, "created": utc_stamp(epoch)} | ({"empty_layer": True} if diff_id is None else {}))
                if diff_id is not None:
                    kept_layers.append(layers[index])
                    kept_ids.append(diff_id)
            written = [{k: v for k, v in h.items() if k != "empty_layer" or v} for h in history] if config.get("history") else []
            body = normalize_config(config, epoch, kept_ids, history=written)
            image_id = "sha256:" + hashlib.sha256(body).hexdigest()
            config_name = image_id.removeprefix("sha256:") + ".json"
            _add(dst, config_name, body)
            named = {**entry, "Config": config_name, "Layers": kept_layers, **({"RepoTags": tags} if tags is not None else {})}
            _add(dst, "manifest.json", json.dumps([named], separators=(",", ":")).encode())
    return image_id


Step = tuple[dict[str, Any], int | None, str | None]  # (history entry, the saved layer it made or None, the host tar it stands for)


def _steps(history: list[dict[str, Any]], count: int, files: Mapping[str, LayerSource]) -> list[Step]:
    """The history entries with the saved layer each made and the host tar each stands for; a layer
    whose step stands for a host tar is replaced by it. NotAnArchive when the history does not
    account for every saved layer once, or a host tar for no step or for two."""
    out: list[Step] = []
    layer = 0
    for entry in history:
        name = added_by(entry, files)
        made = None if entry.get("empty_layer") else layer
        layer += made is not None
        out.append((entry, None if name is not None else made, name))
    if not history:
        out = [({}, index, None) for index in range(count)]  # an archive with no history: its layers as they are
    elif layer != count:
        raise NotAnArchive(f"the saved image's history makes {layer} layers, its manifest names {count}")
    placed = [name for _, _, name in out if name is not None]
    missing = sorted(set(files) - set(placed)) or sorted({n for n in placed if placed.count(n) > 1})
    if missing:
        raise NotAnArchive(f"the saved image has {placed.count(missing[0])} steps that add {missing[0]}, not one")
    return out


def _file_layer(dst: tarfile.TarFile, source: LayerSource, name: str, beneath: Beneath) -> str:
    """A host-made layer tar into the archive as it is; its sha256 (the diff ID)."""
    beneath.add(source.members())
    return add_layer(dst, source, name)


def add_layer(dst: tarfile.TarFile, source: LayerSource, name: str, mtime: int = 0) -> str:
    """`source`'s bytes into the archive as the file `name`, hashed as they are copied (its diff ID
    costs no second read of its gigabytes); returns that diff ID."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = source.size, 0o644, mtime
    with source.reader() as data:
        hashing = HashingReader(data)
        dst.addfile(info, hashing)
    return "sha256:" + hashing.hexdigest()


class HashingReader(io.RawIOBase):
    """A read-only stream that hashes what is read through it."""

    def __init__(self, source: IO[bytes]) -> None:
        self._source = source
        self._sha = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        data = self._source.read(size)
        self._sha.update(data)
        return data

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


COPY_BUFFER = 4 << 20  # an archive's copies of layer files, 4 MiB at a time (tarfile's default is 16 KiB)


def writing(out: Path | IO[bytes], format: int = tarfile.PAX_FORMAT) -> tarfile.TarFile:
    """A tar written to a file, or in order to a stream (no seek, no tell: a pipe). A stream keeps
    tarfile's own block size: its stream appends each 16 KiB copy of a layer file to the block
    buffer and slices the block off, bytes copied each time, so a 4 MiB block cost 4.4 CPU-s per GB
    of layers, the 10 KiB default 0.3 (benchmarks/bench_tar_stream.py)."""
    if isinstance(out, Path):
        return tarfile.TarFile(out, "w", format=format, copybufsize=COPY_BUFFER)
    return tarfile.open(fileobj=out, mode="w|", format=format)


def _members(src: tarfile.TarFile, layers: list[str]) -> Iterator[tarfile.TarInfo]:
    """The entries (headers) of these layers of the saved image, in order."""
    for name in layers:
        handle = src.extractfile(name)
        if handle is None:
            raise NotAnArchive(f"the saved image's {name} is not a file")
        with tarfile.open(fileobj=handle, mode="r:") as layer:
            yield from layer.getmembers()


def archive_json(src: tarfile.TarFile, name: str, what: str = "the saved image") -> Any:
    """A JSON member of a `docker save` archive (manifest.json, a config); NotAnArchive when it is missing or not JSON."""
    try:
        handle = src.extractfile(name)
    except KeyError:
        handle = None
    if handle is None:
        raise NotAnArchive(f"{what} has no {name}")
    try:
        return json.loads(handle.read())
    except ValueError as exc:
        raise NotAnArchive(f"{what}'s {name} is not JSON ({exc})") from None


def _copy(src: tarfile.TarFile, dst: tarfile.TarFile, name: str) -> None:
    member = src.getmember(name)
    dst.addfile(member, src.extractfile(member))


def _clamped(src: tarfile.TarFile, dst: tarfile.TarFile, name: str, epoch: int, scratch: Path, beneath: Beneath) -> str | None:
    member = src.getmember(name)
    handle = src.extractfile(member)
    if handle is None:
        raise NotAnArchive(f"the saved image's {name} is not a file")
    temp = scratch / (hashlib.sha256(name.encode()).hexdigest()[:16] + ".layer")
    try:
        with temp.open("wb") as out:
            diff_id = clamp_layer(handle, out, epoch, beneath)
        if diff_id is None:
            return None
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
