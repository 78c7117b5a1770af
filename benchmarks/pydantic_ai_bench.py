"""The pydantic-ai agent turn of ``peers_child.pydantic_ai_dbos_us`` on ZincirDurability.

The same ``FunctionModel`` (one request asking for three tool calls per turn, ``TURNS`` turns,
then "done") and the same trivial tools, each run a zincir run on a LocalRuntime (FULL);
median µs per turn over ``runs`` runs after three warm-up runs. With ``durable=False`` the
same agent runs without the capability: pydantic-ai's own cost of a turn, which bounds how
much faster than another durable engine any durability capability can make it. With
``keep_nothing=True`` the capability runs on a runtime that calls each unit and stores nothing
(``KeepNothing``): pydantic-ai's own durability machinery and the run's lease, without one
operation record, the ceiling of any engine built on pydantic-ai's durability base.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from peers_child import TURN_TOOLS, TURNS, step_result

import zincir
from zincir import HandlerRegistry, Invocation, Record, Success


class KeepNothing:
    """A DurableRuntime that calls each unit's registered handler and keeps no record."""

    def __init__(self, registry: HandlerRegistry) -> None:
        self.registry = registry

    async def execute(self, invocation: Invocation) -> Record:
        output = await self.registry.require(invocation)(invocation, None)
        return Record.for_invocation(invocation, Success(json.dumps(output)))


async def pydantic_ai_turn_us(
    path: str, runs: int, *, durable: bool = True, keep_nothing: bool = False
) -> float:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from zincir.integrations.pydantic_ai import ZincirDurability, serve

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        number = sum(1 for message in messages if isinstance(message, ModelResponse))
        if number >= TURNS:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(
            parts=[
                ToolCallPart(name, {"i": k}, tool_call_id=f"c{number}-{k}")
                for k, name in enumerate(TURN_TOOLS)
            ]
        )

    store = zincir.open_store(path, synchronous="full")
    try:
        capabilities: list[Any] = []
        if keep_nothing:
            registry = HandlerRegistry()
            serve(registry, "bench")
            capabilities = [ZincirDurability(store, runtime=KeepNothing(registry))]
        elif durable:
            capabilities = [ZincirDurability(store)]
        agent: Agent[None, str] = Agent(
            FunctionModel(model), name="bench", capabilities=capabilities
        )

        @agent.tool_plain
        async def lookup(i: int) -> dict[str, Any]:
            """Look an item up."""
            return step_result(i)

        @agent.tool_plain
        async def price(i: int) -> dict[str, Any]:
            """An item's price."""
            return step_result(i)

        @agent.tool_plain
        async def stock(i: int) -> dict[str, Any]:
            """An item's stock."""
            return step_result(i)

        for i in range(3):
            assert (await agent.run("Check the items.", run_id=f"warm-{i}")).output == "done"
        samples = []
        for i in range(runs):
            started = time.perf_counter()
            await agent.run("Check the items.", run_id=f"turn-{i}")
            samples.append((time.perf_counter() - started) / TURNS * 1e6)
        return statistics.median(samples)
    finally:
        await store.close()
