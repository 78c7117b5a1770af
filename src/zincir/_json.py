"""Strict JSON: one RFC 8259 document, no NaN/Infinity, no duplicate keys."""

from __future__ import annotations

import json
from typing import Any

from ._errors import NotJsonSerializable, PayloadTooLarge

__all__ = ["MAX_DOCUMENT_BYTES", "StrictJsonError", "dumps", "loads_strict", "loads_strict_text"]

MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
"""The largest JSON document zincir stores for a caller (a response, a result, a config)."""


class StrictJsonError(ValueError):
    """Text is not exactly one strict JSON document."""


def _reject_constant(name: str) -> Any:
    raise StrictJsonError(f"{name} is not valid JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise StrictJsonError(f"duplicate object key {key!r}")
        result[key] = value
    return result


def loads_strict(text: str) -> Any:
    """Parse exactly one JSON document; raise StrictJsonError on anything RFC 8259 forbids."""
    if not isinstance(text, str):
        raise StrictJsonError(f"expected JSON text, got {type(text).__name__}")
    try:
        return json.loads(
            text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant
        )
    except StrictJsonError:
        raise
    except (ValueError, RecursionError) as error:
        raise StrictJsonError(str(error)) from None


def loads_strict_text(text: object) -> Any:
    """Like :func:`loads_strict`, also taking UTF-8 bytes; anything else is a StrictJsonError."""
    if isinstance(text, bytes | bytearray | memoryview):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as error:
            raise StrictJsonError(f"not UTF-8 text: {error}") from None
    if not isinstance(text, str):
        raise StrictJsonError(f"expected JSON text (str or bytes), got {type(text).__name__}")
    return loads_strict(text)


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def dumps(value: Any, *, what: str = "value", run_id: str | None = None) -> str:
    """Compact JSON; a value JSON cannot hold raises NotJsonSerializable, one over
    MAX_DOCUMENT_BYTES raises PayloadTooLarge, both before any write."""
    try:
        text: str = _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError) as error:
        raise NotJsonSerializable(
            f"{what} must be JSON-serialisable (dict, list, str, int, float, bool, None): {error}",
            run_id=run_id,
        ) from None
    if len(text) > MAX_DOCUMENT_BYTES // 4:
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_DOCUMENT_BYTES:
            raise PayloadTooLarge(
                f"{what} is {size:,} bytes as JSON, over the {MAX_DOCUMENT_BYTES:,}-byte limit; "
                "store large data elsewhere and record a reference to it",
                run_id=run_id,
            )
    return text
