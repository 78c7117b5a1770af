"""Streaming: live and replayed stream parts, tool events, ``deliver_event``, hooks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.agent.conftest import Durable
from tests.agent.reference import call, request_number, returns
from tests.helpers import select
from zincir.agent import (
    Agent,
    AgentHooks,
    DurableBinding,
    FunctionModel,
    Handlers,
    StreamEvent,
    deliver_event,
    serve,
    tool,
)
from zincir.payloads import (
    EventDelivery,
    ModelRequest,
    ModelResponse,
    PartDelta,
    PartEnd,
    PartStart,
    StreamPart,
    StreamUsage,
    TextPart,
    ToolReturnPart,
    Usage,
    stream_parts,
)

HANDLERS = Handlers(model_stream="stream", tool_call="tools", event_delivery="events")


def script(request: ModelRequest) -> ModelResponse:
    if request_number(request) == 0:
        return ModelResponse(
            parts=[
                TextPart(text="Let me look that order up for you."),
                call("c1", "lookup", order_id="A-17"),
            ],
            usage=Usage(input_tokens=7, output_tokens=5),
        )
    return ModelResponse(
        parts=[TextPart(text=f"Order status: {returns(request)[0]['status']}.")],
        usage=Usage(input_tokens=9, output_tokens=4),
    )


def chunked(size: int) -> Callable[[ModelRequest], AsyncIterator[StreamPart]]:
    """A provider that sends the scripted response in chunks of ``size`` characters."""

    async def stream(request: ModelRequest) -> AsyncIterator[StreamPart]:
        response = script(request)
        for index, part in enumerate(response.parts):
            if isinstance(part, TextPart):
                yield PartStart(index=index, part_kind="text")
                text = part.text
            else:
                yield PartStart(
                    index=index,
                    part_kind="tool_call",
                    tool_call_id=part.tool_call_id,
                    tool_name=part.tool_name,
                )
                text = json.dumps(part.arguments, separators=(", ", ": "))
            for start in range(0, len(text), size):
                yield PartDelta(index=index, delta=text[start : start + size])
            yield PartEnd(index=index)
        yield StreamUsage(usage=response.usage)

    return stream


def build(size: int, ran: list[str], *, gate: asyncio.Event | None = None) -> Agent:
    @tool
    async def lookup(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        ran.append(order_id)
        if gate is not None:
            await gate.wait()
        return {"status": "delivered"}

    return Agent(FunctionModel(script, chunked(size)), name="streamer", tools=[lookup])


def bind(durable: Durable, agent: Agent, run_id: str = "s") -> DurableBinding:
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    return DurableBinding(zincir.LocalRuntime(durable.store, registry), run_id, HANDLERS)


async def collect(stream: AsyncIterator[StreamEvent] | Any) -> list[StreamEvent]:
    return [event async for event in stream]


def model_parts(events: list[StreamEvent]) -> list[StreamEvent]:
    return [e for e in events if not isinstance(e, ToolReturnPart)]


async def test_direct_streaming_passes_the_provider_chunks_on() -> None:
    ran: list[str] = []
    stream = build(3, ran).run_stream("Where is A-17?")
    events = await collect(stream)
    deltas = [e for e in events if isinstance(e, PartDelta)]
    assert all(len(d.delta) <= 3 for d in deltas) and len(deltas) > 6
    assert [e for e in events if isinstance(e, ToolReturnPart)][0].content == {
        "status": "delivered"
    }
    assert stream.result.output == "Order status: delivered." and ran == ["A-17"]
    assert stream.result.usage.input_tokens == 16


async def test_durable_streaming_yields_normalised_parts(durable: Durable) -> None:
    ran: list[str] = []
    agent = build(3, ran)
    stream = agent.run_stream("Where is A-17?", durable=bind(durable, agent))
    events = await collect(stream)
    assert stream.result.output == "Order status: delivered."
    first = script(ModelRequest(messages=[])).model_copy(update={"model_name": "function"})
    expected_first = list(stream_parts(first))
    assert model_parts(events)[: len(expected_first)] == expected_first
    assert isinstance(events[len(expected_first)], ToolReturnPart)
    second = model_parts(events)[len(expected_first) :]
    assert [type(e).__name__ for e in second] == [
        "PartStart",
        "PartDelta",
        "PartEnd",
        "StreamUsage",
    ]
    steps = select(
        durable.target,
        "SELECT step_id, sequence, kind FROM operations WHERE run_id = 's' ORDER BY 2, 1",
    )
    assert steps == [
        ("model.stream", 0, "model_stream"),
        ("tool.call", 0, "tool_call"),
        ("model.stream", 1, "model_stream"),
    ]


async def test_a_stored_response_replays_identically_under_another_chunking(
    durable: Durable,
) -> None:
    # The first process streams with 3-character chunks and stops inside the tool call.
    ran: list[str] = []
    gate = asyncio.Event()
    first = build(3, ran, gate=gate)
    seen: list[StreamEvent] = []

    async def consume() -> None:
        async for event in first.run_stream("Where is A-17?", durable=bind(durable, first)):
            seen.append(event)

    task = asyncio.create_task(consume())
    while not ran:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert select(
        durable.target, "SELECT COUNT(*) FROM operations WHERE step_id = 'model.stream'"
    ) == [(1,)]

    # A new agent whose provider chunks by 11 characters replays request 0 from its record.
    again = build(11, ran)
    stream = again.run_stream("Where is A-17?", durable=bind(durable, again))
    replayed = await collect(stream)
    assert model_parts(replayed)[: len(seen)] == seen
    assert stream.result.output == "Order status: delivered."

    # The whole completed run, streamed again, yields the same events and calls nothing.
    twice = again.run_stream("Where is A-17?", durable=bind(durable, again))
    assert await collect(twice) == replayed
    assert twice.result == stream.result and ran == ["A-17", "A-17"]

    # And a fresh run under a third chunking yields the very same parts.
    fresh = build(1, [])
    third = await collect(fresh.run_stream("Where is A-17?", durable=bind(durable, fresh, "s2")))
    assert third == replayed


async def test_streaming_preflight_needs_the_stream_handler(durable: Durable) -> None:
    agent = build(3, [])
    registry = zincir.HandlerRegistry()
    handlers = Handlers(model_request="m", tool_call="tools")
    serve(registry, agent, handlers)
    binding = DurableBinding(zincir.LocalRuntime(durable.store, registry), "p", handlers)
    with pytest.raises(zincir.MissingDurableHandler, match="model_stream"):
        await collect(agent.run_stream("go", durable=binding))
    assert await durable.store.get_run("p") is None


async def test_deliver_event_delivers_once_and_replays_the_record(durable: Durable) -> None:
    delivered: list[EventDelivery] = []
    agent = Agent(FunctionModel(script), event_sink=delivered.append)
    binding = bind(durable, agent, "ev")
    event = EventDelivery(name="order.refunded", data={"order": "A-17"})
    record = await deliver_event(binding, "notify.customer", 3, event)
    again = await deliver_event(binding, "notify.customer", 3, event.to_dict())
    assert record == again and len(delivered) == 1 and delivered[0] == event
    assert record.invocation.kind == zincir.OperationKind.EVENT_DELIVERY
    assert record.invocation.handler_id == "events"
    with pytest.raises(zincir.InputDrift):
        await deliver_event(binding, "notify.customer", 3, EventDelivery(name="other"))
    no_events = DurableBinding(binding.runtime, "ev", Handlers(model_stream="stream"))
    with pytest.raises(zincir.MissingDurableHandler):
        await deliver_event(no_events, "notify.customer", 4, event)
    with pytest.raises(zincir.InvalidInvocation):
        await deliver_event(binding, "", 5, event)


async def test_hooks_observe_replays_locally(durable: Durable, tmp_path: Path) -> None:
    seen: list[int] = []

    class Watch(AgentHooks):
        async def on_model_response(self, number: int, response: ModelResponse) -> None:
            seen.append(number)

    ran: list[str] = []
    agent = Agent(
        FunctionModel(script, chunked(4)),
        name="hooked",
        tools=build(4, ran).toolsets[0].tools,
        hooks=[Watch()],
    )
    await collect(agent.run_stream("go", durable=bind(durable, agent, "h")))
    await collect(agent.run_stream("go", durable=bind(durable, agent, "h")))
    assert seen == [0, 1, 0, 1] and ran == ["A-17"]


async def test_a_run_keeps_the_mode_it_started_in(durable: Durable) -> None:
    ran: list[str] = []
    gate = asyncio.Event()
    agent = build(1, ran, gate=gate)
    both = Handlers(
        model_request="request", model_stream="stream", tool_call="tools", event_delivery="events"
    )

    def bind_both(run_id: str) -> DurableBinding:
        registry = zincir.HandlerRegistry()
        serve(registry, agent, both)
        return DurableBinding(zincir.LocalRuntime(durable.store, registry), run_id, both)

    streaming = asyncio.create_task(collect(agent.run_stream("go", durable=bind_both("streamed"))))
    while not ran:  # the streamed run is inside its tool call: unfinished
        await asyncio.sleep(0.01)
    with pytest.raises(zincir.InvalidInput, match="started with run_stream\\(\\)"):
        await agent.run("go", durable=bind_both("streamed"))
    gate.set()
    await streaming
    plain = await agent.run("go", durable=bind_both("plain"))
    with pytest.raises(zincir.InvalidInput, match="started with run\\(\\)"):
        await collect(agent.run_stream("go", durable=bind_both("plain")))
    calls = len(ran)
    assert (await agent.run("go", durable=bind_both("plain"))).output == plain.output
    assert len(ran) == calls  # the refusals and the replay asked nothing again


async def test_a_finished_streamed_run_asked_with_run_returns_its_output(
    durable: Durable,
) -> None:
    ran: list[str] = []
    agent = build(1, ran)
    both = Handlers(model_request="request", model_stream="stream", tool_call="tools")
    registry = zincir.HandlerRegistry()
    serve(registry, agent, both)
    binding = DurableBinding(zincir.LocalRuntime(durable.store, registry), "done", both)
    events = await collect(agent.run_stream("go", durable=binding))
    assert events and ran == ["A-17"]
    again = await agent.run("go", durable=binding)
    assert again.output == "Order status: delivered."
    assert ran == ["A-17"]  # the stored result, nothing asked again
