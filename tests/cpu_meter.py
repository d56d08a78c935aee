"""Who on this machine spent the CPU while the suite ran, read from /proc and the cgroups: the
suite's lanes report (tests/lanes.py) charges each module with what its worker, its engine and the
engine's containers spent meanwhile. It reads cumulative counters and times nothing itself; a
counter it cannot read (no such engine, cgroup v2 with another layout) is left out, never guessed.

- the worker: this process and every child it waited for (`builder`, mmdebstrap, git), from
  getrusage; read in the worker, carried to the controller in each report's user_properties;
- an engine: its dockerd and the processes below it (its containerd), alive or waited for, keyed
  `engine` for the default socket and `engine 2` for the one `-H` names (.ci/docker-up.sh);
- an engine's containers (RUN steps, smoke tests): the CPU charged to its cgroup parent (`docker`,
  and `builder-engine2`, which docker-up.sh gives the second engine);
- the registry (docker-registry), and the whole machine (bench_machine.py's busy time of /proc/stat).
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from pathlib import Path

from benchmarks import bench_machine

PROC = Path("/proc")
CGROUP = Path("/sys/fs/cgroup")
CONTAINER_PARENTS = {"containers": "docker", "containers 2": "builder-engine2"}  # docker-up.sh's --cgroup-parent
_HZ = os.sysconf("SC_CLK_TCK")
Reading = dict[str, float]  # consumer -> CPU-seconds since it started


def worker_cpu() -> float:
    """This process's CPU-seconds and its waited-for children's (user and system)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _processes() -> Iterator[tuple[int, int, str, float]]:
    """(pid, parent pid, name, own and waited-for children's CPU-s) of every process that can be read."""
    for entry in os.scandir(PROC):
        if not entry.name.isdigit():
            continue
        try:
            text = (PROC / entry.name / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        yield int(entry.name), int(rest[1]), name, sum(int(v) for v in rest[11:15]) / _HZ


def _engine_key(pid: int) -> str:
    try:
        argv = (PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return "engine"
    return "engine 2" if any(arg.startswith((b"-H", b"--host")) for arg in argv) else "engine"


def _cgroup_cpu(parent: str) -> float | None:
    """CPU-s charged to a cgroup parent and everything that ran below it (v1 cpuacct, or v2 cpu.stat)."""
    try:
        return int((CGROUP / "cpuacct" / parent / "cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
        pass
    try:
        for line in (CGROUP / parent / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
    except (OSError, ValueError):
        pass
    return None


def _machine_busy() -> float | None:
    """Every core's working CPU-s since boot (benchmarks/bench_machine.py's reading of /proc/stat)."""
    try:
        return bench_machine.busy(bench_machine.parse_cpu((PROC / "stat").read_text())) / _HZ
    except (OSError, ValueError):
        return None


def reading() -> Reading:
    """Every consumer's CPU-s so far: the engines' process trees, their containers, the registry, the machine."""
    found = list(_processes())
    below: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for pid, ppid, _, seconds in found:
        below.setdefault(ppid, []).append(pid)
        cpu[pid] = seconds
    out: Reading = {}

    def tree(root: int) -> float:
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            total += cpu.get(pid, 0.0)
            todo.extend(below.get(pid, ()))
        return total

    for pid, _, name, _ in found:
        if name == "dockerd":
            key = _engine_key(pid)
            out[key] = out.get(key, 0.0) + tree(pid)
        elif name in ("docker-registry", "registry"):
            out["registry"] = out.get("registry", 0.0) + tree(pid)
    for consumer, cgroup in CONTAINER_PARENTS.items():
        charged = _cgroup_cpu(cgroup)
        if charged is not None:
            out[consumer] = charged
    busy = _machine_busy()
    if busy is not None:
        out["machine"] = busy
    return out
