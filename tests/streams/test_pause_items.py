"""The ``paused`` and ``event`` items of a streamed run: a pause for an approval ends the
stream until a decision, and an application event sent from the run's loop joins it once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.agent.openai_server import ChatServer
from tests.streams.chat import PROMPT, after_prompt, answer, call_reply, fold, text_reply
from tests.streams.test_agent_stream import items_of, shape
from zincir.agent import (
    Agent,
    AgentHooks,
    Approve,
    DurableBinding,
    Runner,
    deliver_event,
    tool,
)
from zincir.agent._openai import OpenAIChatModel
from zincir.payloads import EventDelivery, ToolReturnPart
from zincir.store import Store
from zincir.streams import StreamItem


async def lookup(city: str) -> dict[str, Any]:
    """Look up the weather of a city."""
    return {"city": city, "sky": "clear"}


def approved_agent(server: ChatServer) -> Agent:
    """The weather agent whose ``lookup`` waits for a person's approval."""
    guarded = tool(name="lookup", requires_approval=True)(lookup)
    return Agent(OpenAIChatModel("gpt-test", server.client()), name="weather", tools=[guarded])


async def test_a_pause_is_the_streams_last_item_until_a_decision(
    store: Store, server: ChatServer
) -> None:
    server.script(call_reply(), text_reply(answer(5)))
    runner = Runner(store, [approved_agent(server)])
    stream = runner.run_stream("weather", PROMPT, run_id="guarded")
    async for _ in stream:
        pass
    paused = stream.result.paused
    assert paused is not None and [call.call_id for call in paused.calls] == ["call-oslo"]
    items = await items_of_paused(store, "guarded")
    assert shape(items) == ["deltas", "message", "paused"]
    message, pause = items[-2], items[-1]
    assert pause.payload == {
        "request": message.payload["request"],
        "calls": [
            {
                "call_id": "call-oslo",
                "tool": "lookup",
                "arguments": {"city": "Oslo"},
                "sequence": paused.calls[0].sequence,
                "args_sha256": paused.calls[0].args_sha256,
                "execution": paused.calls[0].execution,
            }
        ],
    }
    tail = await store.stream_tail("guarded")
    assert tail is not None and tail.key == f"paused:{paused.request_number}:0"
    assert tail.offset == pause.offset

    # Until a decision, nothing follows the pause, even when the run is resumed undecided.
    again = await runner.resume("guarded")
    assert again.paused is not None and len(server.replies) == 1  # the answer, unasked
    await asyncio.sleep(0.2)
    assert await items_of_paused(store, "guarded") == items

    # Approved: the tool's result, the answer and the result follow the pause.
    result = await runner.resume("guarded", {"call-oslo": Approve()})
    assert result.paused is None and result.output == "".join(answer(5))
    whole = await items_of(store, "guarded")
    assert whole[: len(items)] == items
    assert shape(whole[len(items) :]) == ["tool_result", "deltas", "message", "result"]
    assert whole[len(items)].payload == {
        "request": message.payload["request"],
        "tool_call_id": "call-oslo",
        "tool_name": "lookup",
        "content": {"city": "Oslo", "sky": "clear"},
        "is_error": False,
    }
    assert [item.offset for item in whole] == list(range(1, len(whole) + 1))
    folded = fold(whole)
    assert folded.messages == after_prompt(result.messages) and not folded.partial
    assert folded.result == {"status": "completed", "output": result.output}

    # Resumed again, with or without the decision, the finished run appends nothing.
    assert (await runner.resume("guarded")).output == result.output
    assert (await runner.resume("guarded", {"call-oslo": Approve()})).output == result.output
    assert await items_of(store, "guarded") == whole


async def items_of_paused(store: Store, run_id: str) -> list[StreamItem]:
    """The items of a parked run's stream so far (``read`` would wait for more)."""
    rows = await store.read_stream(run_id, 0, 10_000)
    return [StreamItem(row.offset, row.kind, json.loads(row.payload_json)) for row in rows]


class Crash(BaseException):
    """The process dies in a hook, after the hook's event was delivered."""


class Announce(AgentHooks):
    """Announces each tool result as an application event, once (``deliver_event``); the
    first time, the process dies right after."""

    def __init__(self) -> None:
        self.binding: DurableBinding | None = None
        self.crash = True

    async def on_tool_return(self, part: ToolReturnPart) -> None:
        assert self.binding is not None
        event = EventDelivery(name="weather.looked_up", data={"call": part.tool_call_id})
        await deliver_event(self.binding, "announce.lookup", 7, event)
        if self.crash:
            self.crash = False
            raise Crash


async def test_an_event_from_the_loop_is_one_item_even_when_replayed(
    store: Store, server: ChatServer
) -> None:
    delivered: list[EventDelivery] = []
    hook = Announce()
    weather = Agent(
        OpenAIChatModel("gpt-test", server.client()),
        name="weather",
        tools=[tool(name="lookup")(lookup)],
        hooks=[hook],
        event_sink=delivered.append,
    )
    runner = Runner(store, [weather])
    hook.binding = DurableBinding(runner.runtime, "announced", Runner.handlers_for(weather))
    server.script(call_reply(), text_reply(answer(5)))
    with pytest.raises(Crash):
        async for _ in runner.run_stream("weather", PROMPT, run_id="announced"):
            pass
    first = await items_of_paused(store, "announced")
    assert shape(first) == ["deltas", "message", "event"] and len(delivered) == 1
    step_id = hook.binding.step_id("announce.lookup")
    assert first[-1].payload == {"step_id": step_id, "sequence": 7, "event": delivered[0].to_dict()}
    assert delivered[0].data == {"call": "call-oslo"}
    tail = await store.stream_tail("announced")
    assert tail is not None and tail.key == f"event:{step_id}#7"

    # Resumed, the hook sends the event again: its stored record, and no second item.
    result = await runner.resume("announced")
    assert result.output == "".join(answer(5)) and len(delivered) == 1
    whole = await items_of(store, "announced")
    assert whole[: len(first)] == first
    assert shape(whole[len(first) :]) == ["tool_result", "deltas", "message", "result"]
    assert [item.kind for item in whole].count("event") == 1
    assert [item.offset for item in whole] == list(range(1, len(whole) + 1))
    folded = fold(whole)
    assert folded.messages == after_prompt(result.messages) and not folded.partial
