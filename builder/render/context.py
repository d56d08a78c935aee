"""One image's build context, in memory: the rendered files, the probe, and the content hash (pure).

The context is Dockerfile + requirements.txt (+ requirements.lock when the image is locked) +
hello_gpu.py. images/<id>/ commits all but the probe, plus image.json (the plan entry, which records
the hash); the probe exists once, in the package (builder/probes/hello_gpu.py), and the build stages
it into the context. The content hash covers every context file, so it changes exactly when what
the engine builds changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path

import jinja2

from builder.lock.files import LOCK_NAME
from builder.model.image_entry import ImageEntry
from builder.model.locked_fit import FIT_NAME
from builder.model.plan import ImageSpec, Matrix
from builder.render.templates import constraints, dockerfile, environment, requirements
from builder.util.errors import UserError

PROBE = Path(__file__).resolve().parents[1] / "probes" / "hello_gpu.py"
PROBE_NAME = "hello_gpu.py"
CONSTRAINTS = "constraints.txt"
CONTEXT = ("Dockerfile", "requirements.txt", CONSTRAINTS, LOCK_NAME, PROBE_NAME)  # what the engine builds; all of it is hashed
# What images/<id>/ holds: the constraints only for CUDA from wheels, the lock when there is one, and
# the fit measured from the lock's wheels (not part of the build context: what it says is in the
# Dockerfile's labels; render/tree.py writes it beside them).
COMMITTED = ("Dockerfile", "requirements.txt", CONSTRAINTS, LOCK_NAME, FIT_NAME, "image.json")
Files = dict[str, bytes]


def probe_bytes() -> bytes:
    return PROBE.read_bytes()


def context_files(spec: ImageSpec, env: jinja2.Environment, source: str, probe: bytes, matrix_name: str = "matrix.yaml") -> Files:
    """The build context of one image (everything the content hash covers)."""
    files = {
        "Dockerfile": dockerfile(spec, env, source, matrix_name).encode(),
        "requirements.txt": requirements(spec).encode(),
        PROBE_NAME: probe,
    }
    if spec.constraints:
        files[CONSTRAINTS] = constraints(spec).encode()
    if spec.lock is not None:
        files[LOCK_NAME] = spec.lock.text.encode()
    return files


def content_hash(files: Mapping[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name in sorted(files):
        if name in CONTEXT:
            digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return "sha256:" + digest.hexdigest()


def image_json(entry: ImageEntry) -> bytes:
    return entry.text().encode()


def contexts(specs: Iterable[ImageSpec], matrix: Matrix, template_dirs: Iterable[Path] = ()) -> dict[str, Files]:
    """image id -> its build context, rendered once per call."""
    env = environment(template_dirs)
    probe = probe_bytes()
    name = Path(matrix.path).name
    if not name.isprintable():  # it is written into every Dockerfile's header comment
        raise UserError(
            f"the matrix file name {name!r} has a newline or control character, which cannot go into a Dockerfile; rename the file"
        )
    return {spec.id: context_files(spec, env, matrix.source, probe, name) for spec in specs}
