"""CUDA line locks (matrix.yaml `line_layers`, builder/lock/line.py) offline: a line's key and its
joint target, the line lock made from uv's joint resolution (NVIDIA wheels only) and what reading
one refuses, each member joined to its line's pins, `line_layers` errors at their line, render's
ownership of images/lines/, `lock --check` and `builder lock` with uv stood in for
(tests/usecase_fixtures.Resolver), and the committed tree: every member's lock pins exactly its
line's NVIDIA set. No network, no Docker.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from click.testing import Result

from builder.compat.rules import table
from builder.lock import files, line
from builder.lock.resolve import LockFailed
from builder.lock.target import LockTarget, target_for
from builder.model.locked_fit import FIT_NAME
from builder.model.plan import ImageSpec, Lock
from builder.render import tree
from builder.spec.matrix import load_matrix
from builder.usecases import lock as locking
from builder.util.errors import UserError
from builder.workspace import Workspace
from tests.conftest import one_line_error
from tests.usecase_fixtures import OFFLINE, InOrder, Resolver

ROOT = Path(__file__).resolve().parents[1]
RunCli = Callable[..., Result]

AMD = "cuda13-debian12-py3.11-amd64"
ARM = "cuda13-debian12-py3.11-arm64"
TORCH = "torch2.14.1-cu130-py3.11-debian12"
CUPY = "cupy14.0.0-cu130-py3.11-debian12"
NUMBA = "numba0.68.0-cu130-py3.11-debian12"  # on the line's base, but not a member: `line_layers` does not name it
# the pins the stand-in resolver gives the line: within the cuda13-debian12 base's constraints
CUBLAS, RUNTIME = "13.1.1.3", "13.0.96"
LINE_PINS = {"nvidia-cublas": CUBLAS, "nvidia-cuda-runtime": RUNTIME}

MATRIX = """\
registry: reg/x
bases:
  cuda13-debian12: {vendor: cuda, version: "13.0", os: debian12, bootstrap: debootstrap, platforms: [linux/amd64, linux/arm64]}
python: ["3.11"]
frameworks:
  torch: ["2.14.1"]
  cupy: ["14.0.0"]
  numba: ["0.68.0"]
stacks:
  torch: [torch]
  cupy: [cupy]
  numba: [numba]
line_layers:
  - select: "stack=torch"
    reason: "shares the line's NVIDIA layer"
  - select: "stack=cupy"
    reason: "shares the line's NVIDIA layer"
"""


def hashes(name: str, count: int = 2) -> tuple[str, ...]:
    """Distinct, stable sha256 digests for a package (a lock keeps each as written)."""
    return tuple(sorted(hashlib.sha256(f"{name}-{i}".encode()).hexdigest() for i in range(count)))


def resolution(top: dict[str, str], deps: dict[str, str]) -> str:
    """uv's output: `top` required by the requirements, `deps` by the first of them, each hashed."""
    first = sorted(top)[0]
    rows = {**{n: (v, "-r requirements.in") for n, v in top.items()}, **{n: (v, first) for n, v in deps.items()}}
    return "".join(
        f"{name}=={version} \\\n" + " \\\n".join(f"    --hash=sha256:{h}" for h in hashes(name)) + f"\n    # via {via}\n"
        for name, (version, via) in sorted(rows.items())
    )


def pinned(pins: dict[str, str], inputs: str = "sha256:" + "0" * 64) -> Lock:
    return Lock(text="", inputs=inputs, pins=tuple(sorted(pins.items())))


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    path = tmp_path_factory.mktemp("line") / "matrix.yaml"
    path.write_text(MATRIX, encoding="utf-8")
    return Workspace(path)


def spec_of(ws: Workspace, image: str) -> ImageSpec:
    return next(s for s in ws.decided.images if s.id == image)


def target(ws: Workspace, key: str = AMD) -> LockTarget:
    return ws.line_locks()[key][0]


# ---------------------------------------------------------------- the line and its joint target


