"""Everything per framework agrees with the registry (builder/frameworks.py), and the framework is
the unit of extension.

Adding a framework is one registry entry plus the places listed in builder/frameworks.py; each
test here fails naming the place that was forgotten. No module outside a framework's own names it
(test_no_module_names_a_framework_outside_its_own), and a toy sixth framework defined only in
this file (tests/toy_framework.py) goes through plan, render, `builder updates` and the report.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder import frameworks
from builder.compat import gpu_arch
from builder.compat.facts import DEFAULT_PATH
from builder.compat.rules import Framework, framework, names, registered, registry, table
from builder.compat.rules.python import OS_ONLY
from builder.probes import hello_gpu
from builder.render.templates import shipped_templates
from builder.spec.matrix import rule_keys
from builder.spec.select import select_keys
from tests import toy_framework
from tests.conftest import RunCli, WriteMatrix
from tests.fake_index import serve_index

NAMES = frameworks.NAMES
PACKAGE = Path(frameworks.__file__).resolve().parent
PROBE = PACKAGE / "probes" / "hello_gpu.py"  # ships alone into images: keeps its own copy of the names


def test_the_registry_is_the_framework_list() -> None:
    assert names() == NAMES
    assert len(set(NAMES)) == len(NAMES)
    assert set(NAMES) <= set(select_keys()) and set(NAMES) <= set(rule_keys())


@pytest.mark.parametrize("name", NAMES)
def test_each_framework_has_a_rule_module(name: str) -> None:
    where = f"builder/compat/rules/{name}.py"
    implementation = framework(name)
    assert isinstance(implementation, Framework) and implementation.name == name, f"{where}: define FRAMEWORK, a Framework named {name!r}"
    assert isinstance(implementation.section_keys, tuple) and implementation.section_keys, f"{where}: give its section_keys"


@pytest.mark.parametrize("name", NAMES)
def test_each_framework_has_facts_in_compat_yaml(name: str) -> None:
    loaded = dict(table().frameworks)
    assert name in loaded, f"{DEFAULT_PATH}: add a '{name}:' section"


def test_compat_yaml_has_no_section_for_an_unknown_framework() -> None:
    assert [name for name, _ in table().frameworks] == list(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_each_framework_has_a_template_partial(name: str) -> None:
    partial = shipped_templates() / "frameworks" / f"{name}.j2"
    assert partial.is_file(), f"add {partial.relative_to(shipped_templates().parent)}"


def test_no_partial_without_a_framework() -> None:
    partials = {p.stem for p in (shipped_templates() / "frameworks").glob("*.j2")}
    assert partials == set(NAMES), f"templates/frameworks/ has partials for {sorted(partials - set(NAMES))} which the registry lacks"


def test_the_probe_checks_every_framework() -> None:
    where = "builder/probes/hello_gpu.py"
    assert hello_gpu.FRAMEWORKS == NAMES, f"{where}: FRAMEWORKS must equal the registry, in its order"
    assert set(hello_gpu.CHECKS) == set(NAMES), f"{where}: CHECKS needs a check per framework"
    assert set(NAMES) <= set(hello_gpu.DIST_NAMES), f"{where}: DIST_NAMES needs each framework's distribution names"


def test_gpu_arch_rows_follow_the_registry() -> None:
    covered = {row.framework for row in gpu_arch.default_table()}
    wanted = {f.name for f in registry() if f.gpu_arch}
    assert covered == wanted, (
        f"{gpu_arch.TABLE_PATH}: rows cover {sorted(covered)}, the registry says {sorted(wanted)} (Framework.gpu_arch)"
    )


def test_the_registry_documents_its_places() -> None:
    """The places frameworks.py's docstring lists are the files each registered framework has: a
    renamed or moved place fails here, naming the path the docstring still states."""
    root = PACKAGE.parent
    places = re.findall(r"`((?:builder|templates)/[^`\s]+)`", frameworks.__doc__ or "")
    assert {Path(p).name for p in places} >= {"<name>.py", "compat.yaml", "<name>.j2", "hello_gpu.py", "gpu_arch.yaml"}, places
    missing = [
        path
        for place in places
        for path in ([place.replace("<name>", name) for name in frameworks.NAMES] if "<name>" in place else [place])
        if not (root / path).is_file()
    ]
    assert not missing, f"builder/frameworks.py names places that do not exist: {missing}"


# --- no branch on a framework's name outside its own module ------------------------------------


def _own_module(path: Path) -> str | None:
    """The framework a module belongs to: builder/compat/rules/<name>.py."""
    relative = path.relative_to(PACKAGE)
    return path.stem if relative.parts[:2] == ("compat", "rules") and path.stem in NAMES else None


def _name_literals(path: Path) -> list[tuple[int, str]]:
    """Where a framework's name is a string literal of its own (`fw == "torch"`, `in ("torch", ...)`,
    `{"torch": ...}`, `.get("torch")`): a branch or a table keyed by one framework. Names inside
    longer text (messages, examples) are prose."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES:
            found.append((node.lineno, node.value))
    return found


