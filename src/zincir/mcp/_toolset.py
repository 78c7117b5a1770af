"""``MCPToolset``: an MCP server's tools for ``zincir.agent``, with origin ``mcp``.

The tools are discovered once per toolset through the client: on a bound client as durable
``tools/list`` requests (step ``mcp.toolset.<id>``, one sequence per page), so a replay
rebuilds them from the records without a server. On the agent's durable path each call is
an ``mcp.request`` operation routed to the client's handler (``serve_mcp``), declared to
preflight by the toolset itself; on the direct path the tool calls the server directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import mcp_types
from jsonschema import SchemaError  # type: ignore[import-untyped]
from jsonschema.exceptions import best_match  # type: ignore[import-untyped]
from jsonschema.validators import validator_for  # type: ignore[import-untyped]
from pydantic import JsonValue

from .._errors import InvalidDocument, InvalidInput
from ..agent import Tool, ToolOrigin, Toolset
from ..agent._tools import ToolArgumentsRejected
from ..contract.payloads import McpRequest, RunContext, ToolCallPart, ToolOutput
from ._client import DurableMCPClient
from ._identity import DurableRequest
from ._reply import McpReply, dump, read_result

__all__ = ["MCPTool", "MCPToolset", "tool_content"]

TOOLSET_STEP = "mcp.toolset"


class MCPToolset(Toolset):
    """The tools of the MCP server ``client`` reaches, offered to an agent (origin ``mcp``).

    ``id`` (default: the client's handler id) names the toolset and its discovery step.
    The tool list is fixed at its first discovery for the toolset's life: on a bound
    client, a restarted run replays that discovery.
    """

    def __init__(self, client: DurableMCPClient, *, id: str | None = None) -> None:
        if not isinstance(client, DurableMCPClient):
            raise InvalidInput("MCPToolset needs a zincir.mcp.DurableMCPClient")
        super().__init__(id=id if id is not None else client.handler_id or "mcp")
        self.client = client
        self.handler_id = client.handler_id
        self.durable_origins = frozenset({ToolOrigin.MCP})
        if client.handler_id is not None:
            self.durable_handlers = MappingProxyType({ToolOrigin.MCP: client.handler_id})
        self._offered: tuple[Tool, ...] | None = None

    def __repr__(self) -> str:
        return f"MCPToolset(id={self.id!r}, handler_id={self.handler_id!r})"

    @property
    def is_dynamic(self) -> bool:
        """Discovered, so checked like a dynamic toolset (its origins are declared)."""
        return True

    async def resolve(self, context: RunContext) -> tuple[Tool, ...]:
        """The server's tools, discovered on first use."""
        if self._offered is None:
            first = None
            if self.client.binding is not None:
                first = DurableRequest(f"{TOOLSET_STEP}.{self.id}", 0)
            definitions = await self.client.list_tools(durable=first)
            self._offered = tuple(MCPTool(definition, self) for definition in definitions)
        return self._offered

    # -- the route of its tools' durable calls (zincir.agent.McpRoute) --------------------

    def request(self, call: ToolCallPart, arguments: dict[str, Any]) -> McpRequest:
        """The ``tools/call`` document of a call (the client's identity and headers)."""
        return self.client.document("tools/call", {"name": call.tool_name, "arguments": arguments})

    def output(self, call: ToolCallPart, output_json: str) -> ToolOutput:
        """The tool output the model sees, read from an ``mcp.request`` record."""
        run_id = self.client.run_id or ""
        where = f"tool call {call.tool_call_id!r} ({call.tool_name})"
        try:
            reply = McpReply.from_json(output_json)
        except InvalidDocument as error:
            raise InvalidDocument(
                f"the record of {where} holds no McpReply ({error.detail}); the handler "
                f"{self.handler_id!r} must be serve_mcp's",
                run_id=run_id,
            ) from None
        result = read_result("tools/call", reply, where, run_id)
        if not isinstance(result, mcp_types.CallToolResult):
            raise InvalidDocument(f"the record of {where} holds no tool result", run_id=run_id)
        content, is_error = tool_content(result)
        return ToolOutput(
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            content=content,
            is_error=is_error,
        )


class MCPTool(Tool):
    """One tool of an MCP server: its name, description and input schema are the server's."""

    def __init__(self, definition: mcp_types.Tool, toolset: MCPToolset) -> None:
        run_id = toolset.client.run_id
        try:
            super().__init__(
                self._direct,
                name=definition.name,
                description=definition.description or "",
                schema=definition.input_schema,
                origin=ToolOrigin.MCP,
            )
        except InvalidInput as error:
            raise InvalidInput(
                f"MCP tool {definition.name!r} of toolset {toolset.id!r}: {error.detail}",
                run_id=run_id,
            ) from None
        self.mcp_route = toolset
        self.toolset = toolset
        try:
            checker = validator_for(self.schema)
            checker.check_schema(self.schema)
        except SchemaError as error:
            raise InvalidInput(
                f"MCP tool {self.name!r} has an invalid input schema: {error.message}",
                run_id=run_id,
            ) from None
        self._checker = checker(self.schema)

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r}, toolset={self.toolset.id!r})"

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments, checked against the server's input schema."""
        if not isinstance(arguments, Mapping):
            raise ToolArgumentsRejected("the arguments must be a JSON object")
        chosen = dict(arguments)
        error = best_match(self._checker.iter_errors(chosen))
        if error is not None:
            where = ".".join(str(part) for part in error.absolute_path) or "(arguments)"
            raise ToolArgumentsRejected(
                f"invalid arguments: {where}: {error.message}. Fix the arguments and call again."
            )
        return chosen

    async def call(self, arguments: Mapping[str, Any]) -> Any:
        """The direct path: call the server from this process."""
        return await self._direct(dict(self.validate(arguments)))

    async def _direct(self, arguments: dict[str, Any]) -> Any:
        client = self.toolset.client
        reply = await client.direct(
            client.document("tools/call", {"name": self.name, "arguments": arguments})
        )
        result = read_result("tools/call", reply, f"tool {self.name!r}", client.run_id or "")
        assert isinstance(result, mcp_types.CallToolResult)
        return tool_content(result)[0]


def tool_content(result: mcp_types.CallToolResult) -> tuple[JsonValue, bool]:
    """What the model sees of a tool result: its structured content, else its text, else
    its content blocks; and whether the tool reported an error."""
    content: JsonValue
    if result.structured_content is not None:
        content = result.structured_content
    else:
        blocks = [dump(block) for block in result.content]
        texts = [block["text"] for block in blocks if block.get("type") == "text"]
        joined: JsonValue = "\n".join(texts)
        content = joined if len(texts) == len(blocks) else list[JsonValue](blocks)
    return content, bool(result.is_error)