def test_the_members_line_is_base_python_and_architecture(ws: Workspace) -> None:
    lines = {s.id: s.line for s in ws.decided.images}
    assert lines == {
        TORCH: AMD, f"{TORCH}-arm64": ARM, CUPY: AMD, f"{CUPY}-arm64": ARM, NUMBA: None, f"{NUMBA}-arm64": None,
    }  # fmt: skip
    assert all(line.key_of(s) == s.line for s in ws.decided.images if s.line is not None)
    assert line.key_of(spec_of(ws, NUMBA)) == AMD, "key_of names the line of any image; line_layers decides membership"
    assert line.rel_path(AMD) == f"lines/{AMD}.lock" and line.path_of(Path("images"), AMD) == Path(f"images/lines/{AMD}.lock")
    assert [s.id for s in ws.selected(f"line={ARM}", use_default=False)] == [f"{CUPY}-arm64", f"{TORCH}-arm64"]


def test_the_joint_target_is_every_members_own_requirements_without_numpy(ws: Workspace) -> None:
    torch, cupy = spec_of(ws, TORCH), spec_of(ws, CUPY)
    assert any(p.startswith("numpy==") for p in cupy.packages), "the case needs a member that pins NumPy"
    joint = line.target_of(AMD, [torch, cupy], table())
    assert joint.image == f"line-{AMD}" == line.lock_id(AMD)
    assert joint.requirements == ("cupy-cuda13x[ctk]==14.0.0", "torch==2.14.1"), "the union, sorted, numpy and line pins left out"
    assert joint.constraints == torch.constraints == cupy.constraints, "one base: the members share the CUDA constraints"
    assert (joint.python, joint.platform, joint.indexes) == ("3.11", "x86_64-manylinux_2_36", ())
    assert line.target_of(ARM, [spec_of(ws, f"{TORCH}-arm64")], table()).platform == "aarch64-manylinux_2_36"


def test_the_joint_target_unions_what_members_bring(ws: Workspace) -> None:
    torch, cupy = spec_of(ws, TORCH), spec_of(ws, CUPY)
    torch = replace(torch, constraints=(*torch.constraints, "filelock<4"), index_urls=("https://b.example/simple",))
    cupy = replace(cupy, index_urls=("https://a.example/simple", "https://b.example/simple"))
    joint = line.target_of(AMD, [torch, cupy], table())
    assert "filelock<4" in joint.constraints and len(joint.constraints) == len(set(joint.constraints))
    assert joint.indexes == ("https://a.example/simple", "https://b.example/simple")
    already = replace(torch, packages=(*torch.packages, f"nvidia-cublas=={CUBLAS}"))
    assert line.target_of(AMD, [already], table()).requirements == ("torch==2.14.1",), "a line pin is not a member's own"


# ---------------------------------------------------------------- the line lock: uv's joint resolution, NVIDIA wheels only


def joint_lock(joint: LockTarget, nvidia: dict[str, str] | None = None) -> str:
    """The line lock for a joint resolution of torch and cupy that also pins numpy and filelock."""
    top = {"cupy-cuda13x": "14.0.0", "torch": "2.14.1"}
    resolved = resolution(top, {"filelock": "3.20.0", "numpy": "2.3.5", **(LINE_PINS if nvidia is None else nvidia)})
    return line.line_text(joint, files.lock_text(joint.image, joint.inputs, joint.python, joint.platform, resolved))


def test_a_line_lock_keeps_only_the_nvidia_wheels_with_their_hashes(ws: Workspace) -> None:
    joint = target(ws)
    text = joint_lock(joint)
    lock = files.load(text, "the line lock")
    assert lock.pins == (("nvidia-cublas", CUBLAS), ("nvidia-cuda-runtime", RUNTIME)) and lock.inputs == joint.inputs
    assert dict(lock.hashes) == {"nvidia-cublas": hashes("nvidia-cublas"), "nvidia-cuda-runtime": hashes("nvidia-cuda-runtime")}
    head = text.split("\n")
    assert head[0] == f"# GENERATED by `builder lock` for line-{AMD}: every package pinned with its hashes; do not edit."
    assert head[1] == f"# `builder lock --select line={AMD}` re-resolves it; `builder lock --check` verifies it."
    assert head[3] == "# target: python 3.11, x86_64-manylinux_2_36"
    contents = files.read(text, "the line lock")
    assert {p.via for p in contents.packages} == {(files.REQUIREMENTS,)}, "each required by the line itself, not by torch or cupy"
    assert files.write(contents) == text, "in the one form `builder lock` writes"
    line.verify_line(lock, joint, "the line lock")
    assert line.pins_of(lock) == (f"nvidia-cublas=={CUBLAS}", f"nvidia-cuda-runtime=={RUNTIME}")
    assert line.nvidia_only(files.load(files.lock_text(joint.image, joint.inputs, "3.11", joint.platform, resolution(
        {"torch": "2.14.1"}, {"numpy": "2.3.5", **LINE_PINS})), "uv")) == sorted(LINE_PINS.items())  # fmt: skip


