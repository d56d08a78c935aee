"""SSH signatures over the evidence, made and checked by OpenSSH's `ssh-keygen -Y` (so a team can
check them with the same command, without this tool).

Two namespaces keep a record's signature from passing for an attestation's and back:
`record@gpu-image-builder` (a catalog record's signed fields, exported as
catalog/evidence/<id>.record.json) and `attestation@gpu-image-builder` (the in-toto Statement,
catalog/evidence/<id>.intoto.json). Signatures sit beside each file as `<file>.sig`.

The private key stays where the user keeps it: `ssh-keygen -Y sign -f KEY` reads it itself (or asks
the ssh-agent, when KEY is the public half of an agent's key), the data goes in on stdin and the
signature comes back on stdout, so nothing of the key is read or written by this tool.
Who may sign is the `allowed_signers` file (OpenSSH's format: `principal [options] key-type key`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from builder.util.errors import RunFailure, UserError

RECORD_NAMESPACE = "record@gpu-image-builder"
ATTESTATION_NAMESPACE = "attestation@gpu-image-builder"
ALLOWED_SIGNERS = "allowed_signers"  # catalog/allowed_signers
ALLOWED_SIGNERS_ENV = "BUILDER_ALLOWED_SIGNERS"
TIMEOUT_S = 60


class Unverified(RunFailure):
    """A record or attestation that is unsigned, changed after signing, or signed by a key not allowed."""


def ssh_keygen() -> str:
    found = shutil.which("ssh-keygen")
    if found is None:
        raise UserError("ssh-keygen (OpenSSH) is not installed; it signs and verifies the evidence: apt-get install openssh-client")
    return found


def check_key(key: Path) -> Path:
    """The --sign-key path, checked to exist (its content is ssh-keygen's business, never ours)."""
    if not key.is_file():
        raise UserError(f"--sign-key {key}: no such key file; give an SSH private key (ssh-keygen -t ed25519 -f KEY makes one)")
    return key


def sign(data: bytes, key: Path, namespace: str) -> str:
    """The armored SSH signature of `data` with `key` in `namespace`."""
    done = subprocess.run(
        [ssh_keygen(), "-Y", "sign", "-f", str(key), "-n", namespace],
        input=data,
        capture_output=True,
        timeout=TIMEOUT_S,
        check=False,
        env={**os.environ, "SSH_ASKPASS_REQUIRE": "never"},  # a passphrase prompt would hang a CI job: fail instead
    )
    signature = done.stdout.decode(errors="replace")
    if done.returncode != 0 or "BEGIN SSH SIGNATURE" not in signature:
        reason = done.stderr.decode(errors="replace").strip().splitlines()
        raise RunFailure(
            f"signing with {key} failed: {(reason[-1] if reason else 'no signature')[:200]} (a key with a passphrase needs ssh-agent)"
        )
    return signature


def allowed_signers_path(catalog_root: Path, given: Path | None = None) -> Path:
    """Where the allowed signers are: the option, else $BUILDER_ALLOWED_SIGNERS, else catalog/allowed_signers."""
    if given is not None:
        return given
    env = os.environ.get(ALLOWED_SIGNERS_ENV, "")
    return Path(env) if env else catalog_root / ALLOWED_SIGNERS


def verify(data: bytes, signature: Path, allowed: Path, namespace: str, what: str) -> str:
    """The principal that signed `data` (the content of `what`); Unverified, one line, when it is
    unsigned, changed since it was signed, or signed by a key `allowed` does not list."""
    if not signature.is_file():
        raise Unverified(
            f"{what} is unsigned (no {signature.name}); publish it again with --sign-key, or remove {allowed} to skip verification"
        )
    tool = ssh_keygen()
    found = subprocess.run(
        [tool, "-Y", "find-principals", "-s", str(signature), "-f", str(allowed)], capture_output=True, timeout=TIMEOUT_S, check=False
    )
    principals = found.stdout.decode(errors="replace").split()
    if found.returncode != 0 or not principals:
        raise Unverified(f"{what}: {signature.name} is not by a key in {allowed} (or the signature is damaged)")
    checked = subprocess.run(
        [tool, "-Y", "verify", "-f", str(allowed), "-I", principals[0], "-n", namespace, "-s", str(signature)],
        input=data,
        capture_output=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    if checked.returncode != 0:
        raise Unverified(f"{what} does not match {signature.name}: it was changed after it was signed (or signed for another use)")
    return principals[0]
