"""Expansion: base x stack x python x versions, minus `exclude`, plus `include`."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from builder.records import Combination, Matrix, Rule
from builder.spec.select import combination_fields, matches


def rule_matches(rule: Rule, combo: Combination) -> bool:
    return matches(rule.fields, combination_fields(combo))


def expand(matrix: Matrix) -> Iterator[Combination]:
    """Every combination the matrix names, expansion first, in declaration order."""
    versions = dict(matrix.frameworks)
    for base, (stack, members), python in itertools.product(matrix.bases, matrix.stacks, matrix.python):
        for chosen in itertools.product(*(versions[m] for m in members)):
            yield Combination(base=base, stack=stack, python=python, frameworks=tuple(zip(members, chosen, strict=True)))


def included(matrix: Matrix) -> Iterator[Combination]:
    for rule in matrix.include:
        members = matrix.stack(rule.get("stack") or "")
        yield Combination(
            base=matrix.base(rule.get("base") or ""),
            stack=rule.get("stack") or "",
            python=rule.get("python") or "",
            frameworks=tuple((m, rule.get(m) or "") for m in members),
            origin="include",
            line=rule.line,
        )


def excluded_by(matrix: Matrix, combo: Combination) -> Rule | None:
    return next((rule for rule in matrix.exclude if rule_matches(rule, combo)), None)
