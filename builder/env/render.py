"""A team environment's build context (pure): the Dockerfile rendered from templates/env/Dockerfile.j2
(FROM the base's digest) and the environment's lock, with the images' content hash over both, so
`builder env build` rebuilds exactly when either changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from builder.env.envfile import EnvFile
from builder.lock.files import LOCK_NAME
from builder.model.plan import Lock
from builder.render import sandbox
from builder.render.context import Files, content_hash
from builder.render.templates import environment
from builder.spec import grammar
from builder.util.errors import UserError

ENTRY = "env/Dockerfile.j2"
BASE_LABEL = "io.builder.env.base"  # the base's repository@sha256:...
LOCK_LABEL = "io.builder.env.lock-sha256"  # sha256 of the environment's lock
RECORD_LABEL = "io.builder.env.base-record"  # the catalog record's id


@dataclass(frozen=True)
class Context:
    files: Files
    content_hash: str


def labels(env: EnvFile, base_ref: str, record: str, lock: Lock) -> list[tuple[str, str]]:
    """The derived image's own labels; the base's (frameworks, accelerator, OCI source) are inherited."""
    return [
        ("org.opencontainers.image.title", env.id),
        ("org.opencontainers.image.base.name", base_ref),
        ("org.opencontainers.image.base.digest", base_ref.rsplit("@", 1)[1]),
        ("io.builder.id", env.id),
        (BASE_LABEL, base_ref),
        (RECORD_LABEL, record),
        (LOCK_LABEL, hashlib.sha256(lock.text.encode()).hexdigest()),
    ]


def check_values(env: EnvFile, base_ref: str, record: str) -> None:
    """What reaches the Dockerfile, checked once more here (the env file's loader checked it first)."""
    if not grammar.IMAGE_REF.fullmatch(base_ref) or "@sha256:" not in base_ref:
        raise UserError(f"the base {base_ref!r} is not repository@sha256:<digest>; a team environment is built FROM a digest, never a tag")
    if not grammar.DOCKER_TAG.fullmatch(env.id) or not grammar.DOCKER_TAG.fullmatch(record):
        raise UserError(f"{env.id!r} / {record!r} cannot be image labels; rename the environment (name:)", str(env.path))
    if not env.path.name.isprintable():
        raise UserError(f"the env file name {env.path.name!r} has a control character, which cannot go into a Dockerfile; rename it")


def dockerfile(env: EnvFile, base_ref: str, record: str, lock: Lock, template_dirs: Iterable[Path] = ()) -> str:
    check_values(env, base_ref, record)
    context = {
        "env_file": env.path.name,
        "env_id": env.id,
        "base_ref": base_ref,
        "apt": list(env.apt),
        "workdir": env.workdir,
        "labels": labels(env, base_ref, record, lock),
    }
    text = sandbox.render(environment(template_dirs), ENTRY, context)
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def build_context(env: EnvFile, base_ref: str, record: str, lock: Lock, template_dirs: Iterable[Path] = ()) -> Context:
    files: Files = {"Dockerfile": dockerfile(env, base_ref, record, lock, template_dirs).encode(), LOCK_NAME: lock.text.encode()}
    return Context(files, content_hash(files))
