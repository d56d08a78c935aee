"""Compatibility decisions: data in (base, python, version, table), verdict with a reason out."""

from __future__ import annotations

from collections.abc import Callable

from builder.compat import Compat
from builder.records import Base, Verdict
from builder.rules.cupy import decide_cupy
from builder.rules.jax import decide_jax
from builder.rules.numba import decide_numba
from builder.rules.tensorflow import decide_tensorflow
from builder.rules.torch import decide_torch

Rule = Callable[[Base, str, str, Compat], Verdict]

RULES: dict[str, Rule] = {
    "torch": decide_torch,
    "tensorflow": decide_tensorflow,
    "jax": decide_jax,
    "cupy": decide_cupy,
    "numba": decide_numba,
}


def decide(framework: str, base: Base, python: str, version: str, compat: Compat) -> Verdict:
    return RULES[framework](base, python, version, compat)