def test_no_module_names_a_framework_outside_its_own() -> None:
    """What differs per framework is asked of its implementation (builder.compat.rules.framework(name)),
    so a sixth framework cannot be forgotten in a branch; the registry itself and the probe (which
    ships alone into images) are the exceptions."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in (PROBE, Path(frameworks.__file__).resolve()):
            continue
        own = _own_module(path)
        offenders += [f"{path.relative_to(PACKAGE.parent)}:{line}: {name!r}" for line, name in _name_literals(path) if name != own]
    assert not offenders, "ask the framework's implementation (builder.compat.rules.framework(name)) instead of naming it: " + "; ".join(
        offenders
    )


def test_the_name_check_sees_a_branch(tmp_path: Path) -> None:
    branch = tmp_path / "branch.py"
    branch.write_text('def f(fw: str) -> bool:\n    """torch or not"""\n    return fw == "torch" or fw in ("jax", "cupy")\n')
    assert _name_literals(branch) == [(3, "torch"), (3, "jax"), (3, "cupy")]


# --- a toy sixth framework, defined only in tests/toy_framework.py -----------------------------

TOY_MATRIX = """\
# The toy framework beside a real one: images of each, and combinations the rules skip.
registry: ghcr.io/example/toy-images
bases:
  cpu-ubuntu24.04:
    vendor: cpu
    os: ubuntu24.04
    image: ubuntu:24.04
  cuda12.4-ubuntu22.04:
    vendor: cuda
    version: "12.4.1"
    os: ubuntu22.04
    image: nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04
  rocm6.4-ubuntu24.04:
    vendor: rocm
    version: "6.4"
    os: ubuntu24.04
    image: rocm/dev-ubuntu-24.04:6.4
python: ["3.11", "3.12"]
frameworks:
  toy: ["1.0.0"]
  numba: ["0.68.0"]
stacks:
  toy: [toy]
  toy-numba: [toy, numba]
exclude:
  - {toy: "1.0.*", stack: toy-numba, vendor: cuda}
"""


@pytest.fixture
def toy_workspace(tmp_path: Path, write_matrix: WriteMatrix) -> Iterator[Path]:
    """A matrix using the toy, its template partial in the matrix's own templates/, and the toy registered."""
    partial = tmp_path / "templates" / "frameworks" / f"{toy_framework.NAME}.j2"
    partial.parent.mkdir(parents=True)
    partial.write_text(toy_framework.PARTIAL, encoding="utf-8")
    with registered(toy_framework.toy(tmp_path / "toy-facts.yaml")):
        yield write_matrix(TOY_MATRIX)
    assert names() == NAMES  # the registry is the shipped one again


