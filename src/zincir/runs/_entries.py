"""The log entries of a model response and a tool result, checked and encoded once.

``AgentContext.record_response`` / ``record_tool_result`` write them; the durable agent
loop hands the same entries to its runtime, which appends them with the operation record
they are made from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .._errors import DuplicateToolCall, InvalidInput
from .._json import MAX_NESTING, checked_size, depth_bound, dumps, encode_part, too_deep
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
    # Composed of each part's text, so every intent is encoded (and checked) once.
    intents = [dumps(call.to_json(), what="response", run_id=run_id) for call in calls]
    pieces = [
        '{"content":',
        dumps(content, what="response", run_id=run_id),
        ',"tool_calls":[',
        ",".join(intents),
        '],"stop_reason":',
        encode_part(stop_reason),
    ]
    if usage is not None:
        pieces += [',"usage":', dumps(dict(usage), what="response", run_id=run_id)]
    if model is not None:
        pieces += [',"model":', encode_part(model)]
    pieces.append("}")
    response = checked_size("".join(pieces), what="response", run_id=run_id)
    if response.count("[") + response.count("{") > MAX_NESTING:
        whole = {"content": content, "tool_calls": [call.to_json() for call in calls]}
        if usage is not None:
            whole["usage"] = dict(usage)
        if depth_bound(response, whole) > MAX_NESTING:
            raise too_deep("response", run_id)
    return ResponseEntry(
        response, tuple((call.id, intent) for call, intent in zip(calls, intents, strict=True))
    )


def tool_result_entry(
    run_id: str, call_id: str, result: Any, *, is_error: bool = False
) -> ToolResultEntry:
    """The ``tool_result`` entry of call ``call_id``."""
    check_id(call_id, "call_id", run_id=run_id)
    body = dumps(
        {"id": call_id, "result": result, "is_error": bool(is_error)},
        what=f"the result of tool call {call_id!r}",
        run_id=run_id,
        convert=True,
    )
    return ToolResultEntry(call_id, body)
