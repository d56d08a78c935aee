"""An interrupted or killed render / lock leaves the complete old tree or the complete new one (with
its lock files), never none; the next run removes what it left (hidden `.images.*` folders, lock
temp folders) and no uv process outlives the tool.

Each test stops a real `python -m builder` at one step (a hook script pauses it there: the pause
stands for a slow disk or a busy machine), signals it, and checks what is on disk."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from builder.lock.files import lock_text

ROOT = Path(__file__).resolve().parents[1]
MATRIX = textwrap.dedent(
    """\
    registry: ghcr.io/example/gpu-images
    bases:
      local-debian12: {vendor: cpu, os: debian12, bootstrap: debootstrap}
    python: ["3.11"]
    frameworks:
      numba: ["0.68.0"]
    stacks:
      numba: [numba]
    """
)
IMAGE = "numba0.68.0-cpu-py3.11-debian12"
LOCK = lock_text(
    IMAGE,
    "sha256:" + "0" * 64,
    "3.11",
    "x86_64-manylinux_2_36",
    "numba==0.68.0 \\\n    --hash=sha256:" + "a" * 64 + "\n    # via -r requirements.in\n",
)

# Runs `builder <args>` with a pause at one step. argv: point, ready file, builder args...
HOOK = textwrap.dedent(
    """\
    import contextlib, os, pathlib, shutil, sys, time
    point, ready = sys.argv[1], pathlib.Path(sys.argv[2])
    sys.argv = ["builder", *sys.argv[3:]]

    def pause():
        ready.write_text(str(os.getpid()))
        time.sleep(float(os.environ.get("HOOK_SLEEP", "30")))

    with contextlib.suppress(ImportError):
        from builder.render import swap
        real_exchange = swap.exchange
        def exchange(a, b):
            if point != "exchanged":
                return False  # the portable path: two renames
            done = real_exchange(a, b)
            pause()
            return done
        swap.exchange = exchange

    real_rename, real_write = os.rename, pathlib.Path.write_bytes
    def rename(src, dst, *args, **kwargs):
        real_rename(src, dst, *args, **kwargs)
        if point == "between" and os.path.basename(src) == "images":
            pause()  # images/ renamed away, the new tree not yet in
    os.rename = rename
    writes = []
    def write_bytes(self, data):
        writes.append(self)
        if point == "writing" and len(writes) == 2:
            pause()  # the new tree half written
        return real_write(self, data)
    pathlib.Path.write_bytes = write_bytes

    if point == "lock":
        import builder.usecases.lock as locking
        locking.uv_binary = lambda: os.environ["FAKE_UV"]
    if point == "template":
        with contextlib.suppress(ImportError):
            from builder.render import sandbox
            sandbox.RENDER_TIMEOUT_S = 2.0

    from builder.cli import main
    main()
    """
)


def builder(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )  # fmt: skip


def start(tmp_path: Path, point: str, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], Path]:
    hook, ready = tmp_path / "hook.py", tmp_path / "ready"
    hook.write_text(HOOK, encoding="utf-8")
    ready.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, str(hook), point, str(ready), *args], cwd=tmp_path / "repo", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )  # fmt: skip
    return proc, ready


def wait_for(predicate: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A rendered tree whose image has a lock; image.json deleted, so the next render swaps."""
    root = tmp_path / "repo"
    (root / "images" / IMAGE).mkdir(parents=True)
    (root / "matrix.yaml").write_text(MATRIX, encoding="utf-8")
    (root / "images" / IMAGE / "requirements.lock").write_text(LOCK, encoding="utf-8")  # adopted: its header says `builder lock`
    done = builder("render", cwd=root)
    assert done.returncode == 0, done.stderr
    (root / "images" / IMAGE / "image.json").unlink()
    return root


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def litter(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("."))


SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL]


