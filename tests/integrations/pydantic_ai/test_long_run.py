"""A long pydantic-ai run under ZincirDurability is stored at linear cost: a model request's
record holds a projection of the conversation (its digest and length), never the messages, so
the bytes a turn adds late in a 200-turn run are within 1.1x of early on, with the stream's
restart checkpoints (one small row a unit) included; the run replays calling nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai-slim is in the dev extra")

from pydantic_ai import Agent, RunContext  # noqa: E402
from pydantic_ai.messages import AgentStreamEvent, ModelMessage, ModelResponse  # noqa: E402
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel  # noqa: E402
from pydantic_ai.usage import UsageLimits  # noqa: E402

from tests.helpers import select  # noqa: E402
from tests.store.growth import Growth  # noqa: E402
from zincir.integrations.pydantic_ai import ZincirDurability  # noqa: E402
from zincir.restart import SQLRestartStore  # noqa: E402
from zincir.store import Store  # noqa: E402

TURNS = 200
SECTION = "lorem ipsum dolor sit amet " * 74  # about 2 KB of new text a turn
UNLIMITED = UsageLimits(request_limit=None)


def reader(calls: list[int]) -> FunctionModel:
    """Asks for section n at its n-th response, then answers; counts its calls."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        calls.append(len(messages))
        number = sum(isinstance(message, ModelResponse) for message in messages)
        if number < TURNS:
            arguments = json.dumps({"n": number})
            yield {0: DeltaToolCall(name="read", json_args=arguments, tool_call_id=f"c{number}")}
        else:
            yield "read them all"

    return FunctionModel(stream_function=stream)


def long_agent(store: Store, growth: Growth | None, calls: list[int]) -> Agent[None, str]:
    async def handler(ctx: RunContext[None], events: AsyncIterable[AgentStreamEvent]) -> None:
        async for _ in events:
            pass

    durability = ZincirDurability(
        store, event_stream_handler=handler, restart_store=SQLRestartStore(store)
    )
    agent: Agent[None, str] = Agent(reader(calls), name="reader", capabilities=[durability])

    @agent.tool_plain
    def read(n: int) -> str:
        """Read section n."""
        if growth is not None:
            growth.sample()  # what the turns before this one stored
        return f"section {n}: {SECTION}"

    return agent


@pytest.mark.sqlite_only
async def test_a_long_run_grows_the_store_linearly(store: Store, store_url: str) -> None:
    growth, calls = Growth(store_url), []
    result = await long_agent(store, growth, calls).run(
        "read", run_id="long", usage_limits=UNLIMITED
    )
    assert result.output == "read them all"
    assert len(calls) == TURNS + 1 and len(growth.stored) == TURNS
    early, late = growth.assert_linear()
    assert late < 8_000  # the 2 KB result, the request's and the tool call's rows, events
    # No row holds the conversation: every input is a short projection (the model request's
    # is the messages' digest and count), and no record grows with the turn.
    stored = select(
        store_url,
        "SELECT step_id, sequence, input_json, input_parts, LENGTH(record) FROM operations "
        "WHERE run_id = 'long' ORDER BY step_id, sequence",
    )
    requests = [row for row in stored if row[0].endswith(".model.stream")]
    assert len(requests) == TURNS + 1
    for _, _, text, parts, record in stored:
        assert parts is None and len(text) < 400 and record < 3_000
    last = json.loads(requests[-1][2])
    assert last["message_count"] == 2 * TURNS + 1 and "messages" not in last
    assert max(row[4] for row in requests[-20:]) <= max(row[4] for row in requests[10:30]) + 10
    checkpoints = select(
        store_url, "SELECT MAX(LENGTH(payload)), COUNT(*) FROM restart_checkpoints"
    )[0]
    assert checkpoints[0] < 32  # each stream unit's {"delivered": n}
    # The completed run replays from its records: the model is not called again.
    again: list[int] = []
    replayed = await long_agent(store, None, again).run(
        "read", run_id="long", usage_limits=UNLIMITED
    )
    assert replayed.output == "read them all" and again == []
