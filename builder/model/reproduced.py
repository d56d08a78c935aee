"""Whether a rebuild is the published image: the pure comparison `builder reproduce` makes, and the
verdicts it keeps (build/results/reproduced.json) for `builder catalog` and `builder report`.

A published record's signed attestation names the tested image's ID and its layers' diff IDs
(publish/attestation.py `predicate.built`); a rebuild from the record's lock and base gives its own.
`compare` says `reproduced` when both are equal, else `differs: ` naming the first layer that
differs (its index, the diff ID expected and got, and what it is: a layer of the base, or the
Dockerfile step that made it, the venv layer first of all), or the config when every layer is equal.

The verdicts file holds one verdict per record id, for the digest it was about: a record published
again (another digest) has none until it is reproduced again. It is this host's observation, written
whole (a temporary sibling renamed into place under a file lock), never half a file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from builder.util.errors import UserError
from builder.util.fsio import MiB, dump_json, file_lock, read_json, write_atomic

SCHEMA = 1
MAX_BYTES = 8 * MiB
Outcome = Literal["reproduced", "differs", "not reproducible"]
OUTCOMES: tuple[Outcome, ...] = ("reproduced", "differs", "not reproducible")
LAYER_STEPS = ("RUN", "COPY", "ADD")  # the Dockerfile instructions that commit a layer (the classic builder: each one)
VENV_STEP = re.compile(r"^ADD\s+venv\.tar\s+/\s*$")  # lock/layer.py's canonical venv layer (templates/Dockerfile.j2)
_INSTRUCTION = re.compile(r"^\s*([A-Za-z]+)\s+(.*)$")
_WHICH = re.compile(r"^differs: (layer \d+|the config)")


@dataclass(frozen=True)
class Image:
    """An image as the comparison sees it: its ID (the sha256 of its config) and its layers, base first."""

    image_id: str
    diff_ids: tuple[str, ...]


@dataclass(frozen=True)
class Verdict:
    """One record's reproduction: what it was about (id, digest), the outcome and its line."""

    id: str
    digest: str  # the record's repository@sha256:... when it was checked
    outcome: Outcome
    line: str  # `reproduced: ...`, `differs: layer 6 (...)`, `not reproducible: built with RUN ...`
    checked: str = ""  # when (UTC, ISO 8601)

    @property
    def ok(self) -> bool:
        return self.outcome == "reproduced"

    @property
    def short(self) -> str:
        """The cell `builder catalog` shows: the outcome, and for a difference which layer."""
        which = _WHICH.match(self.line) if self.outcome == "differs" else None
        if which:
            return f"differs: {which.group(1)}"
        return f"{self.outcome} {self.checked[:10]}".strip()

    def to_json(self) -> dict[str, str]:
        return {"digest": self.digest, "outcome": self.outcome, "line": self.line, "checked": self.checked}


def layer_steps(dockerfile: str) -> tuple[str, ...]:
    """The steps of a one-stage Dockerfile that commit a layer (RUN, COPY, ADD), in order, each as
    its first line: what the layers above the base are, one for one."""
    steps = []
    continued = False
    for raw in dockerfile.splitlines():
        line = raw.strip()
        if continued:
            continued = line.endswith("\\")
            continue
        if not line or line.startswith("#"):
            continue
        continued = line.endswith("\\")
        found = _INSTRUCTION.match(line)
        if found and found.group(1).upper() in LAYER_STEPS:
            words = found.group(2).rstrip("\\").strip()
            steps.append(f"{found.group(1).upper()} {words}"[:120])
    return tuple(steps)


def describe(index: int, base_layers: int, base_ref: str, steps: Sequence[str]) -> str:
    """What layer `index` of the image is: one of the base's, or the step above the base that made it."""
    if index < base_layers:
        return f"a layer of the base {base_ref}"
    step = steps[index - base_layers] if index - base_layers < len(steps) else ""
    if not step:
        return "a layer above the base that the Dockerfile does not name"
    return f"the venv layer ({step})" if VENV_STEP.match(step) else f"the layer of `{step}`"


