"""``McpReply``: what an ``mcp_request`` record holds, and how it is read back with the SDK.

The result and each notification are kept exactly as the SDK serialised them (wire names),
with the protocol version they were negotiated at, so reading a record back validates them
with the SDK's own models for that version: nothing here defines a protocol shape.
"""

from __future__ import annotations

from typing import Any

import mcp_types
from mcp_types.methods import parse_server_notification, parse_server_result
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from .._errors import InvalidDocument
from ..contract.payloads import Count, Document, EventDelivery, Items, JsonObject, Name

__all__ = ["McpReply", "dump", "notification_events", "read_result", "short_reason"]


class McpReply(Document):
    """Output of an ``mcp_request`` served by ``serve_mcp``.

    ``result`` is the server's result; ``notifications`` (a durable subscription's bounded
    batch, as ``{"method", "params"}`` objects) were received while the request ran, and
    ``dropped`` counts those past the batch's bound.
    """

    protocol_version: Name
    result: JsonObject
    notifications: Items[JsonObject] = ()
    dropped: Count = 0


def _sdk_method(method: str, version: str) -> str:
    """Discovery is ``server/discover`` on modern connections, the handshake on older ones."""
    if method == "server/discover" and version not in MODERN_PROTOCOL_VERSIONS:
        return "initialize"
    return method


def read_result(method: str, reply: McpReply, where: str, run_id: str) -> mcp_types.Result:
    """The reply's result as the SDK's model of ``method``; InvalidDocument naming the record."""
    version = reply.protocol_version
    try:
        return parse_server_result(_sdk_method(method, version), version, reply.result)
    except (ValidationError, ValueError, KeyError, RuntimeError) as error:
        raise InvalidDocument(
            f"the record of {where} holds no valid {method} result for protocol {version}: "
            f"{short_reason(error)}",
            run_id=run_id,
        ) from None


def notification_events(
    reply: McpReply, parent_sequence: int | None, where: str, run_id: str
) -> list[EventDelivery]:
    """Each notification of the reply, validated by the SDK, as the event that delivers it."""
    events = []
    for index, raw in enumerate(reply.notifications):
        method, params = raw.get("method"), raw.get("params")
        try:
            if not isinstance(method, str) or not isinstance(params, dict | None):
                raise ValueError("a notification is an object with a method and params")
            parse_server_notification(method, reply.protocol_version, params)
        except (ValidationError, ValueError, KeyError, RuntimeError) as error:
            raise InvalidDocument(
                f"notification #{index} in the record of {where} is not a valid MCP "
                f"notification for protocol {reply.protocol_version}: {short_reason(error)}",
                run_id=run_id,
            ) from None
        events.append(
            EventDelivery(
                name=method,
                data=params,
                source="mcp",
                parent_sequence=parent_sequence,
                index=index,
            )
        )
    return events


def dump(model: Any) -> dict[str, Any]:
    """An SDK model in its wire form (aliases, no unset optional fields)."""
    data: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return data


def short_reason(error: BaseException) -> str:
    """A one-line reason; a validation error names its fields, never the values."""
    if isinstance(error, ValidationError):
        details = error.errors(include_url=False, include_context=False, include_input=False)
        return "; ".join(
            f"{'.'.join(str(part) for part in detail['loc']) or '(value)'}: {detail['msg']}"
            for detail in details[:4]
        )
    text = str(error).splitlines()
    return "; ".join(line.strip() for line in text[:4] if line.strip())[:500]
