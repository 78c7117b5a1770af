"""The items of a run's durable stream: their kinds and the form a reader gets them in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "DELTA_KINDS",
    "EVENT",
    "MESSAGE",
    "PART_DELTA",
    "PART_END",
    "PART_START",
    "PAUSED",
    "RESULT",
    "TOOL_RESULT",
    "VOID",
    "StreamItem",
]

PART_START: Final = "part_start"
"""``{request, index, part_kind, tool_call_id?, tool_name?}``: a part of model request
``request``'s answer begins (live, unkeyed)."""
PART_DELTA: Final = "part_delta"
"""``{request, index, delta}``: more text (or tool-call arguments) of that part."""
PART_END: Final = "part_end"
"""``{request, index}``: that part is complete."""
VOID: Final = "void"
"""``{request}``: the deltas of ``request`` since its last ``void`` or ``message`` belong to
an attempt that died or failed; drop them (the request is asked again)."""
MESSAGE: Final = "message"
"""``{request, response}``: the final answer of ``request`` (a ``ModelResponse`` object);
it replaces whatever that request's deltas built."""
TOOL_RESULT: Final = "tool_result"
"""``{request, tool_call_id, tool_name, content, is_error}``: a tool call's result."""
PAUSED: Final = "paused"
"""``{request, calls}``: the run waits for decisions on ``calls`` (key
``paused:{request}:{round}``)."""
EVENT: Final = "event"
"""``{step_id, sequence, event}``: an application event sent with ``deliver_event``."""
RESULT: Final = "result"
"""``{status, output?, error?, reason?}``: the run's last item (``completed``, ``failed``, or
``cancelled`` with the cancel's reason, written by the store's cancel); a reader ends after
it."""

DELTA_KINDS: Final = frozenset({PART_START, PART_DELTA, PART_END, VOID})
"""The live kinds ``compact_run`` may drop once their request's ``message`` exists."""


@dataclass(frozen=True, slots=True)
class StreamItem:
    """One item of a run's stream: its offset (1, 2, 3 … per run), kind and payload."""

    offset: int
    kind: str
    payload: dict[str, Any]
