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
import tempfile
from pathlib import Path

from builder.errors import RunFailure, UserError
from builder.fsio import read_bytes
from builder.text import printable

RECORD_NAMESPACE = "record@gpu-image-builder"
ATTESTATION_NAMESPACE = "attestation@gpu-image-builder"
ALLOWED_SIGNERS = "allowed_signers"  # catalog/allowed_signers
ALLOWED_SIGNERS_ENV = "BUILDER_ALLOWED_SIGNERS"
TIMEOUT_S = 60
MAX_SIGNATURE = 64 * 1024  # an armored SSH signature is under 2 KiB (RSA 4096 included)


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
    """The armored SSH signature of `data` with `key` in `namespace`; RunFailure (one line) when
    ssh-keygen refuses, giving its own reason, or does not answer within TIMEOUT_S (a key waiting
    for a passphrase on a terminal, a hardware key waiting for a touch, an agent that hangs)."""
    try:
        done = subprocess.run(
            [ssh_keygen(), "-Y", "sign", "-f", str(key), "-n", namespace],
            input=data,
            capture_output=True,
            timeout=TIMEOUT_S,
            check=False,
            env={**os.environ, "SSH_ASKPASS_REQUIRE": "never"},  # a passphrase prompt would hang a CI job: fail instead
        )
    except subprocess.TimeoutExpired:
        raise RunFailure(
            f"signing with {key} did not answer within {TIMEOUT_S} s (ssh-keygen waiting for a passphrase or a hardware key's touch?); "
            "load the key into ssh-agent and give --sign-key its .pub"
        ) from None
    signature = done.stdout.decode(errors="replace")
    if done.returncode != 0 or "BEGIN SSH SIGNATURE" not in signature:
        raise RunFailure(f"signing with {key} failed: {refusal(done.stderr.decode(errors='replace'))}")
    return signature


def refusal(stderr: str) -> str:
    """ssh-keygen's own reason, in one line, with the fix where it is a known one: a key others can
    read is ignored ("Permissions 0644 ... are too open", then "No private key found"), which is
    no passphrase matter; a passphrase it cannot ask for is one."""
    lines = [line.removeprefix("Enter passphrase:").strip() for line in stderr.splitlines()]
    lines = [line for line in lines if line and not line.startswith("@")]
    too_open = next((line for line in lines if "are too open" in line), None)
    if too_open is not None:
        return f"{printable(too_open.rstrip('.'))}: ssh-keygen ignores a private key others can read (chmod 600 it)"
    reason = printable(lines[-1] if lines else "ssh-keygen wrote no signature")
    if "passphrase" in reason:
        return f"{reason} (a key with a passphrase is used through ssh-agent: ssh-add it and give --sign-key its .pub)"
    return reason


def allowed_signers_path(catalog_root: Path, given: Path | None = None) -> Path:
    """Where the allowed signers are: the option, else $BUILDER_ALLOWED_SIGNERS, else catalog/allowed_signers."""
    if given is not None:
        return given
    env = os.environ.get(ALLOWED_SIGNERS_ENV, "")
    return Path(env) if env else catalog_root / ALLOWED_SIGNERS


def verify(data: bytes, signature: Path, allowed: Path, namespace: str, what: str) -> str:
    """The principal that signed `data` (the content of `what`); Unverified, one line, when it is
    unsigned, changed since it was signed, or signed by a key `allowed` does not list.

    The signature is read once, bounded (MAX_SIGNATURE: a 1 GiB `.sig` kept ssh-keygen busy for a
    minute), and handed to ssh-keygen as a copy of those bytes, so what was checked is what was read."""
    if not os.path.lexists(signature):  # anything else there (a FIFO, a device, a folder) is refused by the read below
        raise Unverified(
            f"{what} is unsigned (no {signature.name}); publish it again with --sign-key, or remove {allowed} to skip verification"
        )
    try:
        armored = read_bytes(signature, MAX_SIGNATURE, "signature")
    except UserError as exc:
        raise Unverified(f"{what}: {exc}") from None
    tool = ssh_keygen()
    with tempfile.TemporaryDirectory(prefix="builder-verify-") as folder:
        copy = Path(folder) / signature.name
        copy.write_bytes(armored)
        found = _checking([tool, "-Y", "find-principals", "-s", str(copy), "-f", str(allowed)], b"", what)
        principals = found.stdout.decode(errors="replace").split()
        if found.returncode != 0 or not principals:
            raise Unverified(f"{what}: {signature.name} is not by a key in {allowed} (or the signature is damaged)")
        checked = _checking([tool, "-Y", "verify", "-f", str(allowed), "-I", principals[0], "-n", namespace, "-s", str(copy)], data, what)
    if checked.returncode != 0:
        raise Unverified(f"{what} does not match {signature.name}: it was changed after it was signed (or signed for another use)")
    return principals[0]


def _checking(command: list[str], data: bytes, what: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(command, input=data, capture_output=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise Unverified(
            f"{what}: ssh-keygen did not finish checking its signature within {TIMEOUT_S} s; the evidence is not verified"
        ) from None
