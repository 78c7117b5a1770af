"""load_capability: toolsets the model loads mid-run, offered from then on, replayed alike."""

from __future__ import annotations

from typing import Any

import pytest

import zincir
from tests.helpers import select
from zincir.agent import Agent, DurableBinding, FunctionModel, Handlers, serve, tool
from zincir.payloads import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from zincir.store import Store

HANDLERS = Handlers(model_request="cap-model", tool_call="cap-tools")


def build(ran: list[str], offered: list[list[str]]) -> Agent:
    @tool
    async def refund(order_id: str) -> dict[str, Any]:
        """Refund an order."""
        ran.append(f"refund {order_id}")
        return {"refunded": order_id}

    def model(request: ModelRequest) -> ModelResponse:
        offered.append(sorted(t.name for t in request.tools))
        turn = sum(1 for m in request.messages if m.role == "assistant")
        if turn == 0:  # refund is not on offer yet: load the capability first
            return ModelResponse(
                parts=[
                    ToolCallPart(
                        tool_call_id="c0",
                        tool_name="load_capability",
                        arguments={"name": "billing"},
                    )
                ]
            )
        if turn == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart(
                        tool_call_id="c1", tool_name="refund", arguments={"order_id": "A-17"}
                    )
                ]
            )
        returns = [
            p.content for m in request.messages for p in m.parts if isinstance(p, ToolReturnPart)
        ]
        return ModelResponse(parts=[TextPart(text=f"done: {returns}")])

    return Agent(FunctionModel(model), name="cap", capabilities={"billing": [refund]})


async def test_a_capability_is_offered_once_loaded() -> None:
    ran: list[str] = []
    offered: list[list[str]] = []
    result = await build(ran, offered).run("Refund A-17.")
    assert offered == [
        ["load_capability"],
        ["load_capability", "refund"],
        ["load_capability", "refund"],
    ]
    assert ran == ["refund A-17"]
    assert result.output == "done: [{'loaded': 'billing'}, {'refunded': 'A-17'}]"


async def test_a_durable_run_with_a_capability_replays_without_calls(store: Store) -> None:
    ran: list[str] = []
    offered: list[list[str]] = []
    agent = build(ran, offered)
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    binding = DurableBinding(zincir.LocalRuntime(store, registry), "cap-run", HANDLERS)
    first = await agent.run("Refund A-17.", durable=binding)
    assert ran == ["refund A-17"] and len(offered) == 3
    # load_capability runs in the agent process: no operation of its own.
    steps = [
        event.payload["step_id"]
        for event in await store.list_events("cap-run")
        if event.type == "operation_completed"
    ]
    assert steps.count("tool.call") == 1 and steps.count("model.request") == 3
    again = await agent.run("Refund A-17.", durable=binding)
    assert again.output == first.output and ran == ["refund A-17"] and len(offered) == 3


async def test_preflight_covers_capabilities_before_they_are_loaded(
    store: Store, store_url: str
) -> None:
    agent = build([], [])
    registry = zincir.HandlerRegistry()
    handlers = Handlers(model_request="cap-model")  # no tool handler for the capability
    serve(registry, agent, handlers)
    binding = DurableBinding(zincir.LocalRuntime(store, registry), "pre-run", handlers)
    with pytest.raises(zincir.MissingDurableHandler, match="tool_call"):
        await agent.run("Refund A-17.", durable=binding)
    assert select(store_url, "SELECT COUNT(*) FROM agent_runs") == [(0,)]
    assert select(store_url, "SELECT COUNT(*) FROM operations") == [(0,)]
