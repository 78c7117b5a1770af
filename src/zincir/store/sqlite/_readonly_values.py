"""Values as the read-only view returns them: decoded JSON, bounded row limits."""

from __future__ import annotations

from typing import Any

from ..._json import StrictJsonError, loads_strict
from ..._validate import MAX_SEQUENCE

__all__ = ["decode_json", "row_limit"]


def decode_json(text: Any) -> Any:
    """Stored JSON text as a value; text that is not one strict JSON document stays text."""
    if not isinstance(text, str):
        return text
    try:
        return loads_strict(text)
    except StrictJsonError:
        return text


def row_limit(limit: int) -> int:
    """A row limit the driver can bind (at least 0, at most 2**63-1)."""
    return min(max(int(limit), 0), MAX_SEQUENCE)
