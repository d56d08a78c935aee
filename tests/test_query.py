"""The one query language (builder/util/query.py): `--select`, matrix.yaml's exclude entries and
`pull`/`catalog` queries parse and match by the same rules, release prefixes and globs included."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from builder.catalog.query import matching, parse_query
from builder.model.plan import Plan
from builder.spec.matrix import load_matrix
from builder.spec.plan import make_plan
from builder.spec.select import parse_select, select
from builder.util.errors import UserError
from builder.util.query import MAX_TERMS, SelectorIndex, Term, matches, parse_terms, value_matches
from tests.catalog_fixtures import record

RunCli = Callable[..., Result]
WriteMatrix = Callable[..., Path]

releases = st.lists(st.integers(min_value=0, max_value=150).map(str), min_size=1, max_size=4).map(".".join)


# -- the release-prefix rule ----------------------------------------------------------------------
@given(releases, releases)
def test_a_release_matches_by_whole_components_never_by_text(wanted: str, found: str) -> None:
    by_components = found.split(".")[: len(wanted.split("."))] == wanted.split(".")
    assert value_matches(wanted, found) is by_components
    assert value_matches(wanted, found + "+cu130") is by_components  # a local part the query does not name is ignored


@given(releases, st.integers(min_value=1, max_value=12))
def test_a_text_prefix_that_is_not_a_component_prefix_never_matches(found: str, length: int) -> None:
    wanted = found[:length].rstrip(".")
    assume(wanted != found and not found.startswith(wanted + "."))
    assert not value_matches(wanted, found)


@pytest.mark.parametrize(
    ("wanted", "found", "ok"),
    [
        ("2.14", "2.14.1", True),
        ("2.14", "2.14", True),
        ("2.1", "2.14.1", False),
        ("2.14", "2.140.0", False),
        ("2", "2.14.1", True),
        ("2.14+cu130", "2.14.1+cu130", True),  # a local part the query names must be equal
        ("2.14+cu130", "2.14.1+cu126", False),
        ("2.14.1+cu130", "2.14.1", False),
        ("2.14", "2.14.1rc1", True),  # 2.14's line; `2.14.1` is a whole component and does not match 1rc1
        ("2.14.1", "2.14.1rc1", False),
        ("12", "cuda12.4-ubuntu22.04", False),  # a release matches a version, never text around one
        ("Torch", "torch", True),
        ("cuda12.*", "CUDA12.4-ubuntu22.04", True),
        ("2.1*", "2.14.1", True),  # a glob is text, as written
    ],
)
def test_value_matching(wanted: str, found: str, ok: bool) -> None:
    assert value_matches(wanted, found) is ok


def test_select_and_query_agree(embedded_plan: Plan) -> None:
    """The intended change: `--select torch=2.14` now selects 2.14.1, as `pull torch=2.14` finds it."""
    chosen = select(embedded_plan.images, parse_select("torch=2.14"))
    assert chosen and {s.versions["torch"] for s in chosen} == {"2.14.1"}
    assert select(embedded_plan.images, parse_select("torch=2.1")) == ()
    assert {s.versions["torch"] for s in select(embedded_plan.images, parse_select("torch=2"))} == {"2.5.1", "2.13.0", "2.14.1", "2.15.0"}
    cpu = select(embedded_plan.images, parse_select("python=3.11,stack=TORCH"))
    assert cpu and all(s.python == "3.11" and s.stack == "torch" for s in cpu)
    records = [record("torch2.14.1-cu130-py3.11-debian12", frameworks={"torch": "2.14.1"})]
    assert matching(records, parse_query("torch=2.14")) == records
    assert matching(records, parse_query("torch=2.1")) == []


def test_select_on_the_command_line_takes_a_release_prefix(cli: RunCli, embedded_matrix_path: Path) -> None:
    result = cli("--matrix", str(embedded_matrix_path), "plan", "--select", "torch=2.14,python=3.12")
    assert result.exit_code == 0, result.stderr
    assert "torch2.14.1-cu126-on-cu128-py3.12-ubuntu24.04" in result.output


# -- one parser -----------------------------------------------------------------------------------
words = st.sampled_from(["torch=2.14", "stack=torch", "base=cuda12.*", "python=3.11", "id=numba*-cu13*", "vendor=cpu"])


@given(st.lists(words, max_size=6), st.sampled_from([",", " ", ", ", " ,"]))
def test_select_and_query_parse_the_same_terms(chosen: list[str], sep: str) -> None:
    text = sep.join(chosen)
    expected = tuple(dict.fromkeys(Term(*w.split("=")) for w in chosen))
    assert parse_select(text) == expected
    assert parse_query(text) == expected
    assert parse_terms(", ".join(str(t) for t in expected), "query", "x=y") == expected  # str() round-trips


def test_spaces_around_equals_and_case_are_the_same_term() -> None:
    assert parse_select("Stack = torch ,python=3.11") == (Term("stack", "torch"), Term("python", "3.11"))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("torch", "select term 'torch' is not key=value"),
        ("torch=", "must look like key=value"),
        ("=2.14", "is not key=value"),
        ("torch==2.14", "is not key=value"),
        ("stack=torch;rm", "is not key=value"),
        ("flavour=cuda", "unknown select key 'flavour'; keys: id, base"),
        ("stak=torch", "unknown select key 'stak'; did you mean 'stack'?"),
        (",".join(f"python=3.{n}" for n in range(MAX_TERMS + 1)), f"the select has more than {MAX_TERMS} terms"),
    ],
)
def test_a_bad_select_is_one_line(text: str, words: str, cli: RunCli, embedded_matrix_path: Path) -> None:
    with pytest.raises(UserError) as caught:
        parse_select(text)
    assert words in caught.value.message and "\n" not in caught.value.message
    result = cli("--matrix", str(embedded_matrix_path), "plan", "--select", text)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and words in result.stderr, result.stderr


def test_a_bad_query_is_one_line_naming_the_query() -> None:
    with pytest.raises(UserError) as caught:
        parse_query("torch=2.14 cuda")
    assert caught.value.message.startswith("query term 'cuda' is not key=value") and "torch=2.14 cuda=13" in caught.value.message


# -- exclude entries ------------------------------------------------------------------------------
def test_an_exclude_entry_takes_a_release_prefix(write_matrix: WriteMatrix, small_matrix: str) -> None:
    matrix = load_matrix(write_matrix(small_matrix + 'exclude:\n  - {torch: "2.5", python: "3"}\n'))
    plan = make_plan(matrix)
    assert plan.images == () and [s.reason.rsplit(":", 1)[1] for s in plan.skipped] == ["14"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from(["torch", "python", "base"]), st.sampled_from(["2", "2.14", "2.14.1", "2.1", "3", "a", "2.*"]))),
        max_size=10,
    ),
    st.fixed_dictionaries({"torch": st.sampled_from(["2.14.1", "2.1.0", "2.14"]), "python": st.sampled_from(["3.11", "3.1"])}),
)
def test_the_index_agrees_with_a_scan_on_release_prefixes(selectors: list[list[tuple[str, str]]], found: dict[str, str]) -> None:
    scan = next((i for i, s in enumerate(selectors) if matches(s, found)), None)
    assert SelectorIndex(selectors).first(found) == scan