def test_a_joint_resolution_without_nvidia_wheels_is_no_line_lock(ws: Workspace) -> None:
    with pytest.raises(UserError, match="no packages"):
        files.load(joint_lock(target(ws), nvidia={}), "the line lock")


def refusal(lock: Lock, joint: LockTarget) -> UserError:
    with pytest.raises(UserError) as caught:
        line.verify_line(lock, joint, f"images/lines/{AMD}.lock")
    assert caught.value.file == f"images/lines/{AMD}.lock", caught.value
    assert "re-lock" in caught.value.message or "`builder lock`" in caught.value.message, "the message says the fix"
    return caught.value


def test_another_lines_lock_is_refused_at_its_first_line(ws: Workspace) -> None:
    other = files.load(joint_lock(target(ws, ARM)), "arm64")
    error = refusal(other, target(ws))
    assert error.line == 1 and f"is the lock of line-{ARM}, not of line-{AMD}" in error.message
    image = spec_of(ws, TORCH)
    own = files.load(
        files.lock_text(TORCH, "sha256:" + "1" * 64, "3.11", target(ws).platform, resolution({"torch": "2.14.1"}, LINE_PINS)), "x"
    )
    assert refusal(own, target(ws)).line == 1, f"an image's lock ({image.id}) is no line's"


def test_a_line_lock_holding_another_package_is_refused_at_its_line(ws: Workspace) -> None:
    joint = target(ws)
    extra = files.Package("filelock", "3.20.0", hashes("filelock"), (files.REQUIREMENTS,))
    kept = files.read(joint_lock(joint), "the line lock")
    text = files.write(replace(kept, packages=(*kept.packages, extra)))
    error = refusal(files.load(text, "edited"), joint)
    assert "filelock is not an NVIDIA library wheel" in error.message
    assert error.line == next(i for i, row in enumerate(text.split("\n"), 1) if row.startswith("filelock=="))


def test_a_line_lock_for_another_target_is_refused(ws: Workspace) -> None:
    joint = target(ws)
    kept = files.read(joint_lock(joint), "the line lock")
    error = refusal(files.load(files.write(replace(kept, python="3.12")), "edited"), joint)
    assert error.line == 4 and "is for python 3.12" in error.message


def test_a_stale_line_lock_is_read_but_not_judged_against_its_old_inputs(ws: Workspace) -> None:
    """Stale is `lock --check`'s finding (and `builder lock` re-resolves it), not a broken file."""
    joint = target(ws)
    kept = files.read(joint_lock(joint), "the line lock")
    old = files.load(files.write(replace(kept, inputs="sha256:" + "2" * 64, python="3.12")), "old")
    line.verify_line(old, joint, "old")


# ---------------------------------------------------------------- each member requires its line's pins


