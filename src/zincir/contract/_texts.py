"""A value per live object (the JSON text of a document), kept while the object lives.

Documents are immutable, so the text ``to_json`` made for one stays its text. A model
request repeats every earlier message of the conversation; with each message's text kept,
the request's text is composed from them instead of encoding the whole history again.
Entries are keyed by object identity and dropped when the document is collected.
"""

from __future__ import annotations

import weakref
from typing import Generic, TypeVar

__all__ = ["TextsByObject"]

T = TypeVar("T")
V = TypeVar("V")


class TextsByObject(Generic[T, V]):
    """A value by live object; an object that died takes its entry with it."""

    def __init__(self) -> None:
        self._values: dict[int, tuple[weakref.ref[T], V]] = {}

    def get(self, obj: T) -> V | None:
        entry = self._values.get(id(obj))
        if entry is None or entry[0]() is not obj:
            return None
        return entry[1]

    def put(self, obj: T, value: V) -> None:
        key = id(obj)
        values = self._values
        values[key] = (weakref.ref(obj, lambda ref: _forget(values, key, ref)), value)

    def __len__(self) -> int:
        return len(self._values)


def _forget(values: dict[int, tuple[weakref.ref[T], V]], key: int, ref: weakref.ref[T]) -> None:
    entry = values.get(key)
    if entry is not None and entry[0] is ref:
        del values[key]
