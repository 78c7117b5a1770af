"""A durable run that pauses for an approval every turn: what each pause stores as the run
grows. Its ``agent_paused`` event names the model request whose record holds the
conversation so far instead of holding it, so the store grows linearly, not once a pause."""

from __future__ import annotations

import pytest

import zincir
from tests.agent.reference import call
from tests.store.growth import Growth
from zincir.agent import Agent, Approve, DurableBinding, FunctionModel, Handlers, serve, tool
from zincir.payloads import ModelRequest, ModelResponse, TextPart
from zincir.store import Store

PAUSES = 40
SECTION = "lorem ipsum dolor sit amet " * 74  # about 2 KB of new text a turn


@tool(requires_approval=True)
def act(step: int) -> str:
    """Act once approved; its result adds 2 KB to the conversation."""
    return f"section {step}: {SECTION}"


def model(request: ModelRequest) -> ModelResponse:
    number = sum(1 for message in request.messages if message.role == "assistant")
    if number < PAUSES:
        return ModelResponse(parts=[call(f"a{number}", "act", step=number)])
    return ModelResponse(parts=[TextPart(text="done")])


@pytest.mark.sqlite_only
async def test_a_run_paused_every_turn_grows_the_store_linearly(
    store: Store, store_url: str
) -> None:
    agent = Agent(FunctionModel(model), tools=[act])
    handlers = Handlers(model_request="m", tool_call="t", approval_resume="a")
    registry = zincir.HandlerRegistry()
    serve(registry, agent, handlers)
    bound = DurableBinding(zincir.LocalRuntime(store, registry), "paused", handlers)
    growth = Growth(store_url)
    paused = (await agent.run("go", durable=bound)).paused
    while paused is not None:
        growth.sample()
        result = await agent.resume(paused, {paused.calls[0].call_id: Approve()}, durable=bound)
        paused = result.paused
    assert result.output == "done" and len(growth.stored) == PAUSES
    growth.assert_linear()
