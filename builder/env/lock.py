"""A team environment's lock (pure): its requirements resolved for the base's Python and platform,
with every package of the base as a constraint, written in the images' lock format (builder/lock/files.py,
every package pinned with its sha256 hashes) under a header that names `builder env lock`.

Packages the base already has may appear in it (uv lists what the requirements need), always at the
base's version with the base's hashes (base.untouched): pip finds them installed and leaves them.
"""

from __future__ import annotations

from builder.env.base import BaseLock, untouched
from builder.env.envfile import EnvFile
from builder.lock import files
from builder.lock.target import LockTarget
from builder.model.plan import Lock
from builder.util.errors import UserError


def target(env: EnvFile, base: BaseLock, indexes: tuple[str, ...] = ()) -> LockTarget:
    """What `builder env lock` resolves: the inputs hash covers the requirements and every base pin."""
    return LockTarget(
        image=env.id,
        requirements=env.requirements,
        constraints=base.constraints,
        python=base.python,
        platform=base.platform,
        indexes=indexes,
    )


def lock_text(env: EnvFile, base: BaseLock, goal: LockTarget, resolved: str, digest: str) -> Lock:
    """uv's output as the environment's lock on the record `base` was read from, whose image is
    `digest` (both in its header), checked: what it claims, and nothing of the base moved."""
    made = f"uv's lock for {env.id}"
    text = files.lock_text(env.id, goal.inputs, goal.python, goal.platform, resolved, files.ENV_TOOL, (base.record, digest))
    lock = files.load(text, made)
    check(lock, env, base, goal, made)
    return lock


def check(lock: Lock, env: EnvFile, base: BaseLock, goal: LockTarget, where: str) -> None:
    contents = files.read(lock.text, where)
    files.verify(lock, goal, where, files.ENV_TOOL)
    untouched(contents.packages, base, where)


def locked_on(env: EnvFile, text: str) -> tuple[str, str]:
    """The record id and repository@sha256:... an environment's lock names as its base."""
    contents = files.read(text, str(env.lock_path))
    if contents.tool != files.ENV_TOOL or contents.base is None:
        raise UserError(f"was written by `{contents.tool}`, not `{files.ENV_TOOL}`; restore it from git or re-lock", str(env.lock_path), 1)
    return contents.base


def read(env: EnvFile, base: BaseLock, goal: LockTarget, text: str) -> tuple[Lock, bool]:
    """The committed lock and whether it is current (its inputs are the env file's and the base's now)."""
    where = str(env.lock_path)
    lock = files.load(text, where)
    if lock.inputs != goal.inputs:
        return lock, False
    check(lock, env, base, goal, where)
    return lock, True


def added(lock: Lock, base: BaseLock) -> tuple[tuple[str, str], ...]:
    """(package, version) the environment adds to the base."""
    have = dict(base.pins)
    return tuple((name, version) for name, version in lock.pins if name not in have)