def test_a_member_is_joined_to_its_lines_pins_once(ws: Workspace) -> None:
    cupy = spec_of(ws, CUPY)
    assert cupy.packages == ("cupy-cuda13x[ctk]==14.0.0", "numpy==2.3.5"), "no line lock yet: the member is as planned"
    locks = {AMD: files.load(joint_lock(target(ws)), "line")}
    joined = line.joined(cupy, locks)
    assert joined.packages == ("cupy-cuda13x[ctk]==14.0.0", "numpy==2.3.5", f"nvidia-cublas=={CUBLAS}", f"nvidia-cuda-runtime=={RUNTIME}")
    assert line.joined(joined, locks) == joined, "joining an already joined member changes nothing"
    moved = {AMD: pinned({"nvidia-cublas": "13.0.0.19"})}
    assert line.joined(joined, moved).packages == ("cupy-cuda13x[ctk]==14.0.0", "numpy==2.3.5", "nvidia-cublas==13.0.0.19")
    assert line.joined(cupy, {}) is cupy and line.joined(cupy, {ARM: locks[AMD]}) is cupy, "no lock of its line: unchanged"
    numba = spec_of(ws, NUMBA)
    assert line.joined(numba, {AMD: locks[AMD]}) is numba, "not a member: unchanged"


def test_differs_says_how_a_member_lock_leaves_its_lines_set() -> None:
    the_line = pinned(LINE_PINS)
    same = pinned({**LINE_PINS, "torch": "2.14.1", "numpy": "2.3.5", "cuda-toolkit": "13.0.2"})
    assert line.differs(same, the_line) is None, "its other packages are its own"
    extra = pinned({**LINE_PINS, "nvidia-nccl-cu13": "2.28.3"})
    assert line.differs(extra, the_line) == "it pins nvidia-nccl-cu13==2.28.3, which the line lock does not hold"
    other = pinned({**LINE_PINS, "nvidia-cublas": "13.0.0.19"})
    assert line.differs(other, the_line) == f"it pins nvidia-cublas==13.0.0.19, the line lock nvidia-cublas=={CUBLAS}"
    short = pinned({"nvidia-cublas": CUBLAS})
    assert line.differs(short, the_line) == f"it does not pin nvidia-cuda-runtime, which the line lock pins at {RUNTIME}"


# ---------------------------------------------------------------- matrix.yaml `line_layers`, errors at their line


def line_number(text: str, needle: str) -> int:
    return next(i for i, row in enumerate(text.split("\n"), 1) if needle in row)


def test_line_layers_are_read_with_their_line(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX, encoding="utf-8")
    at = line_number(MATRIX, '- select: "stack=torch"')
    assert load_matrix(path).line_layers == (
        ("stack=torch", "shares the line's NVIDIA layer", at), ("stack=cupy", "shares the line's NVIDIA layer", at + 2)
    )  # fmt: skip


@pytest.mark.parametrize(
    ("old", "new", "needle", "words"),
    [
        ('    reason: "shares the line\'s NVIDIA layer"\n  - select: "stack=cupy"', '  - select: "stack=cupy"', '"stack=torch"',
         "needs 'reason:'"),
        ('"stack=cupy"', '"colour=blue"', "colour=blue", "line_layers.select"),
        ('    reason: "shares the line\'s NVIDIA layer"\n  - select: "stack=cupy"', '    why: "x"\n  - select: "stack=cupy"', "why:",
         "why"),
    ],
    ids=["missing reason", "bad select", "unknown key"],
)  # fmt: skip
def test_a_bad_line_layers_entry_is_one_line_at_its_line(
    old: str, new: str, needle: str, words: str, in_tmp: Path, cli: RunCli
) -> None:  # fmt: skip
    assert MATRIX.count(old) == 1, old
    text = MATRIX.replace(old, new)
    (in_tmp / "matrix.yaml").write_text(text, encoding="utf-8")
    for command in (("plan",), ("lock", "--check")):
        found = one_line_error(cli("--matrix", "matrix.yaml", *command))
        assert (found["file"], int(found["line"])) == ("matrix.yaml", line_number(text, needle)), found[0]
        assert words in found["what"], found[0]
    assert sorted(p.name for p in in_tmp.iterdir()) == ["matrix.yaml"]


CUDA124 = 'cuda12.4-ubuntu22.04: {vendor: cuda, version: "12.4.1", os: ubuntu22.04, image: nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04}'
CPU = "local-debian12: {vendor: cpu, os: debian12, bootstrap: debootstrap}"


