"""Metadata filters of LangGraph checkpoint listings, as every backend reads them.

A filter pair matches by JSON type and value: 1 matches 1.0, not true or "1"; a None value
matches null or a missing key, as in LangGraph's savers; a container matches the same JSON
text. Each backend turns a pair's :func:`filter_kind` into its own SQL.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from .._errors import InvalidInput

__all__ = ["FilterKind", "container_text", "filter_kind"]

FilterKind = Literal["null", "boolean", "number", "text", "container"]


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
