"""Reading a parsed JSON document into typed records: each accessor checks one value's type and
refuses anything else with the caller's one-line error (which names the file and says how to fix).

Why one place: the smoke result, the probe's report and build.json are all read back from files a
user can edit; each reader used to re-check types its own way (or not at all). `Any` stops here:
what these return is plain typed data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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


# One declarative reader for an object: each key's accessor in a table, so a record's `from_json` is
# that table plus what ties its fields together, instead of a chain of ifs per key.
Reader = Callable[[Any, str, Fail], Any]  # (value, key, fail) -> the typed value, or fail(...) raised
REQUIRED: Any = object()  # a Field's default when the key must be there


@dataclass(frozen=True)
class Field:
    """One key of a JSON object: how its value is read and checked, and what an absent key stands for."""

    key: str
    read: Reader
    default: Any = REQUIRED
    attr: str = ""  # the record's field name, when it is not the key ("from" -> "from_ref")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def missing(data: dict[str, Any], fields: Sequence[Field]) -> list[str]:
    """The required keys `data` lacks, in table order."""
    return [f.key for f in fields if f.required and f.key not in data]


def unknown(data: dict[str, Any], fields: Sequence[Field]) -> list[str]:
    """The keys of `data` no field reads, sorted."""
    known = {f.key for f in fields}
    return sorted(str(k) for k in data if k not in known)


def read_fields(data: dict[str, Any], fields: Sequence[Field], fail: Fail, prefix: str = "") -> dict[str, Any]:
    """Each field read in table order (the first bad one refuses), keyed by the record's field name;
    an absent optional key is its default. `prefix` names a nested object's keys ("base.")."""
    return {
        (f.attr or f.key): (f.read(data[f.key], prefix + f.key, fail) if f.key in data else f.default)
        for f in fields
        if f.key in data or not f.required
    }


def clip(value: Any, limit: int = 60) -> str:
    """A value a refusal may quote, cut to `limit` characters."""
    shown = str(value)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def checked(ok: Callable[[Any], bool], want: str) -> Reader:
    """A reader that takes the value as it is when `ok` holds, else refuses: "'key' must be <want>; got <value>"."""

    def read(value: Any, key: str, fail: Fail) -> Any:
        if not ok(value):
            raise fail(f"{key!r} must be {want}; got {clip(repr(value))}")
        return value

    return read


def one_of(choices: tuple[str, ...]) -> Reader:
    """A reader that takes one of `choices` as it is: "'key' must be one of a, b; got <value>"."""
    return checked(lambda value: value in choices, f"one of {', '.join(choices)}")


def optional(read: Reader) -> Reader:
    """`read`, or None for a JSON null."""
    return lambda value, key, fail: None if value is None else read(value, key, fail)


def listed(read: Reader) -> Reader:
    """`read` then a tuple (a JSON list kept as a record's tuple)."""
    return lambda value, key, fail: tuple(read(value, key, fail))


def nested(fields: Sequence[Field], make: Callable[..., Any], closed: bool = True) -> Reader:
    """An object read by its own table into `make(**fields)`, refusing keys the table does not know
    (`closed`; an open one ignores them: a newer writer's keys still read); a required key it lacks
    is read as null, so its refusal names it ("'base.name' must be text")."""

    def read(value: Any, key: str, fail: Fail) -> Any:
        found = obj(value, key, fail)
        extra = unknown(found, fields) if closed else []
        if extra:
            raise fail(f"{key!r} has unknown keys {', '.join(clip(k) for k in extra[:5])}")
        absent = dict.fromkeys(missing(found, fields))
        return make(**read_fields({**absent, **found}, fields, fail, f"{key}."))

    return read


def each(read: Reader) -> Reader:
    """A list of objects, each read by `read` (a `nested` table) under the list's key, as a tuple."""
    return lambda value, key, fail: tuple(read(item, key, fail) for item in objs(value, key, fail))


def text_map(value: Any, key: str, fail: Fail) -> dict[str, str]:
    """An object of text values."""
    return {str(k): text(v, f"{key}.{k}", fail) for k, v in obj(value, key, fail).items()}


def optional_text_map(value: Any, key: str, fail: Fail) -> dict[str, str | None]:
    """An object of text or null values."""
    return {str(k): optional_text(v, f"{key}.{k}", fail) for k, v in obj(value, key, fail).items()}
