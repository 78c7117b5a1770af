"""The durable path: each model request and tool call is an Invocation the runtime executes.

The agent process never calls the model or a tool itself here. It logs each response and
tool result on the run (like an ``AgentContext`` loop), skipping what a previous attempt
already logged, so a replay adds nothing twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import InvalidDocument, MissingDurableHandler, Suspend
from .._json import loads_strict
from ..contract import Failure, Invocation, OperationKind, Success
from ..contract.payloads import (
    ClientIdentity,
    Document,
    McpRequest,
    ModelRequest,
    ModelResponse,
    RunContext,
    ToolCallPart,
    ToolOutput,
    ToolRequest,
    ToolReturnPart,
)
from ..runs import AgentContext, ToolCall
from ..store import Event
from ._binding import DurableBinding
from ._conversation import response_text, tool_calls
from ._errors import DurableOperationFailed
from ._identity import MCP_REQUEST, MODEL_REQUEST, TOOL_CALL, tool_sequence
from ._preflight import ResolvedToolsets, check_route
from ._tools import Tool, ToolOrigin

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["DurableExecutor", "Logged"]


@dataclass(slots=True)
class Logged:
    """What the run's log already holds: how many responses, which tool results."""

    responses: int = 0
    results: set[str] = field(default_factory=set)

    @classmethod
    def from_events(cls, events: Iterable[Event]) -> Logged:
        logged = cls()
        for event in events:
            if event.type == "llm_call":
                logged.responses += 1
            elif event.type == "tool_result" and isinstance(event.payload, dict):
                logged.results.add(str(event.payload.get("id")))
        return logged


class DurableExecutor:
    """Routes every side effect through ``binding.runtime.execute`` and logs it on the run."""

    def __init__(
        self, agent: Agent, binding: DurableBinding, ctx: AgentContext, logged: Logged
    ) -> None:
        self.agent = agent
        self.binding = binding
        self.ctx = ctx
        self.logged = logged
        self.run_id: str | None = binding.run_id

    async def prepare(self, number: int, resolved: ResolvedToolsets) -> None:
        """Re-check the route: the tools on offer may have changed."""
        check_route(self.agent, self.binding, resolved)

    async def model_request(self, number: int, request: ModelRequest) -> ModelResponse:
        """Model request ``number`` as ``model.request`` #number."""
        output = await self._execute(MODEL_REQUEST, number, OperationKind.MODEL_REQUEST, request)
        try:
            return ModelResponse.from_json(output)
        except InvalidDocument as error:
            raise InvalidDocument(
                f"the record of {self.binding.step_id(MODEL_REQUEST)} #{number} holds no valid "
                f"ModelResponse ({error.detail}); the model handler must return one",
                run_id=self.binding.run_id,
            ) from None

    async def run_tool(
        self,
        number: int,
        position: int,
        tool: Tool,
        call: ToolCallPart,
        arguments: dict[str, Any],
        retry: int,
    ) -> ToolOutput:
        """The call as ``tool.call`` (or ``mcp.request``) #number*1000+position."""
        run_id = self.binding.run_id
        sequence = tool_sequence(number, position, run_id=run_id)
        if tool.origin is ToolOrigin.MCP:
            document: Document = McpRequest(
                method="tools/call",
                params={"name": call.tool_name, "arguments": arguments},
                client=ClientIdentity(name=self.agent.name),
            )
            output = await self._execute(MCP_REQUEST, sequence, OperationKind.MCP_REQUEST, document)
        else:
            document = ToolRequest(
                call=call,
                arguments=arguments,
                context=RunContext(run_id=run_id, step=number, agent_name=self.agent.name),
                retry=retry,
            )
            output = await self._execute(TOOL_CALL, sequence, OperationKind.TOOL_CALL, document)
        try:
            return ToolOutput.from_json(output)
        except InvalidDocument as error:
            raise InvalidDocument(
                f"the record of tool call {call.tool_call_id!r} ({call.tool_name}) holds no "
                f"valid ToolOutput ({error.detail}); the tool handler must return one",
                run_id=run_id,
            ) from None

    async def record_response(self, number: int, response: ModelResponse) -> None:
        """Log the response and its tool intents, unless a previous attempt did."""
        if number < self.logged.responses:
            return
        await self.ctx.record_response(
            response_text(response),
            [
                ToolCall(c.tool_call_id, c.tool_name, dict(c.arguments))
                for c in tool_calls(response)
            ],
            response.finish_reason,
            usage=response.usage.to_dict(),
            model=response.model_name or None,
        )
        self.logged.responses = number + 1

    async def record_return(self, part: ToolReturnPart) -> None:
        """Log a tool's result, unless a previous attempt did."""
        if part.tool_call_id in self.logged.results:
            return
        await self.ctx.record_tool_result(part.tool_call_id, part.content, is_error=part.is_error)
        self.logged.results.add(part.tool_call_id)

    async def _execute(
        self, step: str, sequence: int, kind: OperationKind, document: Document
    ) -> str:
        """Execute one operation; its output document, or the persisted failure raised."""
        run_id = self.binding.run_id
        handler_id = self.binding.handlers.for_kind(kind)
        if handler_id is None:
            raise MissingDurableHandler(
                f"no {kind.value} handler is configured in Handlers", run_id=run_id
            )
        invocation = Invocation(
            run_id=run_id,
            step_id=self.binding.step_id(step),
            sequence=sequence,
            kind=kind,
            handler_id=handler_id,
            input_json=document.to_json(),
        )
        record = await self.binding.runtime.execute(invocation)
        outcome = record.outcome
        if isinstance(outcome, Success):
            return outcome.output_json
        if isinstance(outcome, Failure):
            raise DurableOperationFailed(record)
        raise Suspend(
            str(outcome.reason),
            loads_strict(outcome.state_json),
            state_version=outcome.state_version,
        )
