"""An agent run's durable stream: what ``run_stream`` yields, appended and read back."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import zincir
from tests.agent.openai_server import ChatServer, Reply, completion, tool_call
from tests.streams.chat import (
    PROMPT,
    Folded,
    after_prompt,
    agent,
    answer,
    call_reply,
    fold,
    text_reply,
)
from zincir.agent import Runner
from zincir.store import Store
from zincir.streams import StreamItem, read


async def items_of(store: Store, run_id: str, after: int = 0) -> list[StreamItem]:
    return [item async for item in read(store, run_id, after)]


async def streamed_run(
    store: Store, server: ChatServer, run_id: str, **options: Any
) -> zincir.agent.AgentRunResult:
    server.script(call_reply(), text_reply(answer()))
    runner = Runner(store, [agent(server.client())], **options)
    stream = runner.run_stream("weather", PROMPT, run_id=run_id)
    async for _ in stream:
        pass
    return stream.result


def shape(items: list[StreamItem]) -> list[str]:
    """The kinds in order, each run of deltas as one ``deltas``."""
    kinds: list[str] = []
    for item in items:
        kind = "deltas" if item.kind in ("part_start", "part_delta", "part_end") else item.kind
        if not (kind == "deltas" and kinds and kinds[-1] == "deltas"):
            kinds.append(kind)
    return kinds


async def test_a_streamed_run_appends_its_deltas_messages_results(
    store: Store, server: ChatServer
) -> None:
    result = await streamed_run(store, server, "oslo")
    items = await items_of(store, "oslo")
    assert [item.offset for item in items] == list(range(1, len(items) + 1))
    assert shape(items) == ["deltas", "message", "tool_result", "deltas", "message", "result"]
    deltas = [item.payload["delta"] for item in items if item.kind == "part_delta"]
    answered = [
        item.payload["delta"]
        for item in items
        if item.payload.get("request") == 1 and item.kind == "part_delta"
    ]
    assert "".join(answered) == "".join(answer())
    # a batch's text of one part is one item: far fewer items than the model's chunks
    assert 1 <= len(answered) < len(answer()) // 10 and len(deltas) > len(answered)
    start = next(item.payload for item in items if item.kind == "part_start")
    assert start == {
        "request": 0,
        "index": 0,
        "part_kind": "tool_call",
        "tool_call_id": "call-oslo",
        "tool_name": "lookup",
    }
    tool_result = next(item.payload for item in items if item.kind == "tool_result")
    assert tool_result == {
        "request": 0,
        "tool_call_id": "call-oslo",
        "tool_name": "lookup",
        "content": {"city": "Oslo", "sky": "clear"},
        "is_error": False,
    }
    assert items[-1].payload == {"status": "completed", "output": result.output}
    folded = fold(items)
    assert folded.messages == after_prompt(result.messages) and not folded.partial
    # before its message, the deltas of request 1 built exactly its text
    live = Folded()
    for item in items:
        if item.kind == "message" and item.payload["request"] == 1:
            assert live.text(1) == result.output
        live.apply(item)


async def test_read_from_every_offset_yields_the_same_suffix(
    store: Store, server: ChatServer
) -> None:
    await streamed_run(store, server, "suffix")
    items = await items_of(store, "suffix")
    for offset in range(len(items) + 1):
        assert await items_of(store, "suffix", offset) == items[offset:]


async def test_two_readers_follow_the_writer_to_the_end(
    store: Store, server: ChatServer, backend: str
) -> None:
    woken: list[bool] = []
    waiting = store.wait_for_wake

    async def wait_for_wake(run_id: str | None, timeout: float) -> bool:
        woken.append(await waiting(run_id, timeout))
        return woken[-1]

    store.wait_for_wake = wait_for_wake  # type: ignore[method-assign]

    async def reader() -> list[StreamItem]:
        while True:  # started before the run exists
            try:
                return await items_of(store, "shared")
            except zincir.RunNotFound:
                await asyncio.sleep(0.005)

    readers = [asyncio.ensure_future(reader()) for _ in range(2)]
    await asyncio.sleep(0.05)
    result = await streamed_run(store, server, "shared")
    first, second = await asyncio.wait_for(asyncio.gather(*readers), 30)
    assert first == second == await items_of(store, "shared")
    assert fold(first).messages == after_prompt(result.messages)
    assert woken, "the readers never waited: they did not follow the run live"
    if backend == "postgres":
        assert any(woken), "no reader was woken by NOTIFY"


async def test_deltas_are_written_in_batches(store: Store, server: ChatServer) -> None:
    calls: list[tuple[int, bool]] = []
    append = store.append_stream

    async def counting(lease: Any, items: Any, *, durable: bool = True) -> list[int]:
        calls.append((len(items), durable))
        return await append(lease, items, durable=durable)

    store.append_stream = counting  # type: ignore[method-assign]
    await streamed_run(store, server, "batched")
    items = await items_of(store, "batched")
    assert sum(size for size, _ in calls) == len(items)
    # the answer came in 200 chunks: a commit per batch of 64 (or per 50 ms), and the text
    # a part gained within a batch is one item
    assert len(calls) <= len(answer()) // 10, calls
    texts = [item for item in items if item.kind == "part_delta" and item.payload["request"] == 1]
    assert len(texts) <= len(answer()) // 64 + 2 and len(texts) < len(calls)
    assert max(size for size, _ in calls) <= 4  # a start, a delta, an end, a boundary item
    # the boundary items are durable, the batches of deltas alone are not
    boundaries = {"message", "tool_result", "result"}
    assert sum(durable for _, durable in calls) == sum(item.kind in boundaries for item in items)


async def test_a_finished_run_run_again_appends_nothing(store: Store, server: ChatServer) -> None:
    result = await streamed_run(store, server, "again")
    items = await items_of(store, "again")
    runner = Runner(store, [agent(server.client())])
    stream = runner.run_stream("weather", PROMPT, run_id="again")
    replayed = [event async for event in stream]
    assert replayed and stream.result.output == result.output
    assert (await runner.resume("again")).output == result.output
    assert await items_of(store, "again") == items


async def test_run_and_a_stream_turned_off_append_nothing(store: Store, server: ChatServer) -> None:
    await streamed_run(store, server, "quiet", durable_stream=False)
    assert await items_of(store, "quiet") == []
    server.script(call_reply(), text_reply(answer(3)))
    runner = Runner(store, [agent(server.client())])
    with pytest.raises(zincir.InvalidInput):
        Runner(store, [agent(server.client())], durable_stream="yes")  # type: ignore[arg-type]
    # a non-streamed run asks with model.request: it has no deltas and writes no stream
    server.replies.clear()
    server.script(
        Reply(body=completion(None, [tool_call("call-oslo", "lookup", '{"city": "Oslo"}')])),
        Reply(body=completion("Clear in Oslo.")),
    )
    result = await runner.run("weather", PROMPT, run_id="plain")
    assert result.output == "Clear in Oslo."
    assert await items_of(store, "plain") == []


async def test_an_unknown_run_has_no_stream(store: Store) -> None:
    with pytest.raises(zincir.RunNotFound) as caught:
        await items_of(store, "nobody")
    assert caught.value.run_id == "nobody"
