"""catalog/ beside matrix.yaml: known-good.json (one record per image id, the latest published
digest) and manifests/<id>.txt (pip freeze, dpkg list, key environment of that digest).

Every change is a read-modify-write under a file lock, written to a temporary sibling and renamed
into place: two publishers at once both land, a reader never sees half a file, and a publish that
fails before `add` leaves the catalog byte for byte as it was.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path

from builder.catalog.indexes import INDEX_FILE, IndexError_, IndexRecord, index_from_json, render_indexes
from builder.catalog.records import SCHEMA, KnownGood, RecordError, from_json
from builder.util.errors import UserError
from builder.util.fsio import MiB, dump_json, file_lock, read_json, write_atomic

CATALOG_FILE = "known-good.json"
MANIFESTS = "manifests"
EVIDENCE = "evidence"  # SBOMs, attestations, signed record exports and their signatures (builder/publish/evidence.py)
LOCK_WAIT_S = 120
MAX_BYTES = 32 * MiB  # ~2 KB a record: some 16,000 images; a file beyond this is not a catalog


@dataclass(frozen=True)
class Catalog:
    root: Path  # the catalog/ folder
    named: bool = False  # given by the user (--catalog): a missing folder is a mistake, not an empty catalog

    @property
    def file(self) -> Path:
        return self.root / CATALOG_FILE

    @property
    def manifests(self) -> Path:
        return self.root / MANIFESTS

    @property
    def evidence(self) -> Path:
        return self.root / EVIDENCE

    @property
    def index_file(self) -> Path:
        return self.root / INDEX_FILE

    def _lock(self) -> AbstractContextManager[object]:
        self.root.mkdir(parents=True, exist_ok=True)
        return file_lock(self.root / f".{CATALOG_FILE}.lock", timeout=LOCK_WAIT_S)

    def load(self) -> tuple[KnownGood, ...]:
        """The records, sorted by id. An absent known-good.json is an empty catalog; an absent
        folder too, unless the user named it (then it is a typo, and one line says so)."""
        if not os.path.isdir(self.root):  # os.path: False, never an exception, for a name too long
            if self.named or os.path.lexists(self.root):
                what = "is not a folder" if os.path.lexists(self.root) else "no such catalog folder"
                raise UserError(
                    f"{what}; give the folder that holds {CATALOG_FILE} (or leave --catalog out for catalog/ beside matrix.yaml)",
                    str(self.root),
                )
            return ()
        if not os.path.lexists(self.file):
            return ()
        where = str(self.file)
        data = read_json(self.file, MAX_BYTES, "catalog file")
        if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("images"), list):
            raise UserError(f'{where}: expected {{"schema": {SCHEMA}, "images": [...]}}; restore it from git')
        try:
            records = tuple(from_json(item, where) for item in data["images"])
        except RecordError as exc:
            raise UserError(f"{exc}; restore the file from git or remove that record") from None
        ids = [r.id for r in records]
        if len(set(ids)) != len(ids):
            raise UserError(f"{where}: an image id appears twice; keep one record per id")
        return tuple(sorted(records, key=lambda r: r.id))

    def add(
        self, records: Sequence[KnownGood], manifests: dict[str, str], evidence: Mapping[str, str | None] | None = None
    ) -> tuple[KnownGood, ...]:
        """Upsert records by id (the new digest replaces the old) with their manifests and evidence
        files (name -> text; None removes an earlier digest's file of that name, e.g. its signature);
        returns the catalog. The evidence is written before the records that it belongs to."""
        with self._lock():
            by_id = {r.id: r for r in self.load()}
            for record in records:
                taken = set(record.floating)  # a floating tag points at one image: the newest record took it
                for other in list(by_id.values()):
                    if other.id != record.id and taken & set(other.floating):
                        by_id[other.id] = replace(other, floating=tuple(t for t in other.floating if t not in taken))
                by_id[record.id] = record
            self.manifests.mkdir(parents=True, exist_ok=True)
            for image_id, text in sorted(manifests.items()):
                write_atomic(self.manifests / f"{image_id}.txt", text)
            for name, content in sorted((evidence or {}).items()):
                if "/" in name or name.startswith("."):
                    raise ValueError(f"evidence file name {name!r} must be a plain file name")
                if content is None:
                    (self.evidence / name).unlink(missing_ok=True)
                else:
                    self.evidence.mkdir(parents=True, exist_ok=True)
                    write_atomic(self.evidence / name, content)
            merged = tuple(sorted(by_id.values(), key=lambda r: r.id))
            write_atomic(self.file, render(merged))
            return merged

    def indexes(self) -> dict[str, IndexRecord]:
        """name -> the multi-platform index last pushed for it (catalog/indexes.json; absent: none)."""
        if not os.path.isfile(self.index_file):
            return {}
        where = str(self.index_file)
        data = read_json(self.index_file, MAX_BYTES, "index file")
        if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("indexes"), list):
            raise UserError(f'{where}: expected {{"schema": {SCHEMA}, "indexes": [...]}}; restore it from git')
        try:
            found = [index_from_json(item, where) for item in data["indexes"]]
        except IndexError_ as exc:
            raise UserError(f"{exc}; restore the file from git or remove that index") from None
        return {index.name: index for index in found}

    def add_index(self, index: IndexRecord) -> None:
        """Upsert the index of `index.name` (read-modify-write under the catalog's lock)."""
        with self._lock():
            known = self.indexes()
            known[index.name] = index
            write_atomic(self.index_file, dump_json(render_indexes(known)))


def render(records: Sequence[KnownGood]) -> str:
    """The catalog file's bytes: deterministic (sorted records, sorted keys, one trailing newline)."""
    doc = {"schema": SCHEMA, "images": [r.to_json() for r in sorted(records, key=lambda r: r.id)]}
    return dump_json(doc)
