"""Streaming on ZincirDurability: live events reach the capability's handler inside the
model.stream unit; a replay delivers nothing again and calls no model."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai-slim is in the dev extra")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import AgentStreamEvent, ModelMessage  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.tools import RunContext  # noqa: E402

import zincir  # noqa: E402
from tests.helpers import rows  # noqa: E402
from zincir.integrations.pydantic_ai import ZincirDurability  # noqa: E402


async def test_live_events_inside_the_unit_and_a_silent_replay(db_path: Path) -> None:
    calls: Counter[str] = Counter()
    seen: list[str] = []

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        calls["model"] += 1
        for chunk in ("Refunded ", "4200 ", "cents."):
            yield chunk

    async def handler(ctx: RunContext[None], events: AsyncIterable[AgentStreamEvent]) -> None:
        async for event in events:
            seen.append(event.event_kind)

    async with zincir.open_store(db_path) as store:
        agent: Agent[None, str] = Agent(
            FunctionModel(stream_function=stream),
            name="streamer",
            capabilities=[ZincirDurability(store, event_stream_handler=handler)],
        )
        first = await agent.run("refund", run_id="stream-1")
        live = list(seen)
        again = await agent.run("refund", run_id="stream-1")
        async with agent.run_stream("refund", run_id="stream-1") as streamed:
            text = await streamed.get_output()
    assert first.output == again.output == text == "Refunded 4200 cents."
    assert calls["model"] == 1
    assert live.count("part_delta") == 2 and live[0] == "part_start"  # deltas, live
    assert seen == live  # replays deliver nothing to the handler again
    assert rows(db_path, "SELECT step_id, kind FROM operations") == [
        ("pydantic_ai.streamer.model.stream", "model_stream")
    ]