@pytest.mark.parametrize("point", ["writing", "between", "exchanged"])
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_render_stopped_at_any_step_leaves_a_whole_tree_and_the_next_run_clears_up(
    tmp_path: Path, repo: Path, point: str, sig: int
) -> None:
    before = tree(repo / "images")
    proc, ready = start(tmp_path, point, "render", env={"HOOK_SLEEP": "30" if point == "writing" else "1.5"})
    wait_for(ready.exists)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert "Traceback" not in stderr, stderr
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 128 + sig, stderr  # interrupted, as every command reports it
        name = signal.Signals(sig).name  # and says so without claiming builds or containers a render has none of
        assert stderr.strip().splitlines()[-1] == f"interrupted by {name}: stopped after cleaning up what this run had started"
        assert (repo / "images").is_dir(), "a signal's cleanup deleted images/"
        assert tree(repo / "images") in (before, tree_after_render(tmp_path)), "neither the old tree nor the new one"
        assert litter(repo) == [], "an interrupted render left hidden folders that `git add -A` would commit"
    again = builder("render", cwd=repo)
    assert again.returncode == 0, again.stderr
    assert (repo / "images" / IMAGE / "requirements.lock").read_text(encoding="utf-8") == LOCK, "the next render lost the lock"
    assert builder("render", "--check", cwd=repo).returncode == 0
    assert litter(repo) == []


def tree_after_render(tmp_path: Path) -> dict[str, bytes]:
    """What a complete render of the fixture writes (rendered into a copy)."""
    copy = tmp_path / "reference"
    if not copy.exists():
        (copy / "images" / IMAGE).mkdir(parents=True)
        (copy / "matrix.yaml").write_text(MATRIX, encoding="utf-8")
        (copy / "images" / IMAGE / "requirements.lock").write_text(LOCK, encoding="utf-8")
        assert builder("render", cwd=copy).returncode == 0
    return tree(copy / "images")


def test_killed_between_the_renames_every_command_sees_the_old_tree(tmp_path: Path, repo: Path) -> None:
    """Not only render: `lock` and `build` read the locks from images/ too; none may see none."""
    proc, ready = start(tmp_path, "between", "render")
    wait_for(ready.exists)
    proc.kill()
    proc.communicate(timeout=60)
    assert not (repo / "images").exists()  # the window the recovery is for
    plan = builder("plan", "--format", "json", cwd=repo)  # reads the locks: the old tree is put back first
    assert plan.returncode == 0, plan.stderr
    assert (repo / "images" / IMAGE / "requirements.lock").read_text(encoding="utf-8") == LOCK
    assert litter(repo) == [".images.tmp-" + n[len(".images.tmp-") :] for n in litter(repo)]  # only the dead run's new tree is left
    assert builder("render", cwd=repo).returncode == 0 and litter(repo) == []


def test_a_first_render_killed_half_way_leaves_no_folder_and_the_next_one_writes_it(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "matrix.yaml").write_text(MATRIX, encoding="utf-8")
    proc, ready = start(tmp_path, "writing", "render")
    wait_for(ready.exists)
    proc.kill()
    proc.communicate(timeout=60)
    assert not (root / "images").exists()
    assert builder("render", cwd=root).returncode == 0
    assert litter(root) == [] and builder("render", "--check", cwd=root).returncode == 0


def test_render_takes_no_lock_file_in_a_shared_temp_folder(tmp_path: Path, repo: Path) -> None:
    """The old lock lived at $TMPDIR/builder-render-<hash>.lock, where another user could plant a link."""
    shared = tmp_path / "shared"
    shared.mkdir()
    for name in ("a", "b"):
        (shared / f"builder-render-{name}.lock").symlink_to(tmp_path / "victim")
    done = builder("render", cwd=repo, env={"BUILDER_LOCK_DIR": str(shared), "TMPDIR": str(shared)})
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in shared.iterdir()) == ["builder-render-a.lock", "builder-render-b.lock"]
    assert not (tmp_path / "victim").exists()
    assert sorted(p.name for p in repo.iterdir()) == ["images", "matrix.yaml"]  # no lock file in the repository either


