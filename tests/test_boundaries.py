"""The package's layering, checked: the pure stages never reach the engine, the host or the terminal.

Pure (no Docker, no network, no terminal): spec/, compat/, render/, catalog/, report/, the publish
gate and tags, the nightly's comparison, history and summary, and the shared foundations.
Use-cases (usecases/) and the I/O stages (engine/, smoke/, host/, publish/,
updates/) print nothing: presentation is ui/.
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
    "report",
    "publish/gate.py",
    "publish/tags.py",
    "nightly/compare.py",
    "nightly/summary.py",
    "nightly/history.py",
)
FOUNDATIONS = ("errors.py", "records.py", "frameworks.py", "yamlsrc.py", "workspace.py")
IMPURE_FOR_PURE = ("docker", "rich", "builder.engine", "builder.host", "builder.smoke", "builder.ui", "builder.usecases", "builder.cli")
PRESENTATION = ("rich", "builder.ui", "builder.cli")


def modules(*parts: str) -> list[Path]:
    found: list[Path] = []
    for part in parts:
        path = PACKAGE / part
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return found


def imported(path: Path) -> set[str]:
    """Every module an import statement in this file names (also imports inside functions)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def offending(path: Path, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(name for name in imported(path) if any(name == f or name.startswith(f + ".") for f in forbidden))


@pytest.mark.parametrize("path", modules(*PURE, *FOUNDATIONS), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_pure_modules_import_no_engine_host_or_terminal(path: Path) -> None:
    assert offending(path, IMPURE_FOR_PURE) == [], f"{path.relative_to(PACKAGE)} is pure; move the I/O into engine/, host/ or ui/"


@pytest.mark.parametrize(
    "path", modules("usecases", "engine", "smoke", "host", "publish", "nightly", "updates"), ids=lambda p: str(p.relative_to(PACKAGE))
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
