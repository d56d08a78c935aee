"""The package's layering, checked: the stage order, no package cycles, and the pure stages never
reach the engine, the host or the terminal.

Stage order (STAGES): a stage imports only the foundations and the stages before it, so each stage
can be read, tested and replaced knowing only what comes before it. This is the order of imports,
which is the data flow's except where a later stage writes a format an earlier one owns (publish
writes catalog/'s records, so catalog/ comes first; build and lock both read lock/'s files).

Pure (no Docker, no network, no terminal): spec/, compat/, render/, catalog/, report/, lock/'s
target, files and claims, fit's device rules and driver floors, the publish gate and tags, the nightly's comparison, history and
summary, and the shared foundations. Use-cases (usecases/) and the I/O stages (engine/, smoke/,
host/, publish/, updates/) print nothing: presentation is ui/.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "builder"
PURE = (
    "spec",
    "compat",
    "render",
    "catalog",
    "env",
    "report",
    "publish/gate.py",
    "publish/tags.py",
    "nightly/compare.py",
    "nightly/summary.py",
    "nightly/history.py",
    "lock/target.py",
    "lock/files.py",
    "lock/claims.py",
    "lock/wheels.py",
    "fit/arch.py",
    "fit/driver.py",
    "fit/rule.py",
    "fit/runs_on.py",
    "fit/labelled.py",
)
PURE_FOUNDATIONS = ("model", "util", "frameworks.py", "workspace.py")
IMPURE_FOR_PURE = ("docker", "rich", "builder.engine", "builder.host", "builder.smoke", "builder.ui", "builder.usecases", "builder.cli")
PRESENTATION = ("rich", "builder.ui", "builder.cli")


def modules(*parts: str) -> list[Path]:
    found: list[Path] = []
    for part in parts:
        path = PACKAGE / part
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return found


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, name) for every module an import statement in this file names: also imports inside
    functions and under TYPE_CHECKING (a type is a dependency too)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def imported(path: Path) -> set[str]:
    return {name for _, name in imports(path)}


def offending(path: Path, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(name for name in imported(path) if any(name == f or name.startswith(f + ".") for f in forbidden))


@pytest.mark.parametrize("path", modules(*PURE, *PURE_FOUNDATIONS), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_pure_modules_import_no_engine_host_or_terminal(path: Path) -> None:
    assert offending(path, IMPURE_FOR_PURE) == [], f"{path.relative_to(PACKAGE)} is pure; move the I/O into engine/, host/ or ui/"


@pytest.mark.parametrize(
    "path",
    modules("usecases", "engine", "smoke", "host", "fit", "publish", "nightly", "updates"),
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_use_cases_and_io_stages_do_not_present(path: Path) -> None:
    assert offending(path, PRESENTATION) == [], f"{path.relative_to(PACKAGE)} prints through rich; report events and let ui/ draw them"


def test_the_pure_pipeline_loads_without_docker_or_rich() -> None:
    """At run time too: planning and rendering the embedded matrix pulls in neither."""
    code = (
        "import sys; from builder.workspace import Workspace; "
        "ws = Workspace.locate(sys.argv[1]); ws.rendered_tree(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('docker', 'rich', 'requests')))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(PACKAGE.parent / "matrix.yaml")], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_every_subpackage_says_what_it_owns() -> None:
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and len(doc.splitlines()) >= 1, f"{init.relative_to(PACKAGE)} needs a one-line docstring saying what it owns"


# ---------------------------------------------------------------- stage order

# Shared by every stage; they import only each other (acyclic, test_no_package_cycles).
FOUNDATIONS = (
    "__init__",
    "util",  # errors, message hygiene, atomic files, YAML with line numbers, the query language
    "model",  # the documents that cross stages: plan records, results, probe report, measured fit, sources, versions
    "frameworks",  # the framework registry: each name and the module implementing it
    "probes",  # hello_gpu.py, stdlib only, copied into every image
)
# Each stage may import the foundations and the stages before it, never one after it.
STAGES = (
    "compat",  # facts and rules
    "spec",  # matrix.yaml -> the plan (ImageSpec per image)
    "lock",  # what each image is resolved for, the lock format, what a lock claims; uv
    "render",  # images/, the plan JSON / GitHub matrix / bake file
    "catalog",  # known-good records (publish writes them; report and pull read them; the workspace's store opens them)
    "env",  # a team's environment on a known-good record: gpu-env.yaml, its lock on the base's, the derived Dockerfile
    "workspace",  # a matrix file and the folders beside it: plan + locks + rendered tree
    "engine",  # Docker
    "host",  # what this host can run (asks the engine)
    "fit",  # will an image run on a host: device rules, driver floors, cuobjdump, the host's GPUs
    "smoke",  # locked-down test containers
    "publish",
    "report",
    "updates",
    "nightly",
    "usecases",
    "ui",
    "cli",
    "__main__",
)


def unit_of(path: Path, root: Path = PACKAGE) -> str:
    """The stage or foundation a file of the package belongs to: its subpackage, or its module."""
    first = path.relative_to(root).parts[0]
    return first.removesuffix(".py")


def unit_named(module: str, root: Path = PACKAGE) -> str | None:
    """The unit an imported module name belongs to; None outside the package (and for `builder`
    itself or a name it holds, like __version__: its __init__)."""
    parts = module.split(".")
    if parts[0] != "builder":
        return None
    if len(parts) == 1:
        return "__init__"
    first = parts[1]
    return first if (root / first).is_dir() or (root / f"{first}.py").is_file() else "__init__"


def units() -> list[str]:
    return sorted({unit_of(p) for p in PACKAGE.rglob("*.py")})


def dependencies(files: list[Path], root: Path = PACKAGE) -> dict[str, dict[str, str]]:
    """unit -> unit it imports -> the first import that does (`path:line name`), for messages."""
    graph: dict[str, dict[str, str]] = {}
    for path in files:
        source = unit_of(path, root)
        for line, name in sorted(imports(path)):
            target = unit_named(name, root)
            if target is not None and target != source:
                graph.setdefault(source, {}).setdefault(target, f"builder/{path.relative_to(root)}:{line} imports {name}")
    return graph


def backward_imports(graph: dict[str, dict[str, str]]) -> list[str]:
    """Each import that goes against the stage order, as one line saying what to do."""
    rank = {unit: 0 for unit in FOUNDATIONS} | {stage: n for n, stage in enumerate(STAGES, 1)}
    found = []
    for source, targets in sorted(graph.items()):
        for target, where in sorted(targets.items()):
            if source in FOUNDATIONS and target not in FOUNDATIONS:
                found.append(f"{where}: {source} is a foundation and may import only the foundations, not {target}")
            elif source not in FOUNDATIONS and rank.get(target, 0) >= rank[source]:
                found.append(
                    f"{where}: {target} comes after {source} in the stage order (tests/test_boundaries.py STAGES); "
                    f"move the importing code to {target} or later, or what it uses to {source} or earlier"
                )
    return found


def cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """The units that import each other round a cycle: each strongly connected group of two or
    more (Kosaraju: finish order on the graph, then reach on the reversed graph), sorted."""
    nodes = sorted(set(graph) | {t for targets in graph.values() for t in targets})
    order: list[str] = []
    seen: set[str] = set()
    for start in nodes:
        stack = [(start, iter(sorted(graph.get(start, {}))))] if start not in seen else []
        seen.add(start)
        while stack:
            node, rest = stack[-1]
            nxt = next((t for t in rest if t not in seen), None)
            if nxt is None:
                order.append(node)
                stack.pop()
            else:
                seen.add(nxt)
                stack.append((nxt, iter(sorted(graph.get(nxt, {})))))
    reverse: dict[str, set[str]] = {}
    for source, targets in graph.items():
        for target in targets:
            reverse.setdefault(target, set()).add(source)
    groups, placed = [], set()
    for node in reversed(order):
        if node in placed:
            continue
        group, todo = set(), [node]
        while todo:
            one = todo.pop()
            if one not in placed:
                placed.add(one)
                group.add(one)
                todo += reverse.get(one, set()) - placed
        if len(group) > 1:
            groups.append(sorted(group))
    return sorted(groups)


def test_every_subpackage_and_module_has_a_place_in_the_order() -> None:
    placed = set(FOUNDATIONS) | set(STAGES)
    assert [u for u in units() if u not in placed] == [], "add it to FOUNDATIONS or, in its place, to STAGES"
    assert sorted(placed - set(units())) == [], "a unit the package no longer has"


@pytest.mark.parametrize("unit", units())
def test_a_stage_imports_only_the_foundations_and_earlier_stages(unit: str) -> None:
    files = [p for p in PACKAGE.rglob("*.py") if unit_of(p) == unit]
    assert backward_imports(dependencies(files)) == []


def test_no_package_cycles() -> None:
    graph = dependencies(sorted(PACKAGE.rglob("*.py")))
    shown = [
        f"{', '.join(group)} import each other: " + "; ".join(graph[a][b] for a in group for b in group if b in graph.get(a, {}))
        for group in cycles(graph)
    ]
    assert shown == []


def test_a_backward_import_fails_naming_it(tmp_path: Path) -> None:
    """The checks themselves, on a package where spec/ imports render/ and render/ spec/ back."""
    fake = tmp_path / "builder"
    for name, text in {
        "spec/plan.py": "from builder.render.formats import image_entry\n",
        "render/tree.py": "import os\nfrom builder.spec import plan\n",
        "util/query.py": "def f() -> None:\n    from builder.spec.select import SELECT_KEYS\n",
    }.items():
        (fake / name).parent.mkdir(parents=True, exist_ok=True)
        (fake / name).write_text(text, encoding="utf-8")
    graph = dependencies(sorted(fake.rglob("*.py")), fake)
    assert backward_imports(graph) == [
        "builder/spec/plan.py:1 imports builder.render.formats: render comes after spec in the stage order "
        "(tests/test_boundaries.py STAGES); move the importing code to render or later, or what it uses to spec or earlier",
        "builder/util/query.py:2 imports builder.spec.select: util is a foundation and may import only the foundations, not spec",
    ]
    assert cycles(graph) == [["render", "spec"]]


def module_graph(files: list[Path], root: Path = PACKAGE) -> dict[str, dict[str, str]]:
    """module -> module of the package it imports -> the first import that does, for messages:
    the structure drawing's granularity, where two modules of one stage can still import each other."""
    known = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__") for p in files}
    graph: dict[str, dict[str, str]] = {}
    for path in files:
        source = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for line, name in sorted(imports(path)):
            parts = name.split(".")[1:] if name.split(".")[0] == "builder" else []
            target = next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in known), None)
            if target is not None and target != source:
                graph.setdefault(source, {}).setdefault(target, f"builder/{path.relative_to(root)}:{line} imports {name}")
    return graph