@pytest.mark.parametrize(
    ("base", "select", "image"),
    [(CUDA124, "stack=cupy,python=3.11", "cupy14.0.0-cu124-py3.11-ubuntu22.04"), (CPU, "stack=numba", "numba0.68.0-cpu-py3.11-debian12")],
    ids=["cuda-in-the-base", "cpu"],
)
def test_a_line_layers_entry_naming_an_image_whose_cuda_is_not_from_wheels_is_refused_at_its_line(
    base: str, select: str, image: str, in_tmp: Path, cli: RunCli
) -> None:
    """A line shares NVIDIA library wheels: an image whose CUDA is the base's (or that has none) has none to share."""
    text = MATRIX.replace("  cuda13-debian12: {vendor: cuda", f"  {base}\n  cuda13-debian12: {{vendor: cuda")
    text = text.replace('"stack=cupy"', f'"{select}"')
    (in_tmp / "matrix.yaml").write_text(text, encoding="utf-8")
    for command in (("plan",), ("render", "--check"), ("lock", "--check")):
        found = one_line_error(cli("--matrix", "matrix.yaml", *command))
        assert (found["file"], int(found["line"])) == ("matrix.yaml", line_number(text, f'"{select}"')), found[0]
        assert f"line_layers.select {select!r} names {image}, whose CUDA is not from wheels" in found["what"], found[0]
        assert "narrow the expression to CUDA-from-wheels images" in found["what"]
    assert sorted(p.name for p in in_tmp.iterdir()) == ["matrix.yaml"]


# ---------------------------------------------------------------- render owns images/lines/<line>.lock, and nothing else there


def test_a_line_lock_is_in_the_rendered_tree_and_its_manifest(ws: Workspace) -> None:
    text = joint_lock(target(ws))
    expected = tree.expected_tree([], {}, {AMD: text})
    assert expected[f"lines/{AMD}.lock"] == text.encode()
    assert f"lines/{AMD}.lock" in tree.manifest_bytes(expected).decode()


def planted(tmp_path: Path, files_: dict[str, bytes], listed: tuple[str, ...]) -> Path:
    """images/ holding `files_`, with a manifest that lists `listed` (each with its sha256 as planted)."""
    images = tmp_path / "images"
    for rel, data in files_.items():
        (images / rel).parent.mkdir(parents=True, exist_ok=True)
        (images / rel).write_bytes(data)
    if listed:
        (images / tree.MANIFEST).write_bytes(tree.manifest_bytes({rel: files_[rel] for rel in listed}))
    return images


def test_a_line_lock_the_manifest_lists_is_ours(tmp_path: Path, ws: Workspace) -> None:
    data = joint_lock(target(ws)).encode()
    images = planted(tmp_path, {f"lines/{AMD}.lock": data}, (f"lines/{AMD}.lock",))
    assert tree.read_manifest(images) == {f"lines/{AMD}.lock": "sha256:" + hashlib.sha256(data).hexdigest()}
    tree.check_ownership(images, {})  # render may replace or delete it
    assert tree.write_tree(images, tree.expected_tree([], {}, {ARM: joint_lock(target(ws, ARM))})) == sorted(
        [tree.MANIFEST, f"lines/{AMD}.lock", f"lines/{ARM}.lock"]
    )
    assert sorted(p.name for p in (images / "lines").iterdir()) == [f"{ARM}.lock"]


def test_a_line_lock_from_before_the_manifest_is_known_by_its_header(tmp_path: Path, ws: Workspace) -> None:
    images = planted(tmp_path, {f"lines/{AMD}.lock": joint_lock(target(ws)).encode()}, ())
    tree.check_ownership(images, {})