def test_a_toy_framework_goes_through_plan_render_updates_and_the_report(toy_workspace: Path, cli: RunCli) -> None:
    matrix = toy_workspace
    assert toy_framework.NAME in names() and toy_framework.NAME in select_keys() and toy_framework.NAME in rule_keys()
    assert isinstance(framework(toy_framework.NAME), toy_framework.Toy)  # through the registry, like the five
    assert toy_framework.NAME in dict(table().frameworks)  # its section, from its own facts file
    facts = framework(toy_framework.NAME).facts_at

    # plan: its rules decide, its variant names the images, the include/exclude keys know it
    planned = cli("--matrix", str(matrix), "plan", "--format", "json", "--explain")
    assert planned.exit_code == 0, planned.output
    plan = json.loads(planned.output)
    images = {image["id"]: image for image in plan["images"]}
    assert set(images) == {
        "toy1.0.0-cpu-py3.12-ubuntu24.04",
        "toy1.0.0-cu124-py3.11-ubuntu22.04",
        "toy1.0.0-numba0.68.0-cpu-py3.12-ubuntu24.04",
    }
    cuda = images["toy1.0.0-cu124-py3.11-ubuntu22.04"]
    assert cuda["packages"] == ["toy[cuda12]==1.0.0"] and cuda["variants"] == {"toy": "cuda12"}
    assert images["toy1.0.0-numba0.68.0-cpu-py3.12-ubuntu24.04"]["variants"] == {"toy": "cpu", "numba": "cpu"}
    reasons = {(s["base"], s["stack"], s["python"]): s["reason"] for s in plan["skipped"]}
    assert reasons[("rocm6.4-ubuntu24.04", "toy", "3.12")] == "toy has no ROCm build; use a CUDA or cpu base"
    assert reasons[("cpu-ubuntu24.04", "toy", "3.11")] == "ubuntu24.04 packages Python 3.12, not 3.11" + OS_ONLY
    assert reasons[("cuda12.4-ubuntu22.04", "toy-numba", "3.11")] == f"excluded by {matrix}:26"

    # render: the Dockerfile includes its partial from the matrix's templates/
    rendered = cli("--matrix", str(matrix), "render")
    assert rendered.exit_code == 0, rendered.output
    dockerfile = (matrix.parent / "images" / "toy1.0.0-cu124-py3.11-ubuntu22.04" / "Dockerfile").read_text(encoding="utf-8")
    assert "ENV TOY_CACHE=/tmp/toy" in dockerfile and "io.builder.frameworks" in dockerfile
    requirements = (matrix.parent / "images" / "toy1.0.0-cu124-py3.11-ubuntu22.04" / "requirements.txt").read_text(encoding="utf-8")
    assert "toy[cuda12]==1.0.0" in requirements.splitlines()
    assert cli("--matrix", str(matrix), "render", "--check").exit_code == 0

    # updates: its index project, its rows, its metadata reader, the contradictions every framework shares
    with serve_index() as index:
        index.add("toy", "1.0.0", ">=3.10", ['toy-cuda12-kernels; extra == "cuda12"'])
        index.add("toy", "1.2.0", ">=3.10", ['toy-cuda12-kernels; extra == "cuda12"'])  # the 1.0 row covers it
        index.add("toy", "1.5.0", ">=3.13")  # the 1.5 row says Python 3.11-3.12
        index.add("toy", "2.0.0", ">=3.10")  # a series past the newest row
        index.add("numba", "0.68.0", ">=3.10")
        found = cli("--matrix", str(matrix), "updates", "--format", "json", "--index-json-url", index.json_url)
    assert found.exit_code == 0, found.output
    releases = {r["version"]: r for r in json.loads(found.output)["releases"] if r["framework"] == toy_framework.NAME}
    assert {v: r["status"] for v, r in releases.items()} == {"1.2.0": "plannable", "1.5.0": "needs rules", "2.0.0": "needs rules"}
    assert releases["1.2.0"]["cuda"] == "12" and releases["1.2.0"]["project"] == "toy"
    assert releases["1.2.0"]["accepted"] == ["cpu-ubuntu24.04/py3.12", "cuda12.4-ubuntu22.04/py3.11"]
    assert f"requires Python >=3.13 (its metadata), but toy.releases 1.5 in {facts} allows Python 3.11, 3.12" in releases["1.5.0"]["reason"]
    assert "starts a series newer than the newest toy row (1.5" in releases["2.0.0"]["reason"]
    assert f'add a toy.releases row for "2.0.0" (python, cuda) to {facts}, with its source' in releases["2.0.0"]["reason"]

    # the report: a row per image and per skipped combination, the toy's among them
    reported = cli("--matrix", str(matrix), "report")
    assert reported.exit_code == 0, reported.output
    markdown = (matrix.parent / "docs" / "support-matrix.md").read_text(encoding="utf-8")
    assert "toy 1.0.0" in markdown and "toy has no ROCm build" in markdown
    assert "toy1.0.0-cu124-py3.11-ubuntu22.04" in markdown


def test_a_name_the_registry_has_cannot_be_registered_again(tmp_path: Path) -> None:
    taken = toy_framework.Toy("numba", ("releases",), facts_file=tmp_path / "numba.yaml")
    with pytest.raises(ValueError, match="'numba' is registered already"), registered(taken):
        pass
    assert names() == NAMES