def test_no_module_cycles() -> None:
    """No two modules import each other, directly or round a circle, not even inside one stage
    (compat/facts.py and compat/rules/ once did: the loader now takes the frameworks it reads)."""
    graph = module_graph(sorted(PACKAGE.rglob("*.py")))
    shown = [
        f"{', '.join(group)} import each other: " + "; ".join(graph[a][b] for a in group for b in group if b in graph.get(a, {}))
        for group in cycles(graph)
    ]
    assert shown == []


def test_a_module_cycle_is_found(tmp_path: Path) -> None:
    fake = tmp_path / "builder"
    for name, text in {
        "compat/facts.py": "def f() -> None:\n    from builder.compat.rules import registry\n",
        "compat/rules/__init__.py": "from builder.compat.facts import Compat\n",
        "compat/rules/torch.py": "from builder.compat.rules import Framework\n",
    }.items():
        (fake / name).parent.mkdir(parents=True, exist_ok=True)
        (fake / name).write_text(text, encoding="utf-8")
    assert cycles(module_graph(sorted(fake.rglob("*.py")), fake)) == [["compat.facts", "compat.rules"]]


# --- versions are parsed in builder/model/versions.py only ----------------------------------------

VERSIONS = PACKAGE / "model" / "versions.py"
# The dot splits allowed outside the versions module, each with a comment at the split saying why.
DOT_SPLITS_ALLOWED = {
    "builder/util/query.py": "a query value's release prefixes, in a foundation model/ itself imports (util before model)",
    "builder/probes/hello_gpu.py": "the probe is stdlib only: it runs in the image, where builder.model.versions is not",
}
# Files whose splits say why here instead: the probe is copied into every build context, so a comment
# added to it would change every image's content hash and re-render all of images/.
WHY_HERE = {"builder/probes/hello_gpu.py"}


