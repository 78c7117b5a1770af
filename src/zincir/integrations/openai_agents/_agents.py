"""The durable copy of an agent graph: every agent reachable by handoffs is copied once per
run with its model wrapped in a DurableModel and every function tool (its own, and the MCP
tools the SDK makes from its servers at each turn) in a durable tool call. The user's agents
are never changed; a handoff to an agent lands on its copy."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any, Final

from agents import Agent, FunctionTool, Handoff, RunConfig, RunContextWrapper
from agents.models.interface import Model
from agents.tool import Tool
from agents.tool_context import ToolContext

from ...contract import OperationKind
from ...runs import tool_result_entry
from ...store import LogEntry
from ._codec import decode_output, encode_output
from ._model import DurableModel
from ._run import RunScope

__all__ = ["MCP_REQUEST", "TOOL_CALL", "DurableAgents"]

TOOL_CALL: Final = "openai_agents.tool.call"
MCP_REQUEST: Final = "openai_agents.mcp.request"
_WRAPPED: Final = "__zincir_durable_tool__"


class DurableAgents:
    """Copies of the agents of one run, each made once (handoff cycles included)."""

    def __init__(self, scope: RunScope, run_config: RunConfig) -> None:
        self.scope = scope
        self.run_config = run_config
        self.copies: dict[int, Agent[Any]] = {}
        self.originals: dict[int, Agent[Any]] = {}

    def copy(self, agent: Agent[Any]) -> Agent[Any]:
        known = self.copies.get(id(agent))
        if known is not None or id(agent) in self.originals:
            return known or agent
        copied = dataclasses.replace(agent)
        self.copies[id(agent)] = copied
        self.originals[id(copied)] = agent
        if not isinstance(self.run_config.model, Model | str):
            copied.model = DurableModel(self._model_of(agent), self.scope, agent.name)
        copied.tools = [self.tool(tool) for tool in agent.tools]
        copied.handoffs = [self._handoff(handoff) for handoff in agent.handoffs]
        if agent.mcp_servers:
            original = copied.get_mcp_tools

            async def get_mcp_tools(run_context: RunContextWrapper[Any]) -> list[Tool]:
                return [self.tool(tool, mcp=True) for tool in await original(run_context)]

            object.__setattr__(copied, "get_mcp_tools", get_mcp_tools)
        return copied

    def original(self, agent: Agent[Any]) -> Agent[Any]:
        """The user's agent a copy was made from (``agent`` itself otherwise)."""
        return self.originals.get(id(agent), agent)

    def run_model(self) -> Model | None:
        """The run-wide model of the run config (it overrides every agent's), made durable."""
        chosen = self.run_config.model
        if chosen is None:
            return None
        inner = (
            chosen
            if isinstance(chosen, Model)
            else self.run_config.model_provider.get_model(chosen)
        )
        return DurableModel(inner, self.scope, "run_config")

    def _model_of(self, agent: Agent[Any]) -> Model:
        if isinstance(agent.model, Model):
            return agent.model
        return self.run_config.model_provider.get_model(agent.model)

    def _handoff(self, handoff: Agent[Any] | Handoff[Any, Any]) -> Any:
        if isinstance(handoff, Agent):
            return self.copy(handoff)
        invoke = handoff.on_invoke_handoff

        async def on_invoke_handoff(context: RunContextWrapper[Any], arguments: str) -> Any:
            return self.copy(await invoke(context, arguments))

        return dataclasses.replace(handoff, on_invoke_handoff=on_invoke_handoff)

    def tool(self, tool: Tool, *, mcp: bool = False) -> Tool:
        """``tool`` with each call a zincir operation, when it is a function tool."""
        if not isinstance(tool, FunctionTool) or getattr(tool.on_invoke_tool, _WRAPPED, False):
            return tool
        mcp = mcp or tool._mcp_tool_binding is not None
        invoke = durable_invoke(self.scope, tool.name, tool.on_invoke_tool, mcp=mcp)
        return dataclasses.replace(tool, on_invoke_tool=invoke)


def durable_invoke(
    scope: RunScope,
    name: str,
    invoke: Callable[[ToolContext[Any], str], Awaitable[Any]],
    *,
    mcp: bool,
) -> Callable[[ToolContext[Any], str], Awaitable[Any]]:
    """``invoke`` run once per tool call of the run (known by the model's call id)."""
    step, kind = (
        (MCP_REQUEST, OperationKind.MCP_REQUEST) if mcp else (TOOL_CALL, OperationKind.TOOL_CALL)
    )

    async def on_invoke_tool(context: ToolContext[Any], arguments: str) -> Any:
        call_id = getattr(context, "tool_call_id", None)
        document: dict[str, Any]
        if mcp:  # the shape zincir's MCP requests have (their spans name the tool)
            params = {"name": name, "arguments": _parsed(arguments)}
            document = {"method": "tools/call", "params": params, "call_id": call_id}
        else:
            call = {"tool_name": name, "tool_call_id": call_id}
            document = {"call": call, "arguments": _parsed(arguments)}

        async def body() -> Any:
            return encode_output(await invoke(context, arguments))

        def log(value: Any) -> LogEntry | None:
            if call_id not in scope.intents or call_id in scope.logged_results:
                return None  # no intent to answer (a call outside a response), or logged
            return tool_result_entry(scope.run_id, call_id, _shown(decode_output(value)))

        if scope.ctx is not None and call_id not in scope.calls_done:
            await scope.ctx.check_budget("tools")
        sequence = scope.call_sequence(call_id)
        value, _, logged = await scope.execute(step, sequence, kind, document, body, log)
        output = decode_output(value)
        if isinstance(call_id, str):
            await _log_result(scope, call_id, output, logged)
        return output

    setattr(on_invoke_tool, _WRAPPED, True)
    return on_invoke_tool


async def _log_result(scope: RunScope, call_id: str, output: Any, logged: bool) -> None:
    """The call's result in the run's log (the inspector's conversation, budgets), once:
    unless its record's transaction appended it."""
    scope.calls_done.add(call_id)
    if logged or scope.ctx is None or call_id in scope.logged_results:
        scope.logged_results.add(call_id)
        return
    if call_id in scope.intents:  # else no intent to answer: a call outside a response
        await scope.ctx.record_tool_result(call_id, _shown(output), durable=False)
    scope.logged_results.add(call_id)


def _shown(output: Any) -> Any:
    """A tool's output as the log shows it: JSON scalars as they are, anything else as text."""
    return output if isinstance(output, str | int | float | bool | None) else str(output)


def _parsed(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments
