"""How a pydantic-ai durable operation becomes a zincir invocation: its kind, its step and a
stable projection of its parameters as ``input_json`` (never the raw messages, whose
request-side timestamps differ on every replay)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Final

from pydantic_ai.durable_exec import (
    CapabilityOperationId,
    DurableOperationId,
    DynamicToolsetCallToolParams,
    EventStreamHandlerId,
    EventStreamHandlerParams,
    ModelCancelSuspendedResponseId,
    ModelCompactMessagesId,
    ModelRequestId,
    ModelRequestParams,
    ToolsetCallToolId,
    ToolsetCallToolParams,
    ToolsetGetInstructionsId,
    ToolsetGetToolsId,
    ToolsetValidateToolArgumentsId,
)
from pydantic_ai.messages import ModelMessage
from pydantic_core import to_jsonable_python

from ..._errors import InvalidInput
from ...contract import OperationKind

__all__ = [
    "MAX_STEP_BYTES",
    "canonical",
    "classify",
    "event_call_id",
    "handler_id",
    "messages_digest",
    "project",
    "step_id",
]

MAX_STEP_BYTES: Final = 256

_BY_ROLE: Final = {
    "model": OperationKind.MODEL_REQUEST,
    "event": OperationKind.EVENT_DELIVERY,
}


def classify(operation_id: DurableOperationId, role: str) -> tuple[OperationKind, str]:
    """The (kind, step) of an operation; an id this version does not know falls back by role."""
    match operation_id:
        case ModelRequestId(streaming=True):
            return OperationKind.MODEL_STREAM, "model.stream"
        case ModelRequestId():
            return OperationKind.MODEL_REQUEST, "model.request"
        case ModelCompactMessagesId():
            return OperationKind.MODEL_REQUEST, "model.compact"
        case ModelCancelSuspendedResponseId():
            return OperationKind.MODEL_REQUEST, "model.cancel"
        case ToolsetCallToolId(toolset_kind="mcp"):
            return OperationKind.MCP_REQUEST, "mcp.request"
        case ToolsetCallToolId():
            return OperationKind.TOOL_CALL, "tool.call"
        case ToolsetValidateToolArgumentsId():
            return OperationKind.TOOL_CALL, "tool.validate"
        case ToolsetGetToolsId(toolset_kind="mcp") | ToolsetGetInstructionsId():
            return OperationKind.MCP_REQUEST, "mcp.discover"
        case ToolsetGetToolsId():
            return OperationKind.TOOL_CALL, "tool.discover"
        case EventStreamHandlerId():
            return OperationKind.EVENT_DELIVERY, "event.delivery"
        case CapabilityOperationId(capability_id=capability, operation=operation):
            return OperationKind.TOOL_CALL, f"capability.{capability}.{operation}"
    return _BY_ROLE.get(role, OperationKind.TOOL_CALL), "op"


def step_id(agent: str, step: str) -> str:
    """``pydantic_ai.<agent>.<step>``, refused when longer than an id may be."""
    text = f"pydantic_ai.{agent}.{step}"
    if len(text.encode("utf-8")) > MAX_STEP_BYTES:
        raise InvalidInput(
            f"the step id {text[:60]!r}... is longer than {MAX_STEP_BYTES} bytes; "
            "use a shorter agent name or capability id"
        )
    return text


def handler_id(agent: str) -> str:
    return f"pydantic-ai.{agent}"


def project(name: str, operation_id: DurableOperationId, params: object) -> dict[str, Any]:
    """The stable input document of one operation: what must be equal for a replay to match."""
    document: dict[str, Any] = {"operation": name}
    if isinstance(operation_id, ModelRequestId) and isinstance(params, ModelRequestParams):
        document.update(
            model_id=operation_id.model_id,
            model_name=operation_id.model_name,
            message_count=len(params.messages),
            messages_sha256=messages_digest(params.messages),
        )
    elif isinstance(operation_id, ModelCompactMessagesId | ModelCancelSuspendedResponseId):
        document["model_id"] = operation_id.model_id
    elif isinstance(operation_id, ToolsetCallToolId) and isinstance(
        params, ToolsetCallToolParams | DynamicToolsetCallToolParams
    ):
        document.update(tool=params.name, args=_jsonable(params.tool_args))
        if operation_id.toolset_kind != "mcp":
            document.update(
                tool_call_id=params.ctx.tool_call_id, approved=params.ctx.tool_call_approved
            )
    elif isinstance(operation_id, ToolsetValidateToolArgumentsId) and isinstance(
        params, ToolsetCallToolParams | DynamicToolsetCallToolParams
    ):
        document.update(tool=params.name, args=_jsonable(params.tool_args))
    elif isinstance(params, EventStreamHandlerParams):
        event = params.event
        document["event_kind"] = getattr(event, "event_kind", type(event).__name__)
        call_id = event_call_id(event)
        if call_id is not None:
            document["tool_call_id"] = call_id
    return document


def event_call_id(event: object) -> str | None:
    """The id of the tool call an event reports on (its own, or its part's), if any."""
    call_id = getattr(event, "tool_call_id", None)
    part = getattr(event, "part", None)
    if call_id is None and part is not None:
        call_id = getattr(part, "tool_call_id", None)
    return call_id if isinstance(call_id, str) else None


def messages_digest(messages: Sequence[ModelMessage]) -> str:
    """SHA-256 over (part_kind, content, tool_call_id, args) of every part, in order: what
    the model sees, without the timestamps and ids that change on every replay."""
    parts = [
        [
            getattr(part, "part_kind", type(part).__name__),
            _jsonable(getattr(part, "content", None)),
            getattr(part, "tool_call_id", None),
            _jsonable(getattr(part, "args", None)),
        ]
        for message in messages
        for part in message.parts
    ]
    return "sha256:" + hashlib.sha256(canonical(parts).encode("utf-8")).hexdigest()


def canonical(value: object) -> str:
    """Compact JSON with sorted keys: equal values give equal text, hence equal digests."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _jsonable(value: object) -> Any:
    """A JSON form of a value that is the same for a live value and its journaled copy."""
    return to_jsonable_python(value, fallback=repr, bytes_mode="base64")
