"""Reading a parsed JSON document into typed records: each accessor checks one value's type and
refuses anything else with the caller's one-line error (which names the file and says how to fix).

Why one place: the smoke result, the probe's report and build.json are all read back from files a
user can edit; each reader used to re-check types its own way (or not at all). `Any` stops here:
what these return is plain typed data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

Fail = Callable[[str], Exception]  # what is wrong -> the reader's one-line refusal (naming its file)
# one value of a free-form fact table (a framework's build): a JSON scalar, a list of text, or
# name -> version (jax's plugins)
Fact = str | int | float | bool | None | tuple[str, ...] | dict[str, str]


def obj(value: Any, key: str, fail: Fail) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise fail(f"{key!r} must be an object")
    return value


def objs(value: Any, key: str, fail: Fail) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise fail(f"{key!r} must be a list of objects")
    return value


def text(value: Any, key: str, fail: Fail) -> str:
    if not isinstance(value, str):
        raise fail(f"{key!r} must be text")
    return value


def texts(value: Any, key: str, fail: Fail) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise fail(f"{key!r} must be a list of text")
    return tuple(value)


def optional_text(value: Any, key: str, fail: Fail) -> str | None:
    return None if value is None else text(value, key, fail)


def scalar_text(value: Any, key: str, fail: Fail) -> str | None:
    """Text, or a number written as text (a library's version may come as either), or None."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise fail(f"{key!r} must be text or null")


def flag(value: Any, key: str, fail: Fail) -> bool:
    if not isinstance(value, bool):
        raise fail(f"{key!r} must be true or false")
    return value


def whole(value: Any, key: str, fail: Fail) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(f"{key!r} must be a whole number")
    return value


def number(value: Any, key: str, fail: Fail) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise fail(f"{key!r} must be a number")
    return float(value)


def optional_number(value: Any, key: str, fail: Fail) -> float | None:
    return None if value is None else number(value, key, fail)


def fact(value: Any, key: str, fail: Fail) -> Fact:
    """One value of a fact table: a JSON scalar, a list of text, or an object of text."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict):
        return {str(k): text(v, f"{key}.{k}", fail) for k, v in value.items()}
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise fail(f"{key!r} must be text, a number, true/false, null, a list of text or an object of text")
    return tuple(value)


def facts(value: Any, key: str, fail: Fail) -> dict[str, Fact]:
    return {str(k): fact(v, f"{key}.{k}", fail) for k, v in obj(value, key, fail).items()}
