"""Metadata filters of LangGraph checkpoint listings, as every backend reads them.

A filter pair matches by JSON type and value: 1 matches 1.0, not true or "1"; a None value
matches null or a missing key, as in LangGraph's savers; a container matches the same JSON
text. :func:`metadata_where` says it in SQL (the ``{json_...}`` fragments); metadata
PostgreSQL's JSON parser refuses (a ``\\u0000``, a lone surrogate) is matched by
:func:`matches` instead, the same rules in Python.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any, Final, Literal

from .._errors import InvalidInput
from .._validate import printable, utf8

__all__ = ["FilterKind", "container_text", "filter_kind", "matches", "metadata_where", "unparsed"]

FilterKind = Literal["null", "boolean", "number", "text", "container"]

_UNPARSED: Final = re.compile(r"\\u(0000|[dD][89a-fA-F])")
"""The escapes ``{json_unparsed}`` finds (over-matching is harmless: :func:`matches` is
exact)."""


def filter_kind(key: str, value: Any) -> FilterKind:
    """The JSON type the filter pair (``key``, ``value``) matches by; InvalidInput for a
    value JSON cannot hold."""
    if value is None:
        return "null"
    if value is True or value is False:  # before numbers: a bool is an int
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, dict | list | tuple):
        return "container"
    raise InvalidInput(
        f"metadata filter {key!r}: a JSON value is needed, not {type(value).__name__}"
    )


def container_text(value: Any) -> str:
    """A container filter value as the JSON text stored metadata is compared with (keys
    sorted, compact)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _pair(key: str, value: Any) -> tuple[str, list[Any]]:
    """One pair's test of column ``metadata`` (a statement's text) and its parameters. A
    NUL in the key or a text value is left to :func:`matches`: only metadata holding a
    ``\\u0000`` can match, and ``{json_unparsed}`` sends those rows there."""
    kind = filter_kind(key, value)
    text = value if kind == "text" else container_text(value) if kind == "container" else ""
    if utf8(key) is None or utf8(text) is None:
        raise InvalidInput(
            f"metadata filter {printable(key)!r}: a value cannot be stored: it holds a lone "
            "surrogate; filter by valid UTF-8 text"
        )
    if kind == "null":
        return ("true", []) if "\x00" in key else ("{json_null:metadata}", [key])
    if "\x00" in key or "\x00" in text:
        return "false", []
    if kind == "boolean":
        return "{json_bool:metadata}", [key, "true" if value else "false"]
    if kind == "number":
        if not math.isfinite(value):
            return "false", []  # JSON holds no NaN or infinity
        return "{json_number:metadata}", [key, value]
    if kind == "text":
        return "{json_text:metadata}", [key, value]
    return "{json_container:metadata}", [key, text]


def metadata_where(pairs: Sequence[tuple[str, Any]]) -> tuple[str, list[Any]]:
    """The test of column ``metadata`` that every pair matches (a statement's text, with
    fragments) and its parameters; InvalidInput (before anything is read) for a value JSON
    or the store cannot hold. Rows it lets through unjudged are those :func:`unparsed` finds."""
    tests: list[str] = []
    params: list[Any] = []
    for key, value in pairs:
        test, more = _pair(key, value)
        tests.append(test)
        params.extend(more)
    return (
        f"(CASE WHEN {{json_unparsed:metadata}} THEN true ELSE {' AND '.join(tests)} END)",
        params,
    )


def unparsed(metadata: str) -> bool:
    """Whether :func:`metadata_where` may have let ``metadata`` through unjudged."""
    return _UNPARSED.search(metadata) is not None


def matches(metadata: str, pairs: Sequence[tuple[str, Any]]) -> bool:
    """Whether the stored ``metadata`` matches every pair, judged in Python."""
    try:
        stored = json.loads(metadata)
    except ValueError:
        return False
    for key, value in pairs:
        present = isinstance(stored, dict) and key in stored
        found = stored[key] if present else None
        kind = filter_kind(key, value)
        if kind == "null":
            ok = found is None
        elif kind == "boolean":
            ok = found is value
        elif kind == "number":
            ok = isinstance(found, int | float) and not isinstance(found, bool) and found == value
        elif kind == "text":
            ok = isinstance(found, str) and found == value
        else:
            ok = isinstance(found, dict | list) and json.dumps(
                found, ensure_ascii=False, separators=(",", ":")
            ) == container_text(value)
        if not ok:
            return False
    return True