@pytest.mark.parametrize(
    ("rel", "listed"),
    [("lines/notes.txt", False), ("lines/notes.txt", True), (f"lines/{AMD}.lock", False), ("lines/bad name.lock", True)],
    ids=["notes", "notes-a-manifest-lists", "hand-written-lock", "not-a-line-name"],
)
def test_what_render_did_not_write_under_lines_is_foreign(tmp_path: Path, ws: Workspace, rel: str, listed: bool) -> None:
    """Only `lines/<line>.lock` can be render's below lines/: a manifest that lists anything else is not believed."""
    ours = f"lines/{ARM}.lock"
    data = joint_lock(target(ws, ARM)).encode()
    images = planted(tmp_path, {ours: data, rel: b"mine\n"}, (ours, rel) if listed else (ours,))
    assert sorted(tree.read_manifest(images)) == [ours]
    before = {str(p.relative_to(images)): p.read_bytes() for p in images.rglob("*") if p.is_file()}
    with pytest.raises(UserError, match=r"`builder render`.*move it out of lines/ or delete it"):
        tree.check_ownership(images, {ours: data})
    with pytest.raises(UserError, match="move it out of lines/"):
        tree.write_tree(images, tree.expected_tree([], {}, {ARM: data.decode()}))
    assert {str(p.relative_to(images)): p.read_bytes() for p in images.rglob("*") if p.is_file()} == before, "nothing changed"


# ---------------------------------------------------------------- the committed tree


def test_every_committed_member_pins_exactly_its_lines_nvidia_set(embedded_workspace: Workspace) -> None:
    ws = embedded_workspace
    members = line.members(ws.decided.images)
    assert sorted(members) == [AMD, ARM], "matrix.yaml's line_layers: the cuda13-debian12 line, amd64 and arm64"
    locks = ws.line_locks()
    checked = 0
    for key, specs in members.items():
        joint, found = locks[key]
        assert found is not None and found.inputs == joint.inputs, f"images/lines/{key}.lock is missing or stale"
        assert files.write(files.read(found.text, key)) == found.text
        line.verify_line(found, joint, key)
        assert found.pins and all(name.startswith("nvidia-") for name, _ in found.pins)
        assert {s.stack for s in specs} == {"torch", "jax", "cupy"}, [s.id for s in specs]
        for spec in specs:
            assert spec.lock is not None and spec.lock.inputs == target_for(spec, table()).inputs, f"{spec.id}: stale lock"
            assert line.differs(spec.lock, found) is None, f"{spec.id}: {line.differs(spec.lock, found)}"
            assert set(line.pins_of(found)) <= set(spec.packages), f"{spec.id} does not require its line's pins"
            checked += 1
    assert checked == 6
    outside = [s.id for s in ws.decided.images if s.line is None and s.base.name == "cuda13-debian12"]
    assert any(i.startswith("numba") for i in outside), "numba is left out of the line (docs/matrix.md says why)"


def test_the_committed_locks_check(cli: RunCli) -> None:
    done = cli("--matrix", str(ROOT / "matrix.yaml"), "lock", "--check")
    assert done.exit_code == 0, done.output
    assert "lines/" not in done.stdout and "0 missing or stale" in done.stderr