def first_difference(expected: Sequence[str], got: Sequence[str]) -> int | None:
    """The index of the first layer that differs (a missing layer counts), None when all are equal."""
    for index, (want, have) in enumerate(zip(expected, got, strict=False)):
        if want != have:
            return index
    return None if len(expected) == len(got) else min(len(expected), len(got))


def compare(
    expected: Image,
    got: Image,
    base_layers: int,
    base_ref: str,
    steps: Sequence[str],
    labels: Mapping[str, tuple[str | None, str | None]] | None = None,
) -> tuple[Outcome, str]:
    """The outcome and its line for a rebuild `got` of the published `expected`. `base_layers`: how
    many of the rebuild's layers are its base's; `steps`: the Dockerfile's layer steps above them
    (layer_steps); `labels`: each label that differs between the published config and the rebuild's,
    (published, rebuilt), named when every layer is equal but the image ID is not."""
    index = first_difference(expected.diff_ids, got.diff_ids)
    if index is not None:
        want = expected.diff_ids[index] if index < len(expected.diff_ids) else "no layer"
        have = got.diff_ids[index] if index < len(got.diff_ids) else "no layer"
        what = describe(index, base_layers, base_ref, steps)
        return "differs", f"differs: layer {index} ({what}): expected {want}, got {have}"
    if expected.image_id != got.image_id:
        said = ""
        for name, (published, rebuilt) in sorted((labels or {}).items()):
            said = f"; label {name} is {published!r} published, {rebuilt!r} rebuilt"
            break
        return "differs", (
            f"differs: the config (every one of the {len(got.diff_ids)} layers is equal; image ID expected {expected.image_id}, "
            f"got {got.image_id}{said or ': the environment, labels or history differ'})"
        )
    return "reproduced", f"reproduced: image ID {got.image_id} and its {len(got.diff_ids)} layers equal the record's"


# -- the verdicts file ---------------------------------------------------------------------------------


def load(path: Path) -> dict[str, Verdict]:
    """Record id -> its last verdict; {} when the file is absent. A file this tool did not write is
    one line (exit 2) naming it and the fix."""
    if not os.path.lexists(path):
        return {}
    data = read_json(path, MAX_BYTES, "verdicts file")
    entries = data.get("records") if isinstance(data, dict) and data.get("schema") == SCHEMA else None
    if not isinstance(entries, dict):
        raise UserError(f'expected {{"schema": {SCHEMA}, "records": {{...}}}}; remove it (`builder reproduce` writes it again)', str(path))
    return {image_id: _verdict(image_id, entry, path) for image_id, entry in sorted(entries.items())}


def _verdict(image_id: str, entry: Any, path: Path) -> Verdict:
    fields = ("digest", "outcome", "line", "checked")
    if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in fields) or entry["outcome"] not in OUTCOMES:
        raise UserError(f"the verdict of {image_id!r} is not one `builder reproduce` writes; remove the file", str(path))
    return Verdict(image_id, entry["digest"], entry["outcome"], entry["line"], entry["checked"])


def current(verdicts: Mapping[str, Verdict], image_id: str, digest: str) -> Verdict | None:
    """The verdict of a record as published now (a verdict about an earlier digest is not its)."""
    found = verdicts.get(image_id)
    return found if found is not None and found.digest == digest else None


def record(path: Path, verdict: Verdict) -> None:
    """Add or replace one record's verdict (read-modify-write under a file lock, written whole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path.parent / f".{path.name}.lock", timeout=120):
        known = load(path)
        known[verdict.id] = verdict
        doc = {"schema": SCHEMA, "records": {k: v.to_json() for k, v in sorted(known.items())}}
        write_atomic(path, dump_json(doc))
