"""A killed bootstrap's scratch folder (offline): its rootfs is left when the run is SIGKILLed
(nothing of it can clean up), and the next bootstrap removes it, unless its run is alive or a process
still works in it (the killed run's mmdebstrap goes on in its own session)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from builder.engine import bootstrap
from builder.lock.children import process_start


def _folder(root: Path, pid: int, start: str, suffix: str = "abcd1234") -> Path:
    path = root / f"{bootstrap.SCRATCH_PREFIX}{pid}-{start}-{suffix}"
    (path / "rootfs" / "usr").mkdir(parents=True)
    (path / "rootfs" / "usr" / "file").write_text("x")
    return path


def _started(argv: list[str], cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """A process that runs `argv`, once it does (before its exec, /proc shows the parent's command line)."""
    proc = subprocess.Popen(argv, cwd=cwd)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[0] != argv[0].encode() and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_a_dead_runs_folder_goes_and_a_live_runs_stays(tmp_path: Path) -> None:
    dead = _folder(tmp_path, _dead_pid(), "12345")
    reused = _folder(tmp_path, os.getpid(), "1", "efgh5678")  # this pid, another start time: a pid reused
    alive = _folder(tmp_path, os.getpid(), str(process_start(os.getpid())), "ijkl9012")
    other = tmp_path / "builder-bootstrap-notours"
    other.mkdir()
    link = tmp_path / f"{bootstrap.SCRATCH_PREFIX}{_dead_pid()}-1-mnop3456"
    link.symlink_to(alive)
    assert sorted(bootstrap.sweep_scratch(tmp_path)) == sorted([dead, reused])
    assert not dead.exists() and not reused.exists()
    assert alive.is_dir() and other.is_dir() and link.is_symlink() and (alive / "rootfs" / "usr" / "file").is_file()


def test_a_folder_a_process_still_works_in_is_left_until_it_ends(tmp_path: Path) -> None:
    named = _folder(tmp_path, _dead_pid(), "1")
    inside = _folder(tmp_path, _dead_pid(), "2", "efgh5678")
    tool = _started([sys.executable, "-c", "import time; time.sleep(30)", str(named / "rootfs")])  # as mmdebstrap names its target
    chrooted = _started(["sleep", "30"], cwd=inside / "rootfs")  # as dpkg works in the target
    try:
        assert bootstrap.sweep_scratch(tmp_path) == []
        assert named.is_dir() and inside.is_dir()
    finally:
        for proc in (tool, chrooted):
            proc.kill()
            proc.wait()
    assert sorted(bootstrap.sweep_scratch(tmp_path)) == sorted([named, inside])
    assert list(tmp_path.iterdir()) == []


def test_a_folder_whose_name_only_begins_like_another_is_not_taken_for_it(tmp_path: Path) -> None:
    """A process working in `...-abcd1234x` does not keep `...-abcd1234` alive (the match is by path, not prefix)."""
    gone = _folder(tmp_path, _dead_pid(), "1")
    neighbour = tmp_path / (gone.name + "x")
    neighbour.mkdir()
    worker = _started(["sleep", "30"], cwd=neighbour)
    try:
        assert bootstrap.sweep_scratch(tmp_path) == [gone]
    finally:
        worker.kill()
        worker.wait()


def test_a_sigkilled_runs_bootstrap_tool_is_told_to_stop(tmp_path: Path) -> None:
    """The run cannot stop its mmdebstrap when it is SIGKILLed; the kernel then sends the tool SIGTERM
    (PR_SET_PDEATHSIG), on which mmdebstrap cleans up and exits. A stand-in tool records the signal."""
    fake = tmp_path / "mmdebstrap"
    fake.write_text(
        '#!/bin/sh\ntrap \'echo stopped > "$5.term"; exit 143\' TERM\necho started > "$5.started"\nwhile :; do sleep 0.05; done\n'
    )
    fake.chmod(0o755)
    rootfs = tmp_path / "rootfs"
    run = (
        "import sys\nfrom pathlib import Path\nfrom builder.engine import bootstrap\n"
        "bootstrap._tool_binary = lambda: sys.argv[1]\n"
        "recipe = bootstrap.Recipe(arch='amd64', release='bookworm', mirror='http://mirror.invalid', include=('python3',))\n"
        "bootstrap.run_bootstrap(recipe, Path(sys.argv[2]), 0, print)\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    builder = subprocess.Popen([sys.executable, "-c", run, str(fake), str(rootfs)], cwd=root, env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not Path(f"{rootfs}.started").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert Path(f"{rootfs}.started").exists(), "the stand-in tool did not start"
    finally:
        builder.kill()
        builder.wait()
    deadline = time.monotonic() + 10
    while not Path(f"{rootfs}.term").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert Path(f"{rootfs}.term").read_text() == "stopped\n", "the tool of a SIGKILLed run was not told to stop"