# ---------------------------------------------------------------- `lock --check` on a copy


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The embedded matrix with its committed images/ and templates/, worked on from a copy."""
    shutil.copyfile(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")
    shutil.copytree(ROOT / "images", tmp_path / "images")
    shutil.copytree(ROOT / "templates", tmp_path / "templates")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_lock_check_names_a_missing_line_lock(repo: Path, cli: RunCli) -> None:
    (repo / "images" / "lines" / f"{ARM}.lock").unlink()
    done = cli("--matrix", "matrix.yaml", "lock", "--check")
    assert done.exit_code == 1, done.output
    assert f"missing: images/lines/{ARM}.lock (no lines/{ARM}.lock)" in done.stdout.splitlines()
    assert f"images/lines/{AMD}.lock" not in done.stdout
    members = [row for row in done.stdout.splitlines() if row.startswith("stale: images/") and "-arm64/" in row]
    assert len(members) == 3, "without the line's pins its members' inputs are not what they were locked from"
    assert cli("--matrix", "matrix.yaml", "lock", "--check", "--select", f"line={AMD}").exit_code == 0


def test_lock_check_names_a_stale_line_lock(repo: Path, cli: RunCli) -> None:
    path = repo / "images" / "lines" / f"{AMD}.lock"
    text = path.read_text(encoding="utf-8")
    contents = files.read(text, "x")
    path.write_text(files.write(replace(contents, inputs="sha256:" + "3" * 64)), encoding="utf-8")
    done = cli("--matrix", "matrix.yaml", "lock", "--check", "--select", f"line={AMD}")
    assert done.exit_code == 1, done.output
    assert f"stale: images/lines/{AMD}.lock (its members' requirements or constraints changed since `builder lock`)" in done.stdout


def test_a_line_lock_copied_from_the_other_line_is_refused_naming_it(repo: Path, cli: RunCli) -> None:
    shutil.copyfile(repo / "images" / "lines" / f"{ARM}.lock", repo / "images" / "lines" / f"{AMD}.lock")
    for command in (("lock", "--check"), ("render", "--check"), ("plan",)):
        found = one_line_error(cli("--matrix", "matrix.yaml", *command))
        assert (found["file"], found["line"]) == (f"images/lines/{AMD}.lock", "1"), (command, found[0])
        assert f"is the lock of line-{ARM}, not of line-{AMD}" in found["what"]


# ---------------------------------------------------------------- `builder lock`: the lines first, then their members on the pins


@dataclass
class Locks:
    root: Path
    resolver: Resolver
    reported: list[locking.LockResult] = field(default_factory=list)

    @property
    def ws(self) -> Workspace:
        return Workspace(self.root / "matrix.yaml")

    def run(self, select: str | None = None, **options: bool) -> dict[str, locking.LockResult]:
        self.reported.clear()
        self.resolver.asked.clear()
        ws = self.ws
        chosen = ws.selected(select, use_default=False)
        results = locking.lock_images(ws, chosen, locking.LockOptions(sources=OFFLINE, **options), self.reported.append)
        assert sorted(r.id for r in results) == sorted(r.id for r in self.reported), "every result is reported"
        return {r.id: r for r in results}

    def lock(self, image: str) -> Lock | None:
        path = self.root / "images" / image / files.LOCK_NAME
        return files.load(path.read_text(encoding="utf-8"), str(path)) if path.exists() else None

    def line_lock(self, key: str) -> Lock | None:
        path = line.path_of(self.root / "images", key)
        return files.load(path.read_text(encoding="utf-8"), str(path)) if path.exists() else None


@pytest.fixture
def locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Locks:
    (tmp_path / "matrix.yaml").write_text(MATRIX, encoding="utf-8")
    resolver = Resolver()
    for key in (AMD, ARM):
        resolver.pins[line.lock_id(key)] = dict(LINE_PINS)
    monkeypatch.setattr(locking, "resolve", resolver)
    monkeypatch.setattr(locking, "uv_binary", lambda: "uv")
    return Locks(tmp_path, resolver)


MEMBERS = {AMD: (TORCH, CUPY), ARM: (f"{TORCH}-arm64", f"{CUPY}-arm64")}


def test_a_first_lock_resolves_each_line_before_its_members_and_they_pin_its_set(locks: Locks) -> None:
    results = locks.run(keep_going=True)
    assert locks.resolver.asked[:2] == [f"line-{AMD}", f"line-{ARM}"], "the lines first: their members lock on their pins"
    assert [r.id for r in locks.reported[:2]] == [f"line-{AMD}", f"line-{ARM}"]
    assert {k: r.status for k, r in results.items()} == {
        f"line-{AMD}": "locked", f"line-{ARM}": "locked", **{i: "locked" for ids in MEMBERS.values() for i in ids},
        NUMBA: "locked", f"{NUMBA}-arm64": "locked",
    }  # fmt: skip
    line_result = results[f"line-{AMD}"]
    assert line_result.path == f"lines/{AMD}.lock" and line_result.pins == 2 and results[TORCH].path == f"{TORCH}/requirements.lock"
    for key, ids in MEMBERS.items():
        found = locks.line_lock(key)
        assert found is not None and found.pins == tuple(sorted(LINE_PINS.items())), "its NVIDIA wheels only"
        for image in ids:
            member = locks.lock(image)
            assert member is not None and line.differs(member, found) is None, image
            assert f"nvidia-cublas=={CUBLAS}" in (locks.root / "images" / image / "requirements.txt").read_text(encoding="utf-8")
    ws = locks.ws
    assert {r.status for r in locking.check_lines(ws, ws.decided.images)} == {"current"}
    checked = locking.check(ws.decided.images)
    assert len(checked) == 6 and {(r.file, r.status) for r in checked} == {(FIT_NAME, "missing")}, (
        "every lock current: only the fit measured from it is missing (`lock --measure`'s, not this test's)"
    )
    again = locks.run()
    assert locks.resolver.asked == [] and {r.status for r in again.values()} == {"current"}, "nothing stale: nothing resolved"


def test_locking_one_member_locks_its_line_first_and_only_that(locks: Locks) -> None:
    results = locks.run(select=f"id={CUPY}")
    assert locks.resolver.asked == [f"line-{AMD}", CUPY]
    assert sorted(results) == [CUPY, f"line-{AMD}"] and locks.line_lock(ARM) is None and locks.lock(TORCH) is None


def test_select_line_locks_the_line_and_its_members(locks: Locks) -> None:
    results = locks.run(select=f"line={ARM}")
    assert sorted(results) == sorted([f"line-{ARM}", *MEMBERS[ARM]]) and {r.status for r in results.values()} == {"locked"}


def test_an_upgrade_that_moves_a_line_pin_relocks_the_line_and_its_members(locks: Locks) -> None:
    locks.run(keep_going=True)
    locks.resolver.pins[f"line-{AMD}"]["nvidia-cublas"] = "13.1.0.3"
    results = locks.run(select=f"line={AMD}", upgrade=True)
    assert results[f"line-{AMD}"].status == "locked" and results[f"line-{AMD}"].changes == (("nvidia-cublas", CUBLAS, "13.1.0.3"),)
    found = locks.line_lock(AMD)
    assert found is not None and dict(found.pins)["nvidia-cublas"] == "13.1.0.3"
    for image in MEMBERS[AMD]:
        member = locks.lock(image)
        assert results[image].status == "locked" and member is not None and line.differs(member, found) is None, image
    arm = locks.line_lock(ARM)
    assert arm is not None and dict(arm.pins)["nvidia-cublas"] == CUBLAS, "the other line is left as it was"


@pytest.mark.parametrize("keep_going", [False, True])
def test_a_line_that_cannot_be_locked_leaves_its_members_unlocked(locks: Locks, keep_going: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(locking, "ThreadPoolExecutor", InOrder)
    locks.resolver.fails[f"line-{AMD}"] = LockFailed("unresolvable", "torch 2.14.1 and cupy 14.0.0 want two cuBLAS")
    results = locks.run(keep_going=keep_going)
    assert results[f"line-{AMD}"].status == "unresolvable" and "two cuBLAS" in results[f"line-{AMD}"].detail
    for image in MEMBERS[AMD]:
        assert results[image].status == "not-locked" and f"its CUDA line {AMD} could not be locked" in results[image].detail
        assert image not in locks.resolver.asked and locks.lock(image) is None
    assert locks.line_lock(AMD) is None
    assert locking.lock_failed(list(results.values()))
    others = [i for i in (f"line-{ARM}", *MEMBERS[ARM], NUMBA) if results[i].status == "locked"]
    assert others == ([f"line-{ARM}", *MEMBERS[ARM], NUMBA] if keep_going else []), "the rest only with --keep-going"
    if not keep_going:
        assert locks.resolver.asked == [f"line-{AMD}"] and not (locks.root / "images").exists(), "nothing resolved, nothing written"
        assert results[f"line-{ARM}"].detail == "an earlier lock failed (use --keep-going)"


def test_a_joint_resolution_that_is_no_line_lock_is_a_failure_not_an_error(locks: Locks) -> None:
    """uv's output is checked like a lock on disk: a joint resolution with no NVIDIA wheels (or one
    that is not a lock) fails its line, in one line, and nothing is written for the line or its members."""
    locks.resolver.pins[f"line-{AMD}"] = {}
    results = locks.run(keep_going=True)
    failed = results[f"line-{AMD}"]
    assert failed.status == "failed" and "no packages" in failed.detail and "\n" not in failed.detail, failed
    assert all(results[i].status == "not-locked" for i in MEMBERS[AMD]) and locks.line_lock(AMD) is None
    assert results[f"line-{ARM}"].status == "locked"
