"""Which workspace made an image, so `builder clean` removes only what its own checkout built.

One engine is often shared by several checkouts (a build host, two branches side by side, the test
lanes). Labels this tool puts on everything it builds (io.builder.built-by, the content hash) say
*this tool* built it, not *which checkout*, and `clean` selecting by them removed the other
checkouts' images. So:

- Every image a build finishes carries `io.builder.workspace=<identity>`: a hash of this host's name
  and the checkout's folder (the folder of matrix.yaml, resolved). Opaque on purpose: the label
  travels with a published image, and neither a host name nor a home folder belongs in a registry.
- The untagged steps an interrupted or failed build leaves carry only the Dockerfile's own labels
  (the workspace label is the build's last step), so each build also notes the step images it
  committed in its checkout's ledger, build/steps.txt: those are the checkout's unfinished images.
- Which identity is which folder is noted per host in the state folder ($BUILDER_STATE_DIR, else
  $XDG_STATE_HOME/gpu-image-builder, else ~/.local/state/gpu-image-builder): workspaces/<identity>
  holds the folder. A workspace whose folder is gone (or now another identity's) owns nothing any
  more: its images are orphans, as are images built before this label existed. `clean --orphans`
  lists and removes those; an identity this host has no note of (another host sharing the engine)
  is never judged gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from builder.render.labels import WORKSPACE_LABEL
from builder.util.errors import UserError
from builder.util.fsio import read_text, write_atomic

STATE_ENV = "BUILDER_STATE_DIR"
LEDGER = "steps.txt"  # build/steps.txt: the step images this checkout's builds committed
MAX_LEDGER = 16 * 2**20  # ~1.2 million step ids: a ledger bigger than this is not one the tool wrote
_STEP = re.compile(r"[0-9a-f]{12}")
_IDENTITY = re.compile(r"[0-9a-f]{16}")


def identity(root: Path, host: str | None = None) -> str:
    """The workspace's identity: this host and its folder, hashed (16 hex)."""
    where = f"{host or socket.gethostname()}:{os.path.realpath(root)}"
    return hashlib.sha256(where.encode()).hexdigest()[:16]


def state_dir() -> Path:
    """This host's note of its workspaces (read at each use, so a test that sets its own is obeyed)."""
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV])
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "gpu-image-builder"


def ledger_of(build_dir: Path) -> Path:
    return build_dir / LEDGER


@dataclass(frozen=True)
class Owner:
    """A workspace as a build and `clean` see it: its identity and its build/ folder."""

    root: Path
    build_dir: Path

    @property
    def identity(self) -> str:
        return identity(self.root)

    @property
    def ledger(self) -> Path:
        return ledger_of(self.build_dir)

    def register(self) -> None:
        """Note on this host which folder this identity is (best effort: a read-only home only loses
        the judgement of orphans later, never a build)."""
        note = state_dir() / "workspaces" / self.identity
        text = f"{os.path.realpath(self.root)}\n"
        with contextlib.suppress(OSError, UserError):
            if not note.is_file() or read_text(note, 4096, "workspace note") != text:
                note.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(note, text)

    def note_step(self, step: str) -> None:
        """A step image a build of this workspace committed (12 hex), appended to its ledger. Only
        ever to a regular file of its own: a link there is not followed and a FIFO never blocks
        the build (the step is then not noted: `clean` keeps it, never removes more)."""
        if not _STEP.fullmatch(step):
            return
        with contextlib.suppress(OSError):
            self.ledger.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
            fd = os.open(self.ledger, flags, 0o644)
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.write(fd, f"{step}\n".encode("ascii"))  # one short write: whole lines even from parallel builds
            finally:
                os.close(fd)


def steps_in(ledger: Path) -> frozenset[str]:
    """The step ids a ledger lists; none when it is missing or not one the tool wrote."""
    try:
        text = read_text(ledger, MAX_LEDGER, "steps ledger")
    except Exception:  # noqa: BLE001 - a ledger that cannot be read owns nothing; clean then keeps, never removes, on its say
        return frozenset()
    return frozenset(line for line in text.split() if _STEP.fullmatch(line))


def forget_steps(ledger: Path, gone: Iterable[str]) -> None:
    """Drop the ids of removed images from the ledger, so it does not grow for ever (the ledger is
    replaced, never written through: a link there stays as it was)."""
    if not ledger.is_file() or ledger.is_symlink():
        return
    left = steps_in(ledger) - {g[:12] for g in gone}
    with contextlib.suppress(OSError, UserError):
        write_atomic(ledger, "".join(f"{s}\n" for s in sorted(left)))


@dataclass(frozen=True)
class Workspaces:
    """What this host knows of the workspaces: which identities are live (their folder is there and
    still that identity), which are gone, and the step ids the live ones' ledgers hold."""

    live: frozenset[str]
    gone: frozenset[str]
    live_steps: frozenset[str]

    @staticmethod
    def known() -> Workspaces:
        folder = state_dir() / "workspaces"
        live: set[str] = set()
        gone: set[str] = set()
        steps: set[str] = set()
        entries = sorted(folder.iterdir()) if folder.is_dir() else []
        for note in entries:
            if not _IDENTITY.fullmatch(note.name):
                continue
            try:
                root = Path(read_text(note, 4096, "workspace note").strip())
            except Exception:  # noqa: BLE001 - an unreadable note judges nothing gone
                continue
            if root.is_dir() and identity(root) == note.name:
                live.add(note.name)
                steps |= steps_in(ledger_of(root / "build"))
            else:
                gone.add(note.name)
        return Workspaces(frozenset(live), frozenset(gone), frozenset(steps))


def owner_of(labels: Mapping[str, str]) -> str | None:
    """The workspace identity an image's labels name, None when it has none (built before it existed)."""
    return labels.get(WORKSPACE_LABEL) or None
