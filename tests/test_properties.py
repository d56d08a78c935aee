"""Properties over generated inputs (hypothesis): ids, validation robustness, value grammars.

Examples are kept modest (<= 200 each, derandomized) so the file runs in a few seconds and the same
inputs are tried on every run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from builder.model.plan import Base, ImageSpec, Matrix
from builder.render.context import content_hash, contexts
from builder.spec import grammar
from builder.spec.expand import expand
from builder.spec.matrix import load_matrix
from builder.spec.plan import make_plan
from builder.util.errors import UserError
from builder.util.yamlsrc import loads

FAST = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
MANY = settings(max_examples=200, deadline=None, derandomize=True)

# Bases with distinct (os, accelerator major.minor), so no two of them can yield the same image id.
BASE_POOL: tuple[Base, ...] = (
    Base("cuda11.8-ubuntu22.04", "cuda", "ubuntu22.04", "11.8.0", "nvidia/cuda:11.8.0-cudnn8-runtime-ubuntu22.04"),
    Base("cuda12.4-ubuntu22.04", "cuda", "ubuntu22.04", "12.4.1", "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04"),
    Base("cuda12.6-ubuntu22.04", "cuda", "ubuntu22.04", "12.6.3", "nvidia/cuda:12.6.3-cudnn-runtime-ubuntu22.04"),
    Base("cuda12.8-ubuntu24.04", "cuda", "ubuntu24.04", "12.8.1", "nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04"),
    Base("cuda13.0-ubuntu24.04", "cuda", "ubuntu24.04", "13.0.0", "nvidia/cuda:13.0.0-cudnn-runtime-ubuntu24.04"),
    Base("rocm6.2-ubuntu22.04", "rocm", "ubuntu22.04", "6.2", "rocm/dev-ubuntu-22.04:6.2"),
    Base("rocm7.2-ubuntu22.04", "rocm", "ubuntu22.04", "7.2", "rocm/dev-ubuntu-22.04:7.2"),
    Base("cpu-ubuntu24.04", "cpu", "ubuntu24.04", None, "ubuntu:24.04"),
    Base("local-debian12", "cpu", "debian12", None, None, bootstrap="debootstrap"),
)
VERSION_POOL: dict[str, tuple[str, ...]] = {
    "torch": ("2.4.1", "2.5.1", "2.6.0", "2.9.1", "2.13.0", "2.14.1"),
    "tensorflow": ("2.14.1", "2.16.1", "2.18.0", "2.21.0"),
    "jax": ("0.4.35", "0.5.0", "0.7.0", "0.10.2", "0.11.0"),
    "cupy": ("13.3.0", "13.6.0", "14.0.0"),
    "numba": ("0.59.1", "0.60.0", "0.64.0", "0.68.0"),
}
PYTHON_POOL = ("3.10", "3.11", "3.12", "3.13")


def subset(pool: tuple[Any, ...]) -> st.SearchStrategy[tuple[Any, ...]]:
    """A non-empty subset of the pool, in pool order."""
    return st.sets(st.sampled_from(pool), min_size=1, max_size=min(len(pool), 4)).map(lambda chosen: tuple(p for p in pool if p in chosen))


@st.composite
def matrices(draw: st.DrawFn) -> Matrix:
    bases = draw(subset(BASE_POOL))
    pythons = draw(subset(PYTHON_POOL))
    names = draw(subset(tuple(VERSION_POOL)))
    frameworks = tuple((name, draw(subset(VERSION_POOL[name]))) for name in names)
    stacks = tuple((name, (name,)) for name in names)
    if len(names) >= 2 and draw(st.booleans()):
        stacks += (("combo", names[:2]),)
    return Matrix(
        path="matrix.yaml",
        registry="ghcr.io/example/gpu-images",
        default_select=(),
        bases=bases,
        python=pythons,
        frameworks=frameworks,
        stacks=stacks,
    )


def hashed(specs: tuple[ImageSpec, ...], matrix: Matrix) -> tuple[ImageSpec, ...]:
    """Each spec with its content hash, as Workspace.hashed gives it (a Workspace needs a matrix file)."""
    rendered = contexts(specs, matrix)
    return tuple(replace(spec, content_hash=content_hash(rendered[spec.id])) for spec in specs)


@FAST
@given(matrices())
def test_ids_unique_deterministic_and_valid(matrix: Matrix) -> None:
    plan = make_plan(matrix)
    plan = replace(plan, images=hashed(plan.images, matrix))
    ids = [spec.id for spec in plan.images]
    assert len(ids) == len(set(ids))
    for spec in plan.images:
        assert grammar.DOCKER_TAG.fullmatch(spec.id) and len(spec.id) <= 128, spec.id
        assert spec.content_hash.startswith("sha256:")
    for skip in plan.skipped:
        assert skip.reason
    total = sum(1 for _ in expand(matrix))
    assert len(plan.images) + len(plan.skipped) == total
    again = make_plan(matrix)
    again = replace(again, images=hashed(again.images, matrix))
    assert [(s.id, s.content_hash) for s in again.images] == [(s.id, s.content_hash) for s in plan.images]


# ---------------------------------------------------------------- validation never crashes


def validate_text(text: str, tmp_path: Path) -> None:
    """load_matrix either returns a Matrix or raises UserError; nothing else may escape."""
    path = tmp_path / "matrix.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        matrix = load_matrix(path)
    except UserError as exc:
        assert str(exc).strip()
        return
    assert isinstance(matrix, Matrix)


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(["3.11", "2.5.1", "cuda", "rocm", "cpu", "ubuntu22.04", "torch", "nvidia/cuda:12.4.1", "sha256:" + "a" * 64]),
)
keys = st.one_of(
    st.text(max_size=10),
    st.sampled_from(
        [
            "registry",
            "bases",
            "python",
            "frameworks",
            "stacks",
            "vendor",
            "os",
            "image",
            "version",
            "include",
            "exclude",
            "torch",
            "base",
            "stack",
        ]
    ),
)
documents = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5), max_leaves=20)

VALID: dict[str, Any] = {
    "registry": "ghcr.io/example/gpu-images",
    "bases": {
        "cuda12.4-ubuntu22.04": {
            "vendor": "cuda",
            "version": "12.4.1",
            "os": "ubuntu22.04",
            "image": "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04",
        }
    },
    "python": ["3.11"],
    "frameworks": {"torch": ["2.5.1"], "numba": ["0.60.0"]},
    "stacks": {"torch": ["torch"], "numba": ["numba"]},
    "exclude": [{"stack": "numba"}],
    "include": [{"base": "cuda12.4-ubuntu22.04", "stack": "torch", "torch": "2.5.1", "python": "3.11"}],
}


@st.composite
def mutated_matrices(draw: st.DrawFn) -> dict[str, Any]:
    """The valid matrix with one value somewhere replaced by an arbitrary document."""
    doc: dict[str, Any] = yaml.safe_load(yaml.safe_dump(VALID))
    node: Any = doc
    while True:
        children = list(node.items()) if isinstance(node, dict) else list(enumerate(node)) if isinstance(node, list) else []
        if not children:
            break
        key, child = draw(st.sampled_from(children))
        if not isinstance(child, dict | list) or draw(st.booleans()):
            node[key] = draw(documents)
            break
        node = child
    return doc


@MANY
@given(doc=documents)
def test_arbitrary_yaml_documents_are_matrix_or_user_error(doc: Any, tmp_path_factory: Any) -> None:
    validate_text(yaml.safe_dump(doc), tmp_path_factory.mktemp("doc"))


@MANY
@given(doc=mutated_matrices())
def test_mutated_matrices_are_matrix_or_user_error(doc: dict[str, Any], tmp_path_factory: Any) -> None:
    folder = tmp_path_factory.mktemp("mut")
    validate_text(yaml.safe_dump(doc), folder)
    try:
        matrix = load_matrix(folder / "matrix.yaml")
    except UserError:
        return
    with contextlib.suppress(UserError):  # a valid matrix plans, or says why it cannot (an include that cannot work)
        make_plan(matrix)


@MANY
@given(text=st.text(max_size=200))
def test_arbitrary_text_is_matrix_or_user_error(text: str, tmp_path_factory: Any) -> None:
    validate_text(text, tmp_path_factory.mktemp("txt"))


# Inputs found while writing these tests; each one escapes load_matrix as a non-UserError today.
@pytest.mark.parametrize(
    "text",
    [
        "registry: !!int abc\n",
        "python: [!!float x]\n",
        "python: [!!timestamp 2020-13-45]\n",
        "python: [!!timestamp soon]\n",
        "python: [!!bool maybe]\n",
    ],
)
def test_yaml_tag_on_a_wrong_scalar_is_a_user_error(text: str, tmp_path: Path) -> None:
    validate_text(text, tmp_path)


def test_recursive_yaml_alias_is_a_user_error(tmp_path: Path) -> None:
    validate_text('python: &p ["3.11", *p]\n', tmp_path)


def test_deeply_nested_yaml_is_a_user_error(tmp_path: Path) -> None:
    validate_text("python: " + "[" * 1000 + "]" * 1000 + "\n", tmp_path)


def test_error_for_a_key_with_a_newline_is_one_line(tmp_path: Path) -> None:
    """Errors are one line (docs/commands.md, exit codes); a key is shown with repr(), as values already are."""
    path = tmp_path / "matrix.yaml"
    path.write_text('"regis\\ntry": ghcr.io/example/gpu-images\n', encoding="utf-8")
    with pytest.raises(UserError) as caught:
        load_matrix(path)
    assert "\n" not in str(caught.value), str(caught.value)


# ---------------------------------------------------------------- grammars refuse shell metacharacters

DANGEROUS = ("\n", "$(", "`", ";", "'", '"')
VALID_IMAGE, VALID_VERSION, VALID_URL = "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04", "2.5.1", "https://download.pytorch.org/whl/cu124"


@st.composite
def poisoned(draw: st.DrawFn) -> str:
    """A string with at least one dangerous sequence, often around an otherwise valid value."""
    start = draw(st.sampled_from(["", VALID_IMAGE, VALID_VERSION, VALID_URL]) | st.text(max_size=20))
    bad = draw(st.sampled_from(DANGEROUS))
    end = draw(st.sampled_from(["", "id", "rm -rf /", VALID_VERSION]) | st.text(max_size=20))
    cut = draw(st.integers(min_value=0, max_value=len(start)))
    return start[:cut] + bad + start[cut:] + end


CHECKS: dict[str, Callable[[str], bool]] = {
    "is_image_ref": grammar.is_image_ref,
    "is_version": grammar.is_version,
    "is_url": grammar.is_url,
}


@pytest.mark.parametrize("check", CHECKS)
@MANY
@given(text=poisoned())
@example(text=VALID_IMAGE + "\n")
@example(text=VALID_VERSION + "\n")
@example(text=VALID_URL + "\n")
def test_grammars_refuse_dangerous_strings(check: str, text: str) -> None:
    assert not CHECKS[check](text), f"grammar.{check} accepts {text!r}"


def test_grammars_accept_the_valid_examples() -> None:
    assert grammar.is_image_ref(VALID_IMAGE)
    assert grammar.is_image_ref(f"{VALID_IMAGE}@sha256:{'a' * 64}")
    assert grammar.is_version(VALID_VERSION) and grammar.is_version("0.4.35rc1")
    assert grammar.is_url(VALID_URL)


def test_yamlsrc_keeps_lines() -> None:
    doc = loads("a: 1\nb:\n  - x\n  - y\n", "t.yaml")
    assert (doc.line_of("a"), doc.line_of("b"), doc["b"].line_of(1)) == (1, 2, 4)
