"""What a run's wall time was made of on this machine, and how fast one of its cores is (never a
timed test):

    python3 benchmarks/bench_machine.py mark FILE     # a snapshot: clock, the kernel's CPU and disk counters
    python3 benchmarks/bench_machine.py since FILE    # what the machine did since that snapshot
    python3 benchmarks/bench_machine.py speed         # one core on fixed work (a calibration, seconds)

.ci/run marks before the test command and prints `since` and `speed` after it, so every CI log
says whether its minutes went to work (user, system), to waiting on the disk (iowait) or to a busy
host (steal: time the hypervisor gave this VM's CPUs to someone else), and how fast a core was. The
same code's test command took 13 minutes on one fresh 2-core machine and 19.5-22 on others
(docs/benchmarks.md); these figures tell the two apart. Standard library only: it runs before
scripts/setup.sh has made the venv.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

# /proc/stat's first line: cpu user nice system idle iowait irq softirq steal guest guest_nice
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
SECTOR = 512  # /sys/block/*/stat counts 512-byte sectors whatever the device's own sector size
SKIPPED_DISKS = ("loop", "ram", "zram", "dm-", "sr", "nbd")  # not a disk of its own, or a view of one


@dataclass(frozen=True)
class Snapshot:
    clock: float  # time.monotonic() is per boot: the wall clock is what two processes share
    ticks_per_s: int
    cpus: int
    cpu: dict[str, int]  # CPU_FIELDS -> clock ticks, all CPUs together
    disks: dict[str, tuple[int, int, int]]  # device -> (sectors read, sectors written, ms busy)


def parse_cpu(proc_stat: str) -> dict[str, int]:
    """The all-CPUs line of /proc/stat as CPU_FIELDS -> ticks (guest time is already in user)."""
    for line in proc_stat.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            values = [int(v) for v in parts[1:]] + [0] * len(CPU_FIELDS)
            return dict(zip(CPU_FIELDS, values, strict=False))
    raise ValueError("no 'cpu' line in /proc/stat")


def busy(cpu: dict[str, int]) -> int:
    """The ticks of `cpu` (parse_cpu) spent working: user, nice, system, irq and softirq (not idle, iowait or steal)."""
    return cpu["user"] + cpu["nice"] + cpu["system"] + cpu["irq"] + cpu["softirq"]


def parse_disk(stat: str) -> tuple[int, int, int]:
    """A /sys/block/DEV/stat line: sectors read (field 3), sectors written (7), ms doing I/O (10)."""
    fields = [int(v) for v in stat.split()]
    return fields[2], fields[6], fields[9]


def take(proc: Path = Path("/proc"), sys_block: Path = Path("/sys/block")) -> Snapshot:
    disks = {}
    for device in sorted(sys_block.iterdir()) if sys_block.is_dir() else []:
        if device.name.startswith(SKIPPED_DISKS) or not (device / "stat").is_file():
            continue
        disks[device.name] = parse_disk((device / "stat").read_text())
    return Snapshot(
        clock=time.time(),
        ticks_per_s=os.sysconf("SC_CLK_TCK"),
        cpus=os.cpu_count() or 1,
        cpu=parse_cpu((proc / "stat").read_text()),
        disks=disks,
    )


def load(path: Path) -> Snapshot:
    data = json.loads(path.read_text())
    data["disks"] = {name: tuple(values) for name, values in data["disks"].items()}
    return Snapshot(**data)


def report(before: Snapshot, after: Snapshot) -> list[str]:
    """What the machine did between two snapshots, a few lines for a CI log."""
    wall = after.clock - before.clock
    spent = {f: (after.cpu[f] - before.cpu[f]) / after.ticks_per_s for f in CPU_FIELDS}
    total = sum(spent.values()) or 1.0
    worked = (busy(after.cpu) - busy(before.cpu)) / after.ticks_per_s
    lines = [
        f"wall {wall:,.0f} s on {after.cpus} CPUs ({wall * after.cpus:,.0f} CPU-s): "
        f"work {worked:,.0f} (user {spent['user'] + spent['nice']:,.0f}, system {spent['system']:,.0f}), "
        f"waiting on disk {spent['iowait']:,.0f}, stolen by the host {spent['steal']:,.0f}, idle {spent['idle']:,.0f}; "
        f"work {100 * worked / total:.0f}%, steal {100 * spent['steal'] / total:.0f}%, iowait {100 * spent['iowait'] / total:.0f}%"
    ]
    for name in sorted(set(before.disks) & set(after.disks)):
        read, written, busy_ms = (a - b for a, b in zip(after.disks[name], before.disks[name], strict=True))
        if read or written:
            lines.append(
                f"disk {name}: written {written * SECTOR / 1e9:,.1f} GB, read {read * SECTOR / 1e9:,.1f} GB, "
                f"busy {busy_ms / 1000:,.0f} s ({100 * busy_ms / 1000 / wall if wall else 0:.0f}% of the wall)"
            )
    return lines


def speed() -> list[str]:
    """One core on fixed work: hashing (native code) and an interpreter loop; lower is faster."""
    block = b"\0" * (1 << 20)
    start = time.perf_counter()
    digest = hashlib.sha256()
    for _ in range(512):
        digest.update(block)
    hashed = time.perf_counter() - start
    start = time.perf_counter()
    total = 0
    for i in range(20_000_000):
        total += i % 7
    looped = time.perf_counter() - start
    model = next((line.split(":", 1)[1].strip() for line in _cpuinfo().splitlines() if line.startswith("model name")), "unknown CPU")
    return [f"one core ({model}): sha256 of 512 MiB {hashed:.2f} s, a 20M-step Python loop {looped:.2f} s"]


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "mark":
        Path(argv[1]).parent.mkdir(parents=True, exist_ok=True)
        Path(argv[1]).write_text(json.dumps(asdict(take())))
        return 0
    if len(argv) == 2 and argv[0] == "since":
        try:
            before = load(Path(argv[1]))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            print(f"bench_machine: no usable mark in {argv[1]} ({exc}): take one with `mark {argv[1]}` first", file=sys.stderr)
            return 2
        print("\n".join(report(before, take())))
        return 0
    if argv == ["speed"]:
        print("\n".join(speed()))
        return 0
    print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
