"""The log entries of a model response and a tool result, checked and encoded once.

``AgentContext.record_response`` / ``record_tool_result`` write them; the durable agent
loop hands the same entries to its runtime, which appends them with the operation record
they are made from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .._errors import DuplicateToolCall, InvalidInput
from .._json import dumps
from .._validate import check_id
from ..store import ResponseEntry, ToolResultEntry
from ._types import ToolCall

__all__ = ["response_entry", "tool_result_entry"]


def response_entry(
    run_id: str,
    content: Any,
    tool_calls: Iterable[ToolCall | Mapping[str, Any]] = (),
    stop_reason: str | None = None,
    *,
    usage: Mapping[str, Any] | None = None,
    model: str | None = None,
) -> ResponseEntry:
    """The ``llm_call`` entry of a response and its tool intents; InvalidInput or
    DuplicateToolCall (a call id twice in the response) for bad input."""
    if isinstance(tool_calls, str | bytes | Mapping) or not isinstance(tool_calls, Iterable):
        raise InvalidInput("tool_calls must be a list of ToolCall (or mappings)", run_id=run_id)
    calls = [ToolCall.coerce(call, run_id=run_id) for call in tool_calls]
    seen: set[str] = set()
    for call in calls:
        if call.id in seen:
            raise DuplicateToolCall(
                f"tool call id {call.id!r} appears twice in one response", run_id=run_id
            )
        seen.add(call.id)
    if stop_reason is not None and not isinstance(stop_reason, str):
        raise InvalidInput("stop_reason must be a str or None", run_id=run_id)
    if usage is not None and not isinstance(usage, Mapping):
        raise InvalidInput("usage must be a mapping of counters", run_id=run_id)
    if model is not None:
        check_id(model, "model", run_id=run_id)
    intents = [call.to_json() for call in calls]
    payload: dict[str, Any] = {
        "content": content,
        "tool_calls": intents,
        "stop_reason": stop_reason,
    }
    if usage is not None:
        payload["usage"] = dict(usage)
    if model is not None:
        payload["model"] = model
    response = dumps(payload, what="response", run_id=run_id)
    return ResponseEntry(
        response,
        tuple(
            (call.id, dumps(intent, what="tool arguments", run_id=run_id))
            for call, intent in zip(calls, intents, strict=True)
        ),
    )


def tool_result_entry(
    run_id: str, call_id: str, result: Any, *, is_error: bool = False
) -> ToolResultEntry:
    """The ``tool_result`` entry of call ``call_id``."""
    check_id(call_id, "call_id", run_id=run_id)
    body = dumps(
        {"id": call_id, "result": result, "is_error": bool(is_error)},
        what="tool result",
        run_id=run_id,
    )
    return ToolResultEntry(call_id, body)
