"""Expansion: base x platform x stack x python x versions, minus `exclude`, plus `include`.

A base with several `platforms:` expands once per platform (a copy of the base whose `platform`
is that one); an include adds its one combination for its `platform:` (linux/amd64 when absent)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from dataclasses import replace

from builder.model.plan import AMD64, Base, Combination, Matrix, Rule
from builder.spec.select import combination_fields
from builder.util.query import SelectorIndex, matches


def rule_matches(rule: Rule, combo: Combination) -> bool:
    return matches(rule.fields, combination_fields(combo))


def combination_count(matrix: Matrix) -> int:
    """How many combinations the expansion yields, without expanding."""
    versions = dict(matrix.frameworks)
    per_python = sum(functools.reduce(lambda n, m: n * len(versions[m]), members, 1) for _, members in matrix.stacks)
    return sum(len(base.platforms) for base in matrix.bases) * len(matrix.python) * per_python


def on_platforms(bases: tuple[Base, ...]) -> Iterator[Base]:
    """Each base once per platform it declares, in declaration order (linux/amd64 first)."""
    for base in bases:
        for platform in base.platforms:
            yield base if platform == base.platform else replace(base, platform=platform)


def expand(matrix: Matrix) -> Iterator[Combination]:
    """Every combination the matrix names, expansion first, in declaration order."""
    versions = dict(matrix.frameworks)
    for base, (stack, members), python in itertools.product(on_platforms(matrix.bases), matrix.stacks, matrix.python):
        for chosen in itertools.product(*(versions[m] for m in members)):
            yield Combination(base=base, stack=stack, python=python, frameworks=tuple(zip(members, chosen, strict=True)))


def included(matrix: Matrix) -> Iterator[Combination]:
    for rule in matrix.include:
        members = matrix.stack(rule.get("stack") or "")
        base = matrix.base(rule.get("base") or "")
        platform = rule.get("platform") or AMD64
        yield Combination(
            base=base if platform == base.platform else replace(base, platform=platform),
            stack=rule.get("stack") or "",
            python=rule.get("python") or "",
            frameworks=tuple((m, rule.get(m) or "") for m in members),
            origin="include",
            line=rule.line,
        )


class Excluder:
    """The first `exclude` entry matching a combination (indexed, see SelectorIndex)."""

    def __init__(self, matrix: Matrix) -> None:
        self.rules = matrix.exclude
        self.index = SelectorIndex([rule.fields for rule in self.rules])

    def __call__(self, combo: Combination) -> Rule | None:
        i = self.index.first(combination_fields(combo))
        return None if i is None else self.rules[i]


def excluded_by(matrix: Matrix, combo: Combination) -> Rule | None:
    """The first matching exclude entry by a plain scan (the reference the index is tested against)."""
    return next((rule for rule in matrix.exclude if rule_matches(rule, combo)), None)
