"""A hint that a task's writes run alongside its siblings', so that they share commits."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["grouped_writes", "writes_grouped"]

_GROUPED: ContextVar[bool] = ContextVar("zincir_grouped_writes", default=False)


@contextmanager
def grouped_writes() -> Iterator[None]:
    """Writes made in this block (and in tasks it starts) join the writes their sibling
    tasks make in the same pass of the event loop, in one commit.

    For a fan-out of concurrent operations (an agent's parallel tool calls); a lone task's
    sequence of writes commits faster without it.
    """
    token = _GROUPED.set(True)
    try:
        yield
    finally:
        _GROUPED.reset(token)


def writes_grouped() -> bool:
    """Whether the current task's writes should wait to share a commit."""
    return _GROUPED.get()