def test_a_planted_link_at_the_old_render_lock_path_changes_nothing(tmp_path: Path, repo: Path) -> None:
    import hashlib

    shared = tmp_path / "shared"
    shared.mkdir()
    key = hashlib.sha256(str((repo / "images").resolve()).encode()).hexdigest()[:16]
    (shared / f"builder-render-{key}.lock").symlink_to("/proc/version")  # not writable: the old open failed with a traceback
    done = builder("render", cwd=repo, env={"BUILDER_LOCK_DIR": str(shared)}, timeout=30)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


# -- lock: uv children and temp folders -----------------------------------------------------------


def fake_uv(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fake-uv"
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(0o755)
    return path


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie is dead: nothing reaps orphans in some containers


def lock_folders(tmpdir: Path) -> list[str]:
    return sorted(p.name for p in tmpdir.iterdir() if p.name.startswith("builder-lock-"))


@pytest.fixture
def lock_setup(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "matrix.yaml").write_text(MATRIX, encoding="utf-8")
    tmpdir, pids = tmp_path / "tmp", tmp_path / "pids"
    tmpdir.mkdir()
    pids.mkdir()
    uv = fake_uv(tmp_path, f'echo $$ > "{pids}/$$"\nexec sleep 300')
    return tmpdir, pids, {"TMPDIR": str(tmpdir), "FAKE_UV": str(uv), "PIP_CONFIG_FILE": os.devnull}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_lock_leaves_no_uv_running_and_the_next_run_removes_its_temp_folder(
    tmp_path: Path, lock_setup: tuple[Path, Path, dict[str, str]]
) -> None:
    tmpdir, pids, env = lock_setup
    proc, _ = start(tmp_path, "lock", "lock", env=env)
    wait_for(lambda: any(pids.iterdir()))
    uv_pid = int(next(pids.iterdir()).name)
    assert alive(uv_pid)
    killed = lock_folders(tmpdir)
    assert killed  # the run's temp folder, with the inputs uv reads
    proc.kill()
    proc.communicate(timeout=60)
    wait_for(lambda: not alive(uv_pid), timeout=10)  # fails (times out) when uv outlives the tool
    env["FAKE_UV"] = str(fake_uv(tmp_path, "echo 'error: nothing here' >&2; exit 2"))
    again = start(tmp_path, "lock", "lock", env=env)[0]
    again.communicate(timeout=60)
    assert not set(killed) & set(lock_folders(tmpdir)), "the killed run's temp folder is still there"
    assert lock_folders(tmpdir) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: signal.Signals(s).name)
def test_an_interrupted_lock_stops_its_uv_at_once_and_leaves_nothing(
    tmp_path: Path, lock_setup: tuple[Path, Path, dict[str, str]], sig: int
) -> None:
    tmpdir, pids, env = lock_setup
    proc, _ = start(tmp_path, "lock", "lock", env=env)
    wait_for(lambda: any(pids.iterdir()))
    uv_pid = int(next(pids.iterdir()).name)
    began = time.monotonic()
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)  # the old code waited for uv (300 s here) in the pool's exit
    assert time.monotonic() - began < 30
    assert proc.returncode == 128 + sig and "Traceback" not in stderr, stderr
    assert not alive(uv_pid)
    assert lock_folders(tmpdir) == []


def test_a_runaway_template_is_stopped_in_one_line(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "templates").mkdir(parents=True)
    (root / "matrix.yaml").write_text(MATRIX, encoding="utf-8")
    (root / "templates" / "Dockerfile.j2").write_text(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}\n", encoding="utf-8"
    )
    proc, _ = start(tmp_path, "template", "render")
    _, stderr = proc.communicate(timeout=60)  # the old code ran for hours
    assert proc.returncode == 2, stderr
    assert stderr.strip().splitlines() == [stderr.strip()] and "did not finish within 2 s" in stderr
    assert f"{root}/templates/Dockerfile.j2" in stderr
    assert not (root / "images").exists()


