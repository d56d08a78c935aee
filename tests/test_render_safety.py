"""render never loses what it did not write: `--out` must be a folder, foreign files stop it,
concurrent renders take turns, and nothing is read that render could not have written."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from builder.render.tree import MANIFEST

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


def builder(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "matrix.yaml").write_text(MATRIX, encoding="utf-8")
    return tmp_path


def snapshot(folder: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        out[rel] = f"link:{os.readlink(path)}" if path.is_symlink() else path.read_bytes() if path.is_file() else "dir"
    return out


def one_line_error(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert "Traceback" not in done.stderr


def test_out_naming_a_file_is_refused_and_the_file_kept(repo: Path) -> None:
    target = repo / "notes.txt"
    target.write_text("mine\n", encoding="utf-8")
    one_line_error(builder("render", "--out", str(target), cwd=repo), "is a file, not a folder")
    assert target.read_text(encoding="utf-8") == "mine\n"
    assert sorted(p.name for p in repo.iterdir()) == ["matrix.yaml", "notes.txt"]  # no hidden .notes.txt.old-PID


def test_out_naming_a_device_is_refused(repo: Path) -> None:
    one_line_error(builder("render", "--out", "/dev/null", cwd=repo), "is a device or special file")
    assert Path("/dev/null").exists() and not Path("/dev/null").is_dir()


@pytest.mark.parametrize("out", ["/", "/proc/..", "~"])
def test_out_at_the_root_or_home_is_refused_without_reading_it(repo: Path, out: str) -> None:
    target = Path(os.path.expanduser(out))
    done = builder("render", "--out", str(target), cwd=repo, timeout=30)
    holds_images = repo.resolve().is_relative_to(target.resolve())  # refused before any read: it would replace images/
    one_line_error(done, *(("overlaps", "images/") if holds_images else ("did not write", "move it out of")))


def test_nothing_that_cannot_be_ours_is_read(repo: Path) -> None:
    """A FIFO named like a rendered file would block any reader: render must judge it by lstat alone."""
    out = repo / "images"
    (out / IMAGE).mkdir(parents=True)
    os.mkfifo(out / IMAGE / "Dockerfile")
    one_line_error(builder("render", "--out", str(out), cwd=repo, timeout=30), "is a device or special file")
    check = builder("render", "--check", "--out", str(out), cwd=repo, timeout=30)
    assert check.returncode == 1 and f"images/{IMAGE}/Dockerfile" in check.stdout


def test_out_through_a_symbolic_link_is_refused(repo: Path, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (repo / "linked").symlink_to(real)
    one_line_error(builder("render", "--out", str(repo / "linked"), cwd=repo), "is a symbolic link")


@pytest.mark.parametrize(
    "plant",
    [
        {"handmade/Dockerfile": "FROM debian:12\n"},
        {"handmade/requirements.txt": "numpy\n"},
        {"handmade/": ""},
        {"README.md": "notes\n"},
        {f"{IMAGE}/extra.sh": "echo hi\n"},
        {f"{IMAGE}/Dockerfile": "FROM debian:12\n"},  # a hand-written file where render wants to write
    ],
    ids=["dockerfile", "requirements", "empty-folder", "top-level-file", "extra-file-in-an-image", "handwritten-in-place"],
)
def test_files_render_did_not_write_stop_it_and_survive(repo: Path, plant: dict[str, str]) -> None:
    images = repo / "images"
    assert builder("render", cwd=repo).returncode == 0
    for rel, text in plant.items():
        path = images / rel
        if rel.endswith("/"):
            path.mkdir(parents=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            path.unlink()
            (images / MANIFEST).unlink()  # no record of what render wrote: the header rule decides
        path.write_text(text, encoding="utf-8")
    before = snapshot(images)
    done = builder("render", cwd=repo)
    one_line_error(done)
    assert "builder render" in done.stderr and ("move it out" in done.stderr or "--force" in done.stderr)
    assert snapshot(images) == before


def test_a_tree_rendered_before_the_manifest_is_migrated(repo: Path) -> None:
    """images/<id>/hello_gpu.py and no manifest: an older render's output, recognised by its headers, replaced."""
    images = repo / "images"
    assert builder("render", cwd=repo).returncode == 0
    (images / MANIFEST).unlink()
    (images / IMAGE / "hello_gpu.py").write_bytes((ROOT / "builder" / "probes" / "hello_gpu.py").read_bytes())
    done = builder("render", cwd=repo)
    assert done.returncode == 0, done.stderr
    assert not (images / IMAGE / "hello_gpu.py").exists() and (images / MANIFEST).is_file()
    assert builder("render", "--check", cwd=repo).returncode == 0


def test_concurrent_renders_take_turns(repo: Path) -> None:
    """The benchmark runs 240 at once; here 24, for the same property: no traceback, a current tree."""
    with ThreadPoolExecutor(24) as pool:
        runs = list(pool.map(lambda _: builder("render", cwd=repo, timeout=300), range(24)))
    assert [r.returncode for r in runs] == [0] * 24, [r.stderr for r in runs if r.returncode]
    assert not [r.stderr for r in runs if "Traceback" in r.stderr]
    assert builder("render", "--check", cwd=repo).returncode == 0
    assert sorted(p.name for p in repo.iterdir()) == ["images", "matrix.yaml"]  # no temporary folders left


def test_a_newline_in_the_matrix_file_name_never_reaches_a_dockerfile(tmp_path: Path) -> None:
    odd = tmp_path / "matrix\nRUN evil.yaml"
    odd.write_text(MATRIX, encoding="utf-8")
    done = builder("--matrix", str(odd), "render", cwd=tmp_path)
    assert done.returncode == 2 and "newline or control character" in done.stderr
    assert not (tmp_path / "images").exists()


@pytest.mark.parametrize(
    ("args", "overlaps"),
    [
        (("plan", "--format", "bake", "--contexts", "images"), "images"),  # the committed tree itself
        (("plan", "--format", "bake", "--contexts", f"images/{IMAGE}"), "images"),  # inside it
        (("plan", "--format", "bake", "--contexts", "templates/x"), "templates"),
        (("render", "--out", f"images/{IMAGE}/nested"), "images"),
        (("render", "--out", "."), "images"),  # holding it
    ],
)
def test_a_tree_never_lands_on_another_tree_the_tool_keeps(repo: Path, args: tuple[str, ...], overlaps: str) -> None:
    """Found by the second hostile pass: `plan --format bake --contexts images` replaced the rendered
    images/ with bake contexts (image.json and the manifest gone, probe files added), after which
    `render` refused its own folder. Both trees carry render's marker, so ownership did not stop it."""
    assert builder("render", cwd=repo).returncode == 0
    before = snapshot(repo / "images")
    one_line_error(builder(*args, cwd=repo), "overlaps", overlaps)
    assert snapshot(repo / "images") == before
    assert builder("render", "--check", cwd=repo).returncode == 0
