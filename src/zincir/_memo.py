"""A small process-local memo keyed by JSON text, bounded in entries and in characters.

Documents are pure functions of their text (strict parsing and validation are
deterministic), so a text this process encoded or decoded a moment ago maps to the same
value: the durable loop writes a request's input, hands it to an in-process handler and
reads the output back, and each of those steps can reuse the previous one's work.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from typing import Generic, TypeVar

__all__ = ["TextMemo"]

V = TypeVar("V")

_LONG = 1 << 16
"""Texts this long (a long conversation's request) are kept apart, found by identity or
compared whole, never hashed: hashing one costs a pass over it on every turn."""
_LONG_KEPT = 16
"""How many long texts a memo keeps at most (the latest, within half its characters)."""


class TextMemo(Generic[V]):
    """The most recent ``entries`` texts (at most ``chars`` characters in all) and a value
    for each, and apart the latest long texts (at most half as many characters again);
    thread-safe. Texts shorter than ``smallest`` are not kept (reworking them costs less
    than the lookup)."""

    def __init__(self, *, entries: int = 64, chars: int = 8 << 20, smallest: int = 0) -> None:
        self._values: OrderedDict[str, V] = OrderedDict()
        self._entries = entries
        self._chars = chars
        self._smallest = smallest
        self._held = 0
        self._long: deque[tuple[str, V]] = deque()
        self._long_held = 0
        self._lock = threading.Lock()

    def get(self, text: str) -> V | None:
        if len(text) < self._smallest:
            return None
        with self._lock:
            if len(text) >= _LONG:
                for kept, found in reversed(self._long):
                    if kept is text or (len(kept) == len(text) and kept == text):
                        return found
                return None
            value = self._values.get(text)
            if value is not None:
                self._values.move_to_end(text)
            return value

    def put(self, text: str, value: V) -> None:
        size = len(text)
        if size < self._smallest or size > self._chars // 4:
            return
        with self._lock:
            if size >= _LONG:  # not hashed: its reader holds this very text, or compares it
                if not any(kept is text for kept, _ in self._long):
                    self._long.append((text, value))
                    self._long_held += size
                while len(self._long) > _LONG_KEPT or (
                    len(self._long) > 1 and self._long_held > self._chars // 2
                ):
                    self._long_held -= len(self._long.popleft()[0])
                return
            if text in self._values:
                self._values.move_to_end(text)
                return
            self._values[text] = value
            self._held += size
            while len(self._values) > self._entries or self._held > self._chars:
                old, _ = self._values.popitem(last=False)
                self._held -= len(old)