def _dot_splits(path: Path) -> list[int]:
    """Lines where `<text>.split(".")` (or rsplit) is called: a version taken apart by hand."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("split", "rsplit")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == "."
        ):
            found.append(node.lineno)
    return found


def _commented(path: Path, line: int) -> bool:
    lines = path.read_text(encoding="utf-8").splitlines()
    return any("#" in text for text in lines[max(0, line - 2) : line])


def test_no_version_is_split_by_hand_outside_the_versions_module() -> None:
    """Versions are values (builder/model/versions.py: Release, WheelVariant, ComputeCapability,
    release_line...): a new `.split(".")` outside it is a version parsed by hand, ASCII digits and
    local parts forgotten. The few allowed splits say why at the split."""
    offenders, uncommented, seen = [], [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == VERSIONS:
            continue
        name = str(path.relative_to(PACKAGE.parent))
        for line in _dot_splits(path):
            if name not in DOT_SPLITS_ALLOWED:
                offenders.append(f"{name}:{line}")
            elif name not in WHY_HERE and not _commented(path, line):
                uncommented.append(f"{name}:{line}")
            else:
                seen.add(name)
    assert not offenders, "parse versions with builder.model.versions (Release.parse, release_line, release_parts...): " + ", ".join(
        offenders
    )
    assert not uncommented, "an allowed split says why in a comment at it: " + ", ".join(uncommented)
    assert seen == set(DOT_SPLITS_ALLOWED), f"no split left in {sorted(set(DOT_SPLITS_ALLOWED) - seen)}: drop it from DOT_SPLITS_ALLOWED"
    assert len(DOT_SPLITS_ALLOWED) <= 3


def test_the_split_guard_sees_a_hand_split(tmp_path: Path) -> None:
    module = tmp_path / "hand.py"
    module.write_text('def major(v: str) -> int:\n    return int(v.split(".")[0]) + len(v.rsplit(".", 1)) + len(v.split("-"))\n')
    assert _dot_splits(module) == [2, 2]
    assert not _commented(module, 2)
