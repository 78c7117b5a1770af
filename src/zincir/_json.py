"""Strict JSON: one RFC 8259 document, no NaN/Infinity, no duplicate keys.

A value a caller hands back (a tool's or a step's result, a run's result, a tool result
recorded by hand, a restart payload) is stored in its JSON form: JSON data as it is, any
other value pydantic can serialise (``datetime``, ``set``, models, dataclasses, enums,
``UUID``, ``Decimal``) converted by ``pydantic_core.to_jsonable_python``, anything else
refused with NotJsonSerializable naming its type (:func:`json_form`, ``dumps(convert=True)``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from pydantic_core import PydanticSerializationError, to_jsonable_python

from ._errors import NotJsonSerializable, PayloadTooLarge
from ._memo import TextMemo

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_NESTING",
    "StrictJsonError",
    "checked_size",
    "depth_bound",
    "dumps",
    "encode_checked",
    "encode_part",
    "json_form",
    "known_strict",
    "loads_own",
    "loads_strict",
    "loads_strict_text",
    "remember_strict",
    "too_deep",
]

MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
"""The largest JSON document zincir stores for a caller (a response, a result, a config)."""

MAX_NESTING = 256
"""The deepest nesting of arrays and objects zincir writes (and so can always read back)."""


class StrictJsonError(ValueError):
    """Text is not exactly one strict JSON document."""


def _reject_constant(name: str) -> Any:
    raise StrictJsonError(f"{name} is not valid JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise StrictJsonError(f"duplicate object key {key!r}")
            seen.add(key)
    return result


_PLAIN_DECODER = json.JSONDecoder()
_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)


def loads_strict(text: str) -> Any:
    """Parse exactly one JSON document; raise StrictJsonError on anything RFC 8259 forbids."""
    if not isinstance(text, str):
        raise StrictJsonError(f"expected JSON text, got {type(text).__name__}")
    try:
        return _DECODER.decode(text)
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
_encode_str: Callable[[str], str] = json.encoder.encode_basestring  # what _ENCODER uses
_CONTAINERS = (dict, list, tuple)


def _key_problem(value: Any) -> str | None:
    """A non-str object key anywhere in ``value`` (``{1: "a", "1": "b"}`` would encode one
    key twice, and no key would read back as the int it was)."""
    stack: list[Any] | None = None
    item = value
    while True:
        children = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in children:
            if not isinstance(key, str) and isinstance(item, dict):
                return (
                    f"object keys must be str (JSON has no other keys), "
                    f"not {type(key).__name__} {key!r}"
                )
            if child and isinstance(child, _CONTAINERS):
                if stack is None:
                    stack = [child]
                else:
                    stack.append(child)
        if not stack:
            return None
        item = stack.pop()


def _depth(value: Any) -> int:
    """The deepest nesting of arrays and objects in ``value``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        children = item.values() if isinstance(item, dict) else item
        stack.extend(
            (child, depth + 1) for child in children if isinstance(child, _CONTAINERS) and child
        )
    return deepest


def loads_own(text: str) -> Any:
    """The value of JSON text :func:`dumps` has just produced (it holds no duplicate key)."""
    return _PLAIN_DECODER.decode(text)


