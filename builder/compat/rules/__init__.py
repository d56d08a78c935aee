"""Compatibility decisions: data in (base, python, version, table), a verdict with a reason out.

One module per framework (named as in builder.frameworks), each holding its facts, their loader
and its decision; plus the shared ones: python (interpreters), cuda (drivers), numpy (the pin).
"""

from __future__ import annotations

import importlib
from typing import Protocol, cast

from builder.compat.facts import Compat
from builder.compat.tables import Table
from builder.records import Base, Verdict
from builder.yamlsrc import LDict


class RuleModule(Protocol):
    """What builder/compat/rules/<framework>.py provides."""

    SECTION_KEYS: tuple[str, ...]

    def load(self, table: Table, section: LDict) -> object: ...

    def decide(self, base: Base, python: str, version: str, compat: Compat) -> Verdict: ...


def rule_module(framework: str) -> RuleModule:
    return cast(RuleModule, importlib.import_module(f"{__name__}.{framework}"))


def decide(framework: str, base: Base, python: str, version: str, compat: Compat) -> Verdict:
    return rule_module(framework).decide(base, python, version, compat)
