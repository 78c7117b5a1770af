"""``current_tool_call()``: which call a running tool serves, and the key its effects use."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["ToolCallInfo", "current_tool_call", "serving_call"]


@dataclass(frozen=True, slots=True)
class ToolCallInfo:
    """The tool call a tool function is running for.

    ``idempotency_key`` is the same every time this attempt of the call runs (after a crash
    too), and differs between calls: pass it to a service that deduplicates requests, so
    an effect cut off by a crash and made again happens once. ``run_id`` is None on the
    direct path (no durability), where the key is the model's call id.
    """

    run_id: str | None
    tool_call_id: str
    tool_name: str
    idempotency_key: str


_CALL: ContextVar[ToolCallInfo | None] = ContextVar("zincir_tool_call", default=None)


def current_tool_call() -> ToolCallInfo | None:
    """The call the running tool serves, or None outside a tool call of the agent loop."""
    return _CALL.get()


@contextmanager
def serving_call(info: ToolCallInfo) -> Iterator[None]:
    """Run a tool function with ``current_tool_call()`` set to ``info``."""
    token = _CALL.set(info)
    try:
        yield
    finally:
        _CALL.reset(token)