def test_a_lock_written_while_a_render_ran_is_not_dropped(tmp_path: Path) -> None:
    """render computes the tree, `builder lock` writes a new lock meanwhile, render swaps its tree in:
    it must stop rather than exit 0 with the image unlocked."""
    from builder.lock.files import parse
    from builder.render.tree import write_tree
    from builder.util.errors import UserError
    from builder.workspace import Workspace

    (tmp_path / "matrix.yaml").write_text(MATRIX, encoding="utf-8")
    ws = Workspace(tmp_path / "matrix.yaml")
    write_tree(ws.images_dir, ws.rendered_tree())
    computed = Workspace(tmp_path / "matrix.yaml").rendered_tree()  # render: the tree without a lock
    lock = parse(LOCK)
    assert lock is not None
    locked = Workspace(tmp_path / "matrix.yaml").with_locks({IMAGE: lock})
    write_tree(ws.images_dir, locked.rendered_tree())  # `builder lock` finishes first
    with pytest.raises(UserError, match="changed while this ran"):
        write_tree(ws.images_dir, computed)
    assert (ws.images_dir / IMAGE / "requirements.lock").read_text(encoding="utf-8") == LOCK
    assert write_tree(ws.images_dir, Workspace(tmp_path / "matrix.yaml").rendered_tree()) == []  # run again: current


def test_the_sweep_removes_only_dead_runs_lock_folders_of_this_user(tmp_path: Path) -> None:
    from builder.lock import children

    me = f"{children.PREFIX}{os.getpid()}-{children.process_start(os.getpid())}-"
    live, dead, reused = tmp_path / f"{me}abcd1234", tmp_path / f"{children.PREFIX}{os.getpid()}-1-abcd1234", tmp_path / "x"
    old, young = tmp_path / f"{children.PREFIX}olda1234", tmp_path / f"{children.PREFIX}newa1234"  # the naming before pids
    for folder in (live, dead, old, young):
        folder.mkdir()
        (folder / "requirements.in").write_text("numba\n", encoding="utf-8")
    os.utime(old, (time.time() - 2 * children.LEGACY_AGE_S,) * 2)
    reused.mkdir()
    link = tmp_path / f"{children.PREFIX}999999-1-link1234"
    link.symlink_to(reused)
    other = tmp_path / f"{children.PREFIX}thisisnotours"
    other.mkdir()
    assert sorted(children.sweep(tmp_path)) == sorted([dead, old])  # pid reused (another start time): dead
    assert live.is_dir() and young.is_dir() and link.is_symlink() and reused.is_dir() and other.is_dir()


def test_a_stopped_debootstrap_takes_its_children_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a SIGTERM to `builder` alone during the emulated arm64 debootstrap: it reached builder
    only, debootstrap's children went on writing into the target while the scratch dir was being
    removed, which failed ("Directory not empty") and left the tree. A stand-in debootstrap starts
    such a writer; interrupting the run ends it too, and the target can be removed."""
    from builder.engine import bootstrap

    fake = tmp_path / "debootstrap"
    fake.write_text('#!/bin/sh\n(while :; do : > "$5/f$$-$(date +%N)"; sleep 0.02; done) &\necho started\nwait\n')
    fake.chmod(0o755)
    monkeypatch.setattr(bootstrap, "_tool_binary", lambda: str(fake))
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    recipe = bootstrap.Recipe(arch="amd64", release="bookworm", mirror="http://mirror.invalid", include=("python3",))

    def log(line: str) -> None:
        if line == "started":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        bootstrap.run_bootstrap(recipe, rootfs, 0, log)
    written = len(list(rootfs.iterdir()))
    time.sleep(0.3)
    assert len(list(rootfs.iterdir())) == written, "a child of the stopped debootstrap still writes into the target"
    bootstrap._remove_tree(rootfs)
    assert not rootfs.exists()
