"""Everything per framework agrees with the registry (builder/frameworks.py).

Adding a framework is one registry entry plus the places listed in builder/frameworks.py; each
test here fails naming the place that was forgotten.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from builder import frameworks
from builder.compat import gpu_arch
from builder.compat.facts import DEFAULT_PATH, table
from builder.compat.rules import rule_module
from builder.probes import hello_gpu
from builder.records import FRAMEWORKS
from builder.render.templates import shipped_templates
from builder.spec.matrix import RULE_KEYS
from builder.spec.select import SELECT_KEYS

NAMES = frameworks.NAMES


def test_the_registry_is_the_framework_list() -> None:
    assert FRAMEWORKS == NAMES
    assert len(set(NAMES)) == len(NAMES)
    assert set(NAMES) <= set(SELECT_KEYS) and set(NAMES) <= set(RULE_KEYS)


@pytest.mark.parametrize("name", NAMES)
def test_each_framework_has_a_rule_module(name: str) -> None:
    module = rule_module(name)
    where = f"builder/compat/rules/{name}.py"
    assert isinstance(module.SECTION_KEYS, tuple) and module.SECTION_KEYS, f"{where}: define SECTION_KEYS"
    assert callable(module.load), f"{where}: define load(table, section)"
    assert callable(module.decide), f"{where}: define decide(base, python, version, compat)"


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
    wanted = {f.name for f in frameworks.REGISTRY if f.gpu_arch}
    assert covered == wanted, (
        f"{gpu_arch.TABLE_PATH}: rows cover {sorted(covered)}, the registry says {sorted(wanted)} (Framework.gpu_arch)"
    )


def test_the_registry_documents_its_places() -> None:
    text = Path(frameworks.__file__).read_text(encoding="utf-8")
    for place in ("compat/rules/<name>.py", "compat.yaml", "templates/frameworks/<name>.j2", "hello_gpu.py", "gpu_arch.yaml"):
        assert place in text, place
