"""Operations named in the user's terms: "model request 3", "tool call 'lookup' (call id
'c1') of model request 2", never a step id and a sequence.

Model requests are counted from 1 here (their sequences count from 0).
"""

from __future__ import annotations

from ..contract import Invocation, OperationKind
from ..contract.payloads import (
    ApprovalRequest,
    McpRequest,
    ModelRequest,
    RetryDelay,
    TextPart,
    ToolRequest,
)
from ._identity import ATTEMPT_STRIDE, MAX_CALLS_PER_RESPONSE, MAX_RETRIES

__all__ = ["describe_operation", "drift_reason", "failure_advice"]

_SHOWN = 60  # characters of a prompt shown in an error


def describe_operation(invocation: Invocation) -> str:
    """What ``invocation`` is, in the words of the run's conversation."""
    base = invocation.sequence % ATTEMPT_STRIDE
    kind = OperationKind(invocation.kind)
    text = invocation.input_json
    try:
        if kind in (OperationKind.MODEL_REQUEST, OperationKind.MODEL_STREAM):
            return f"model request {base + 1}"
        request = f"model request {base // MAX_CALLS_PER_RESPONSE + 1}"
        if kind is OperationKind.TOOL_CALL:
            call = ToolRequest.from_json(text).call
            return f"tool call {call.tool_name!r} (call id {call.tool_call_id!r}) of {request}"
        if kind is OperationKind.APPROVAL_RESUME:
            call = ApprovalRequest.from_json(text).call
            return (
                f"the decision on tool call {call.tool_name!r} (call id {call.tool_call_id!r}) "
                f"of {request}"
            )
        if kind is OperationKind.MCP_REQUEST:
            name = McpRequest.from_json(text).params.get("name")
            return f"MCP tool call {name!r} of {request}"
        if kind is OperationKind.RETRY_DELAY:
            delay = RetryDelay.from_json(text)
            call_id = delay.provider_metadata.get("tool_call_id")
            if call_id is not None:
                tool = delay.provider_metadata.get("tool_name")
                return (
                    f"the wait before retry {delay.retry} of tool call {tool!r} "
                    f"(call id {call_id!r}) of {request}"
                )
            return f"the wait before retry {delay.retry} of model request {base // MAX_RETRIES + 1}"
    except Exception:  # a record from other code: name it as it is stored
        pass
    return f"operation {invocation.step_id} #{invocation.sequence}"


def failure_advice(invocation: Invocation, error: str, retryable: bool) -> str:
    """What a user can do about a recorded failure of ``invocation``."""
    kind = OperationKind(invocation.kind)
    if kind in (OperationKind.MODEL_REQUEST, OperationKind.MODEL_STREAM):
        if retryable:
            return (
                "the provider was still failing when the agent's retry policy ran out "
                "(Agent(retry=RetryPolicy(...)) sets how long it waits); once the provider "
                "answers again, start a new run"
            )
        return (
            "check the model name, the credentials and the base URL of the model's client, "
            "then start a new run"
        )
    if kind in (OperationKind.TOOL_CALL, OperationKind.MCP_REQUEST):
        if error in ("ToolFailed", "RetryTool") or retryable:
            return (
                "fix the tool, or let the model read its errors (tool_errors='report', the "
                "default), then start a new run"
            )
        return "fix the tool's handler, then start a new run"
    return "fix the cause, then start a new run"


def drift_reason(kind: OperationKind, recorded: str | None, arrived: str) -> str:
    """What differs between the recorded input of an operation and the one that arrived,
    as far as its documents say."""
    if recorded is None:
        return "its input differs from the one recorded"
    try:
        if kind in (OperationKind.MODEL_REQUEST, OperationKind.MODEL_STREAM):
            return _request_drift(ModelRequest.from_json(recorded), ModelRequest.from_json(arrived))
        if kind is OperationKind.TOOL_CALL:
            old, new = ToolRequest.from_json(recorded), ToolRequest.from_json(arrived)
            if old.call.tool_name != new.call.tool_name or old.arguments != new.arguments:
                return "the call's arguments differ from the recorded ones"
            if old.approval != new.approval:
                return "the call's approval differs from the recorded one"
    except Exception:  # a record from other code: say no more than that it differs
        pass
    return "its input differs from the one recorded"


def _request_drift(old: ModelRequest, new: ModelRequest) -> str:
    def texts(request: ModelRequest, role: str) -> list[str]:
        return [
            part.text
            for message in request.messages
            if message.role == role
            for part in message.parts
            if isinstance(part, TextPart)
        ]

    if texts(old, "user")[:1] != texts(new, "user")[:1]:
        started = (texts(old, "user") or [""])[0]
        shown = started if len(started) <= _SHOWN else started[: _SHOWN - 1] + "…"
        return f"the run was started with a different prompt ({shown!r})"
    if texts(old, "system") != texts(new, "system"):
        return "the agent's instructions differ from the ones the run was started with"
    if old.tools != new.tools:
        before = {tool.name: tool for tool in old.tools}
        after = {tool.name: tool for tool in new.tools}
        changes = [f"{name!r} added" for name in sorted(after.keys() - before.keys())]
        changes += [f"{name!r} removed" for name in sorted(before.keys() - after.keys())]
        changes += [
            f"{name!r} changed"
            for name in sorted(before.keys() & after.keys())
            if before[name] != after[name]
        ]
        return "the tools on offer differ (" + ", ".join(changes or ["reordered"]) + ")"
    if (old.model, old.settings, old.metadata) != (new.model, new.settings, new.metadata):
        return "the model or its settings differ"
    for index, (was, now) in enumerate(zip(old.messages, new.messages, strict=False)):
        if was != now:
            return (
                f"the conversation differs from message {index + 1} on (a {now.role} "
                "message: the loop's code, or what a tool returned, changed)"
            )
    return "the conversation has a different length than the recorded one"
