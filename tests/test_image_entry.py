"""images/<id>/image.json as a typed record, end to end: render writes it, the smoke runner hands it
and the inspected labels to the checks, and the checks read both without asking the engine."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest

from builder.model import image_entry
from builder.render import labels as lb
from builder.render.formats import image_entry as entry_of
from builder.render.templates import labels as dockerfile_labels
from builder.smoke.runner import CHECKS_DIR, Workdir, checks_env, pytest_argv
from builder.util.errors import UserError
from builder.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted((ROOT / "images").glob("*/image.json"))


def test_images_are_committed() -> None:
    assert len(COMMITTED) > 10, "the round trip below needs the committed images/"


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name)
def test_every_committed_image_json_reads_back_to_its_own_bytes(path: Path) -> None:
    entry = image_entry.from_json(json.loads(path.read_text(encoding="utf-8")), str(path))
    assert entry.text().encode() == path.read_bytes()
    assert entry.id == path.parent.name


def test_the_plan_entry_is_the_record_render_writes() -> None:
    ws = Workspace.locate(str(ROOT / "matrix.yaml"))
    for spec in ws.selected("id=*", use_default=False):
        entry = entry_of(spec)
        assert image_entry.from_json(json.loads(entry.text()), spec.id) == entry


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda d: d.pop("tag"), "lacks tag"),
        (lambda d: d.update(surprise=1), "unknown keys surprise"),
        (lambda d: d.update(frameworks=["torch"]), "'frameworks' must be an object"),
        (lambda d: d["base"].update(vendor="tpu"), "'base.vendor' must be one of cuda, rocm, cpu; got 'tpu'"),
        (lambda d: d["base"].pop("name"), "'base.name' must be text"),
        (lambda d: d["accelerator"].update(extra="x"), "'accelerator' has unknown keys extra"),
        (lambda d: d.update(lock="maybe"), "'lock' must be one of locked, stale, missing, unlocked"),
        (lambda d: d["runs_on"].update(gpus="8.0"), "'runs_on.gpus' must be a list of text"),
        (lambda d: d.update(packages="numpy==2"), "'packages' must be a list of text"),
    ],
)
def test_a_broken_image_json_is_one_line_naming_the_key(edit: object, says: str) -> None:
    data = json.loads(next(p for p in COMMITTED if "runs_on" in p.read_text()).read_text())
    edit(data)  # type: ignore[operator]
    with pytest.raises(UserError, match="render it again") as caught:
        image_entry.from_json(data, "x/image.json")
    assert says in str(caught.value) and str(caught.value).startswith("x/image.json: ")
    assert "\n" not in str(caught.value)


def test_the_frameworks_label_round_trips_and_refuses_what_is_not_ours() -> None:
    pairs = (("torch", "2.14.1"), ("numpy", "2.4.6"))
    assert lb.parse_frameworks_label(lb.frameworks_label(pairs), 8) == pairs
    assert lb.parse_frameworks_label("torch", 8) is None
    assert lb.parse_frameworks_label("torch=2.14.1; rm -rf /", 8) is None
    assert lb.parse_frameworks_label("a=1,b=2,c=3", 2) is None


def test_the_smoke_checks_never_ask_the_engine() -> None:
    """The runner inspects the image through the engine port and hands the labels over; a check that
    imported docker would need an engine of its own (and a socket the port does not name)."""
    for path in sorted(CHECKS_DIR.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not {m for m in imported if m == "docker" or m.startswith("docker.")}, f"{path.name} imports docker"
        assert "io.builder." not in path.read_text(encoding="utf-8"), f"{path.name} spells a label: import it from builder/render/labels.py"


def _run_label_check(tmp_path: Path, labels: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (spec,) = Workspace.locate(str(ROOT / "matrix.yaml")).selected("id=numba0.68.0-cpu-py3.11-debian12", use_default=False)
    work = Workdir(tmp_path / spec.id)
    work.prepare(spec)
    work.labels.write_text(json.dumps(labels), encoding="utf-8")
    env = checks_env("0" * 64, work, attached=False, timeout_s=60)
    return subprocess.run(
        [*pytest_argv(spec, work), "-k", "test_labels"], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _labels_of_the_build() -> dict[str, str]:
    (spec,) = Workspace.locate(str(ROOT / "matrix.yaml")).selected("id=numba0.68.0-cpu-py3.11-debian12", use_default=False)
    return {**dict(dockerfile_labels(spec, "https://example.org/src")), **lb.build_labels(spec, "abc123")}


def test_the_label_check_passes_on_the_labels_a_build_gives(tmp_path: Path) -> None:
    done = _run_label_check(tmp_path, _labels_of_the_build())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout


@pytest.mark.parametrize(
    ("change", "name"),
    [
        ({lb.FRAMEWORKS_LABEL: "numba=0.60.0"}, "frameworks"),
        ({lb.ID_LABEL: "someone-else"}, "id"),
        ({lb.HASH_LABEL: "sha256:other"}, "content hash"),
        ({lb.SOURCE_LABEL: ""}, "OCI source"),
    ],
)
def test_the_label_check_fails_on_labels_that_are_not_the_plans(tmp_path: Path, change: dict[str, str], name: str) -> None:
    done = _run_label_check(tmp_path, {**_labels_of_the_build(), **change})
    assert done.returncode == 1, f"{name}: " + done.stdout[-2000:]
    assert "1 failed" in done.stdout


def test_every_image_says_whether_it_is_reproducible_and_why() -> None:
    """image.json's `reproducible` (issue 41): only a canonical image on a bootstrapped base is; an apt
    step (hadolint DL3008), an unlocked image and a RUN install are each marked not, naming that step."""
    ws = Workspace.locate(str(ROOT / "matrix.yaml"))
    entries = {spec.id: (spec, entry_of(spec).reproducible) for spec in ws.decided.images}
    assert all(r is not None for _, r in entries.values()), "every image says it"
    yes = sorted(i for i, (_, r) in entries.items() if r is not None and r.image_id)
    assert yes and all(entries[i][0].canonical is not None and not entries[i][0].python_packages for i in yes)
    assert "numba0.68.1-cpu-py3.13-debian13" in yes, "the default selection's reproducible image"
    for spec, found in entries.values():
        assert found is not None
        if spec.python_packages:
            assert not found.image_id and "DL3008" in found.why and spec.base.from_ref in found.why
        elif spec.lock is None:
            assert not found.image_id and found.why.startswith("unlocked")
        elif spec.canonical is None:
            assert not found.image_id and "canonical_layers does not name it" in found.why
    with pytest.raises(UserError, match="reproducible"):
        doc = json.loads(COMMITTED[0].read_text())
        doc["reproducible"] = {"image_id": "yes", "why": "x"}
        image_entry.from_json(doc, str(COMMITTED[0]))
