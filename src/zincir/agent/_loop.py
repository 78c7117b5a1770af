"""The loop both paths share: model → tool calls → model … → final text.

An ``Executor`` decides how a model request or a tool call happens (directly, or as a
durable operation) and what is logged; the loop itself holds only deterministic state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .._errors import InvalidInput
from ..contract.payloads import (
    Message,
    ModelRequest,
    ModelResponse,
    RunContext,
    ToolCallPart,
    ToolOutput,
    ToolReturnPart,
    Usage,
)
from ._conversation import Conversation, add_usage, response_text, tool_calls
from ._errors import ToolRetriesExhausted
from ._preflight import ResolvedToolsets
from ._result import AgentRunResult
from ._tools import Tool, ToolArgumentsRejected, ToolOrigin

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["Executor", "run_loop"]


class Executor(Protocol):
    """How side effects happen and what is recorded on one path."""

    run_id: str | None

    async def prepare(self, number: int, resolved: ResolvedToolsets) -> None: ...
    async def model_request(self, number: int, request: ModelRequest) -> ModelResponse: ...
    async def run_tool(
        self,
        number: int,
        position: int,
        tool: Tool,
        call: ToolCallPart,
        arguments: dict[str, Any],
        retry: int,
    ) -> ToolOutput: ...
    async def record_response(self, number: int, response: ModelResponse) -> None: ...
    async def record_return(self, part: ToolReturnPart) -> None: ...


@dataclass(frozen=True, slots=True)
class _Planned:
    """One tool call with its identity fixed: a tool and arguments, or a retry prompt."""

    position: int
    call: ToolCallPart
    tool: Tool | None
    arguments: dict[str, Any]
    retry: int
    rejection: str | None


async def run_loop(agent: Agent, prompt: str, executor: Executor) -> AgentRunResult:
    """Run the conversation to its final text."""
    conversation = Conversation(agent.instructions, prompt)
    usage = Usage()
    failures: dict[str, int] = {}
    number = 0
    while True:
        context = RunContext(
            run_id=executor.run_id or agent.name, step=number, agent_name=agent.name
        )
        resolved = await agent.resolve_toolsets(context)
        tools = agent.tools_by_name(resolved, run_id=executor.run_id)
        await executor.prepare(number, resolved)
        request = conversation.request(agent.model.name, [t.definition() for t in tools.values()])
        for hook in agent.hooks:
            await hook.on_model_request(number, request)
        response = await executor.model_request(number, request)
        for hook in agent.hooks:
            await hook.on_model_response(number, response)
        usage = add_usage(usage, response.usage)
        conversation.add_response(response)
        await executor.record_response(number, response)
        calls = tool_calls(response)
        if not calls:
            return AgentRunResult(response_text(response), tuple(conversation.messages), usage)
        plans = [
            _plan(position, call, tools, failures, executor.run_id)
            for position, call in enumerate(calls)
        ]
        exhausted = sorted(
            {
                p.call.tool_name
                for p in plans
                if p.rejection and failures[p.call.tool_name] > agent.tool_retries
            }
        )
        if exhausted:
            for plan in plans:
                if plan.rejection is not None:
                    await executor.record_return(_rejected(plan.call, plan.rejection))
            raise ToolRetriesExhausted(
                f"the model called {', '.join(map(repr, exhausted))} wrongly more than "
                f"{agent.tool_retries} times in a row (unknown tool or invalid arguments); "
                "check the tool's schema and the instructions, or raise Agent(tool_retries=...)",
                run_id=executor.run_id,
            )
        done = await asyncio.gather(*(_execute(agent, executor, number, p) for p in plans))
        for plan in plans:
            if plan.rejection is None:
                failures.pop(plan.call.tool_name, None)
        conversation.add_tool_returns(part for part, _ in done)
        for _, follow_up in done:
            conversation.add_messages(follow_up)
        number += 1


def _plan(
    position: int,
    call: ToolCallPart,
    tools: dict[str, Tool],
    failures: dict[str, int],
    run_id: str | None,
) -> _Planned:
    """Validate one call before anything runs; a bad call counts as a failure of its name."""
    name = call.tool_name
    tool = tools.get(name)
    rejection: str | None = None
    arguments: dict[str, Any] = {}
    if tool is not None and tool.requires_approval:
        raise InvalidInput(
            f"tool {name!r} requires approval, and pausing a run for approval is not "
            "available yet; set requires_approval=False or leave the tool out",
            run_id=run_id,
        )
    if tool is None:
        known = ", ".join(sorted(tools)) or "(none)"
        rejection = f"unknown tool {name!r}; the available tools are: {known}. Call one of them."
    else:
        try:
            arguments = tool.validate(call.arguments)
        except ToolArgumentsRejected as error:
            rejection = error.message
    if rejection is not None:
        failures[name] = failures.get(name, 0) + 1
    return _Planned(position, call, tool, arguments, failures.get(name, 0), rejection)


def _rejected(call: ToolCallPart, message: str) -> ToolReturnPart:
    return ToolReturnPart(
        tool_call_id=call.tool_call_id, tool_name=call.tool_name, content=message, is_error=True
    )


async def _execute(
    agent: Agent, executor: Executor, number: int, plan: _Planned
) -> tuple[ToolReturnPart, Sequence[Message]]:
    """Run one planned call; a workflow-origin tool runs here, in the agent process."""
    call = plan.call
    follow_up: Sequence[Message] = ()
    if plan.rejection is not None or plan.tool is None:
        part = _rejected(call, plan.rejection or "")
    elif plan.tool.origin is ToolOrigin.WORKFLOW:
        content = await plan.tool.call(plan.arguments)
        part = ToolReturnPart(
            tool_call_id=call.tool_call_id, tool_name=call.tool_name, content=content
        )
    else:
        output = await executor.run_tool(
            number, plan.position, plan.tool, call, plan.arguments, plan.retry
        )
        part = ToolReturnPart(
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            content=output.content,
            is_error=output.is_error,
        )
        follow_up = tuple(output.follow_up_messages)
    for hook in agent.hooks:
        await hook.on_tool_return(part)
    await executor.record_return(part)
    return part, follow_up
