"""Who made a container: the owner label every container of this tool carries, and this run's
session label (host, pid, the pid's start time), so a later run tells a dead run's leftovers from
a live run's containers. No engine here: the docker adapter and the fake engine both label with it.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping

from builder.engine.port import Engine

OWNER_LABEL = "io.builder.owner"
OWNER_VALUE = "builder"
OWNER_FILTER = f"{OWNER_LABEL}={OWNER_VALUE}"
# Per-process label: lets cleanup find a container whose create call was interrupted before its
# id came back to us, and lets a later run tell a dead run's leftovers (host, pid and the pid's
# start time, so a reused pid is not mistaken for the dead run) from a live run's containers.
SESSION_LABEL = "io.builder.session"
HOST = socket.gethostname()


def process_start(pid: int) -> str | None:
    """The start time of a process (clock ticks since boot, from /proc), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


SESSION_ID = f"{HOST}:{os.getpid()}:{process_start(os.getpid())}:{uuid.uuid4().hex[:8]}"


def session_alive(session: str) -> bool | None:
    """Whether the run that labelled something is still running; None when it cannot be told
    (another host shares this engine, or the label predates this format): then leave it alone."""
    parts = session.split(":")
    if len(parts) != 4 or parts[0] != HOST or not parts[1].isdigit():
        return None
    return process_start(int(parts[1])) == parts[2]


def owner_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """`labels` plus the owner and this run's session."""
    return {**labels, OWNER_LABEL: OWNER_VALUE, SESSION_LABEL: SESSION_ID}


def dead_runs_leftover(labels: Mapping[str, str]) -> bool:
    """A container of a run that is gone (SIGKILL, a crash): not this run's, and its run is known dead."""
    session = labels.get(SESSION_LABEL, "")
    return session != SESSION_ID and session_alive(session) is False


def remove_dead_runs_containers(engine: Engine) -> list[str]:
    """Remove the containers of runs that are gone (SIGKILL, a crash): ids removed. Containers of
    live runs, and of runs this host cannot judge, stay."""
    return [entry.id for entry in engine.owned_containers() if dead_runs_leftover(entry.labels) and engine.remove_container(entry.id)]
