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
import stat
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from builder.util.errors import RunFailure, UserError
from builder.util.fsio import MiB, read_bytes
from builder.util.text import printable

RECORD_NAMESPACE = "record@gpu-image-builder"
ATTESTATION_NAMESPACE = "attestation@gpu-image-builder"
ALLOWED_SIGNERS = "allowed_signers"  # catalog/allowed_signers
ALLOWED_SIGNERS_ENV = "BUILDER_ALLOWED_SIGNERS"
TIMEOUT_S = 60
MAX_SIGNERS = 1 * MiB  # an allowed_signers file: a line per key (~100 bytes); a team's is a few KiB
MAX_SIGNATURE = 16 * 1024  # an armored SSH signature is ~300 bytes; ssh-keygen reads whatever it is given
ALLOWED_SIGNERS_FIX = (
    "give OpenSSH's allowed_signers (a `principal key-type key` line per signer), or --no-verify to use the catalog unverified"
)


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


@dataclass(frozen=True)
class Signers:
    """The allowed signers a command checks against: `path`, or None when verification is off
    (`--no-verify`) or there is nothing to verify with (no allowed_signers, an unsigned catalog);
    `why` says which, for the line the command prints."""

    path: Path | None
    why: str = ""


def allowed_signers(catalog_root: Path, given: Path | None = None, env: Mapping[str, str] | None = None) -> Path | None:
    """The allowed signers file: --allowed-signers, else $BUILDER_ALLOWED_SIGNERS, else
    catalog/allowed_signers. Failing closed: a file named by the option or the variable (also set
    but empty: an unmounted CI secret), and a catalog/allowed_signers that exists in any form, must
    be a readable regular file, else a one-line UserError (exit 2) naming it and how it was named.
    None only when no name was given and catalog/allowed_signers does not exist at all."""
    values = os.environ if env is None else env
    if given is not None:
        return _readable(given, f"--allowed-signers {given}")
    if ALLOWED_SIGNERS_ENV in values:
        named = values[ALLOWED_SIGNERS_ENV]
        if not named.strip():
            raise UserError(f"${ALLOWED_SIGNERS_ENV} is set but empty; name the allowed_signers file in it, or unset it")
        return _readable(Path(named), f"${ALLOWED_SIGNERS_ENV}={named}")
    default = catalog_root / ALLOWED_SIGNERS
    try:
        default.lstat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UserError(f"cannot check the catalog's allowed signers file: {exc.strerror}", str(default)) from None
    return _readable(default, str(default))


def _readable(path: Path, named: str) -> Path:
    """`path` when it is a readable regular file of at most MAX_SIGNERS bytes (a link to one is
    fine); else one line saying what stands there instead."""
    if path.is_symlink() and not path.exists():
        raise UserError(f"{named}: a link to nothing ({os.readlink(path)}); {ALLOWED_SIGNERS_FIX}")
    try:
        read_bytes(path, MAX_SIGNERS, "allowed signers file")  # regular, bounded, never blocks on a FIFO
    except UserError as exc:
        what = exc.message.split("; give a file")[0]  # fsio's own fix is for a file of the tool's; say ours
        raise UserError(f"{named}: {what}; {ALLOWED_SIGNERS_FIX}") from None
    return path


def verify(data: bytes, signature: Path, allowed: Path, namespace: str, what: str) -> str:
    """The principal that signed `data` (the content of `what`); Unverified, one line, when it is
    unsigned, changed since it was signed, or signed by a key `allowed` does not list.

    The signature is read here (a regular file of at most MAX_SIGNATURE bytes, never blocking on a
    FIFO) and handed to ssh-keygen as a private copy, so what is checked is what was read, and a
    1 GiB `.sig` is refused at once instead of keeping ssh-keygen busy until its deadline."""
    try:
        st = signature.stat()
    except FileNotFoundError:
        raise Unverified(
            f"{what} is unsigned (no {signature.name}); publish it again with --sign-key, or --no-verify to use it unverified"
        ) from None
    except OSError as exc:
        raise Unverified(f"{what}: {signature.name} cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SIGNATURE:
        kind = f"{st.st_size} bytes" if stat.S_ISREG(st.st_mode) else "not a regular file"
        raise Unverified(f"{what}: {signature.name} is not an SSH signature ({kind}); restore catalog/evidence/ from git")
    try:
        armored = read_bytes(signature, MAX_SIGNATURE, "signature")
    except UserError as exc:
        raise Unverified(f"{what}: {exc}") from None
    tool = ssh_keygen()
    with tempfile.TemporaryDirectory(prefix="builder-verify-") as folder:
        copy = Path(folder) / signature.name
        copy.write_bytes(armored)
        found = _keygen([tool, "-Y", "find-principals", "-s", str(copy), "-f", str(allowed)], b"", what)
        principals = found.stdout.decode(errors="replace").split()
        if found.returncode != 0 or not principals:
            raise Unverified(f"{what}: {signature.name} is not by a key in {allowed} (or the signature is damaged)")
        checked = _keygen([tool, "-Y", "verify", "-f", str(allowed), "-I", principals[0], "-n", namespace, "-s", str(copy)], data, what)
    if checked.returncode != 0:
        raise Unverified(f"{what} does not match {signature.name}: it was changed after it was signed (or signed for another use)")
    return principals[0]


def _keygen(argv: list[str], data: bytes, what: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(argv, input=data, capture_output=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise Unverified(f"{what}: ssh-keygen did not answer within {TIMEOUT_S} s (is the allowed signers file a FIFO?)") from None