def encode_part(value: Any) -> str:
    """What :func:`encode_checked` gives for ``value``, a scalar's text made without the
    encoder's set-up (a document's field, encoded on its own)."""
    kind = type(value)
    if kind is str:
        return _encode_str(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    return encode_checked(value)


def encode_checked(value: Any) -> str:
    """Compact JSON of a value zincir built itself from parts already checked (validated ids,
    numbers, documents that went through :func:`dumps`): the same text, without the walk."""
    text: str = _ENCODER.encode(value)
    return text


_ENCODED: TextMemo[bool] = TextMemo(chars=32 << 20)
"""Texts :func:`dumps` produced lately; room for a long conversation's request (8 M
characters each at most), which is then not parsed again to be known strict."""


def known_strict(text: str) -> bool:
    """Whether :func:`dumps` produced ``text`` a moment ago (so it is strict JSON)."""
    return _ENCODED.get(text) is not None


def dumps(
    value: Any,
    *,
    what: str = "value",
    run_id: str | None = None,
    str_keys: bool = False,
    remember: bool = False,
    convert: bool = False,
) -> str:
    """Compact JSON that :func:`loads_strict` reads back as the same value.

    A value JSON cannot hold (a non-str key, a lone surrogate, NaN, too deep a nesting)
    raises NotJsonSerializable and one over MAX_DOCUMENT_BYTES raises PayloadTooLarge,
    both before any write. ``str_keys`` says every object key is already known to be a
    str (a validated document), which skips that walk. ``remember`` keeps the text for
    :func:`known_strict` (a document an invocation or a record is about to check).
    ``convert`` stores a user's value in its JSON form (:func:`json_form`): the text is
    that of the converted value.
    """
    problem: str | None = None
    try:
        text: str = _ENCODER.encode(value)
    except TypeError as error:
        if not convert:
            problem = str(error) or type(error).__name__
        else:
            value = _converted(value, what, run_id)
            try:
                text = _ENCODER.encode(value)
            except (TypeError, ValueError, RecursionError) as again:
                problem = str(again) or type(again).__name__
    except (ValueError, RecursionError) as error:
        problem = str(error) or type(error).__name__
    if problem is None and isinstance(value, _CONTAINERS) and value:
        if not str_keys:
            problem = _key_problem(value)  # acyclic: the encoder refuses cycles
        if (
            problem is None
            and len(text) > 2 * MAX_NESTING
            and text.count("[") + text.count("{") > MAX_NESTING
            and _depth(value) > MAX_NESTING
        ):
            problem = f"it is nested deeper than {MAX_NESTING} arrays or objects"
    if problem is not None:
        raise _not_serializable(what, problem, run_id)
    checked_size(text, what=what, run_id=run_id)
    if remember:
        remember_strict(text)
    return text


def _converted(value: Any, what: str, run_id: str | None) -> Any:
    """``value`` converted to JSON data by pydantic; NotJsonSerializable naming the type of
    what it cannot convert."""
    try:
        converted = to_jsonable_python(value)
    except (PydanticSerializationError, ValueError, RecursionError) as error:
        named = re.search(r"<class '([^']+)'>", str(error))
        kind = named.group(1) if named else f"{type(value).__qualname__} ({error})"
        raise NotJsonSerializable(
            f"{what} holds a {kind}, which is neither JSON data nor a value pydantic can "
            "serialise (datetime, set, a pydantic model, a dataclass, an enum...); return "
            "one of those, or convert it to one",
            run_id=run_id,
        ) from None
    problem = _key_problem(value) if isinstance(value, _CONTAINERS) and value else None
    if problem is not None:
        raise _not_serializable(what, problem, run_id)
    return converted


def json_form(value: Any, *, what: str = "value", run_id: str | None = None) -> Any:
    """``value`` as JSON data, the form zincir stores and every replay returns: JSON data
    unchanged, any other value pydantic serialises converted (``datetime`` to ISO 8601 text,
    ``set`` to a list, a model or dataclass to an object); NotJsonSerializable otherwise."""
    try:
        _ENCODER.encode(value)
    except TypeError:
        return _converted(value, what, run_id)
    except (ValueError, RecursionError) as error:
        raise _not_serializable(what, str(error) or type(error).__name__, run_id) from None
    problem = _key_problem(value) if isinstance(value, _CONTAINERS) and value else None
    if problem is not None:
        raise _not_serializable(what, problem, run_id)
    return value


def depth_bound(text: str, value: Any) -> int:
    """At least the nesting depth of ``value``, encoded as ``text``: the count of its
    brackets, or the depth itself where that count passes MAX_NESTING."""
    brackets = text.count("[") + text.count("{")
    if brackets <= MAX_NESTING or not isinstance(value, _CONTAINERS):
        return brackets
    return _depth(value)


def too_deep(what: str, run_id: str | None = None) -> NotJsonSerializable:
    return _not_serializable(
        what, f"it is nested deeper than {MAX_NESTING} arrays or objects", run_id
    )


def checked_size(text: str, *, what: str = "value", run_id: str | None = None) -> str:
    """``text`` (JSON just encoded, or composed of such texts), refused if it holds a lone
    surrogate (NotJsonSerializable) or is over MAX_DOCUMENT_BYTES (PayloadTooLarge)."""
    try:
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise _not_serializable(
            what, "it holds a lone surrogate, which is not valid Unicode text", run_id
        ) from None
    if size > MAX_DOCUMENT_BYTES:
        raise PayloadTooLarge(
            f"{what} is {size:,} bytes as JSON, over the {MAX_DOCUMENT_BYTES:,}-byte limit; "
            "store large data elsewhere and record a reference to it",
            run_id=run_id,
        )
    return text


def remember_strict(text: str) -> None:
    """Keep ``text``, strict JSON this process just wrote, for :func:`known_strict`."""
    _ENCODED.put(text, True)


def _not_serializable(what: str, problem: str, run_id: str | None) -> NotJsonSerializable:
    return NotJsonSerializable(
        f"{what} must be JSON-serialisable (dict with str keys, list, str, int, float, "
        f"bool, None): {problem}",
        run_id=run_id,
    )
