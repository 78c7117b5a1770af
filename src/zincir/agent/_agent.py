"""``Agent``: a model, instructions and tools, run directly or through a DurableBinding."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from .._errors import InvalidDocument, InvalidInput, ZincirError
from .._validate import check_count, check_id
from ..contract.payloads import EventDelivery, RunContext
from ..durable import RetryPolicy
from ._binding import DurableBinding
from ._direct import DirectExecutor
from ._durable import DurableExecutor, Logged
from ._errors import DurableOperationFailed, ToolRetriesExhausted
from ._hooks import AgentHooks
from ._loop import run_loop
from ._models import Model
from ._ownership import take_run
from ._preflight import ResolvedToolsets, check_route
from ._result import AgentRunResult, result_from_stored, stored_result
from ._tools import Tool, ToolFunction, Toolset

__all__ = ["Agent", "EventSink"]

EventSink = Callable[[EventDelivery], Awaitable[None] | None]

_DETERMINISTIC_FAILURES = (DurableOperationFailed, ToolRetriesExhausted, InvalidDocument)


class Agent:
    """A small provider-agnostic loop: model → tool calls → model … → final text.

    ``retry`` is the policy for retryable model failures; ``tool_retries`` bounds how often
    in a row the model may call a tool wrongly before the run fails; ``hooks`` observe.
    """

    def __init__(
        self,
        model: Model,
        *,
        name: str = "agent",
        instructions: str | None = None,
        tools: Iterable[Tool | ToolFunction] = (),
        toolsets: Iterable[Toolset] = (),
        retry: RetryPolicy | None = None,
        hooks: Iterable[AgentHooks] = (),
        tool_retries: int = 3,
        event_sink: EventSink | None = None,
    ) -> None:
        if not isinstance(getattr(model, "name", None), str) or not callable(
            getattr(model, "request", None)
        ):
            raise InvalidInput("model must implement zincir.agent.Model (name, request)")
        self.model = model
        self.name = check_id(name, "an agent name")
        if instructions is not None and not isinstance(instructions, str):
            raise InvalidInput("instructions must be a str or None")
        self.instructions = instructions
        self.toolsets: tuple[Toolset, ...] = (Toolset(tools, id="tools"), *toolsets)
        for toolset in self.toolsets:
            if not isinstance(toolset, Toolset):
                raise InvalidInput(f"toolsets must hold Toolset objects, not {toolset!r}")
        self.tools_by_name([(ts, ts.tools) for ts in self.toolsets if not ts.is_dynamic])
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidInput("retry must be a zincir.RetryPolicy or None")
        self.retry = retry if retry is not None else RetryPolicy.no_retry()
        self.hooks: tuple[AgentHooks, ...] = tuple(hooks)
        self.tool_retries = check_count(tool_retries, "tool_retries")
        self.event_sink = event_sink

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, model={self.model.name!r})"

    async def run(self, prompt: str, *, durable: DurableBinding | None = None) -> AgentRunResult:
        """Run to the final text; with ``durable`` every side effect is a durable operation."""
        if not isinstance(prompt, str):
            raise InvalidInput("prompt must be a str")
        if durable is None:
            return await run_loop(self, prompt, DirectExecutor(self.model))
        if not isinstance(durable, DurableBinding):
            raise InvalidInput("durable must be a zincir.agent.DurableBinding")
        return await self._run_durable(prompt, durable)

    async def _run_durable(self, prompt: str, binding: DurableBinding) -> AgentRunResult:
        store = binding.run_store()
        check_route(self, binding)
        row = await store.get_run(binding.run_id)
        if row is not None and row["status"] == "completed":
            return result_from_stored(row["result"], binding.run_id)
        ctx = await take_run(
            store, binding, name=self.name, provider=self.model.name, exists=row is not None
        )
        try:
            logged = Logged.from_events(await store.list_events(binding.run_id))
            result = await run_loop(self, prompt, DurableExecutor(self, binding, ctx, logged))
            await ctx.complete(stored_result(result))
        except _DETERMINISTIC_FAILURES as error:
            await _quietly(ctx.fail(f"{type(error).__name__}: {error}"))
            raise
        except BaseException:
            await _quietly(ctx.close())
            raise
        return result

    async def resolve_toolsets(self, context: RunContext) -> ResolvedToolsets:
        """Each toolset with the tools it offers for the next request."""
        return [(toolset, await toolset.resolve(context)) for toolset in self.toolsets]

    def tools_by_name(
        self, resolved: ResolvedToolsets, *, run_id: str | None = None
    ) -> dict[str, Tool]:
        """The tools on offer by name; two tools may not share a name."""
        tools: dict[str, Tool] = {}
        for _, offered in resolved:
            for tool in offered:
                if tool.name in tools:
                    raise InvalidInput(
                        f"two tools are named {tool.name!r}; tool names must be unique",
                        run_id=run_id,
                    )
                tools[tool.name] = tool
        return tools

    async def find_tool(self, name: str, context: RunContext) -> Tool | None:
        """The tool called ``name`` as offered in ``context`` (a worker's lookup)."""
        return self.tools_by_name(await self.resolve_toolsets(context)).get(name)

    async def deliver(self, event: EventDelivery) -> None:
        """Hand an event to the agent's event sink, if it has one."""
        if self.event_sink is not None:
            delivered = self.event_sink(event)
            if inspect.isawaitable(delivered):
                await delivered


async def _quietly(step: Awaitable[Any]) -> None:
    """Run a clean-up step whose own failure must not hide the error being raised."""
    with contextlib.suppress(ZincirError):
        await step
