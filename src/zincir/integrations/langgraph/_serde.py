"""The savers' default serializer: plain JSON where a value is plain JSON, LangGraph's
msgpack for the rest, pickle never.

JSON first, so that a stored checkpoint of plain data reads as text in any SQLite tool;
msgpack (``JsonPlusSerializer`` without its pickle fallback) for what JSON would change:
messages, pydantic models, dataclasses, enums, datetimes, non-str keys. A value neither can
hold raises NotJsonSerializable instead of being pickled, and a stored pickle is refused
rather than loaded.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from ..._errors import InvalidInput, NotJsonSerializable, RecordFormatError

__all__ = ["ZincirSerializer", "is_pickle"]


_SCALARS = frozenset({str, int, bool, type(None)})
_isfinite = math.isfinite
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def is_pickle(type_tag: str) -> bool:
    """Whether a serializer's type tag names a pickle (also wrapped: ``pickle+aes``)."""
    return type_tag.partition("+")[0] == "pickle"


def _exactly_json(value: Any) -> bool:
    """Whether JSON reads ``value`` back as the same value: only dict (str keys), list,
    tuple (read back as a list, as msgpack does), str, int, finite float, bool and None,
    and none of their subclasses (an enum or a defaultdict would come back as its base).
    Too deep a value raises RecursionError."""
    kind = type(value)
    if kind is dict:
        for key, child in value.items():
            if type(key) is not str:
                return False
            of = type(child)
            if of is str or of is int or of is bool or child is None:
                continue
            if of is float:
                if _isfinite(child):
                    continue
                return False
            if not _exactly_json(child):
                return False
        return True
    if kind is list or kind is tuple:
        for child in value:
            of = type(child)
            if of is str or of is int or of is bool or child is None:
                continue
            if of is float:
                if _isfinite(child):
                    continue
                return False
            if not _exactly_json(child):
                return False
        return True
    if kind is float:
        return _isfinite(value)
    return kind in _SCALARS


def _json_bytes(value: Any) -> bytes | None:
    """``value`` as UTF-8 JSON if JSON holds it exactly, else None."""
    try:
        if not _exactly_json(value):
            return None
    except RecursionError:
        return None
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        pass  # an int beyond 64 bits, a lone surrogate, deep nesting: json's way below
    try:
        text = _ENCODER.encode(value)
    except (ValueError, TypeError, RecursionError):
        return None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: \u escapes keep it exactly
        return json.dumps(value, allow_nan=False, separators=(",", ":")).encode("ascii")


class ZincirSerializer(JsonPlusSerializer):
    """LangGraph's ``JsonPlusSerializer``, JSON first and without pickle.

    Takes JsonPlusSerializer's options (``allowed_msgpack_modules``,
    ``allowed_json_modules``) except ``pickle_fallback``, which is refused.
    """

    def __init__(self, **options: Any) -> None:
        if options.pop("pickle_fallback", False):
            raise InvalidInput(
                "zincir never pickles: ZincirSerializer refuses pickle_fallback=True; store "
                "JSON data, dataclasses or pydantic models instead"
            )
        super().__init__(pickle_fallback=False, **options)

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """(type tag, bytes): ``json`` for plain JSON, else LangGraph's msgpack."""
        if obj is None or isinstance(obj, bytes | bytearray):
            return super().dumps_typed(obj)
        text = _json_bytes(obj)
        if text is not None:
            return "json", text
        try:
            type_tag, data = super().dumps_typed(obj)
        except (TypeError, ValueError, RecursionError) as error:
            raise NotJsonSerializable(
                f"cannot serialize a value of type {type(obj).__name__} without pickle "
                f"({error}); zincir never pickles: store JSON data, a dataclass or a pydantic "
                "model, or a reference to the object"
            ) from None
        if is_pickle(type_tag):  # pragma: no cover - pickle_fallback is forced off
            raise NotJsonSerializable(f"refusing to store a pickled {type(obj).__name__}")
        return type_tag, data

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """The value of a stored (type tag, bytes); ``json`` is read as plain JSON."""
        type_tag, payload = data
        if type_tag == "json":
            return json.loads(payload)
        if is_pickle(type_tag):
            raise RecordFormatError(
                "a stored value is a pickle; zincir never unpickles (it could run any code)"
            )
        return super().loads_typed(data)
