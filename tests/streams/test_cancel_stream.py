"""A cancelled run's stream ends with a ``result`` item ``{status: "cancelled", reason?}``,
appended by the store's cancel in its transaction; the owner, still running, gets the run's
cancellation at its next write and never writes after that ``result``."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest

import zincir
from tests.agent.openai_server import ChatServer
from tests.streams.chat import PROMPT, answer, call_reply, fold, text_reply
from tests.streams.test_agent_stream import shape
from zincir import RunCancelled
from zincir.agent import Agent, Runner, tool
from zincir.agent._openai import OpenAIChatModel
from zincir.payloads import PartDelta, PartStart, StreamPart
from zincir.store import Lease, NewStreamItem, Store
from zincir.streams import StreamItem, read
from zincir.streams._writer import StreamWriter

TTL = timedelta(seconds=30)


def delta(n: int) -> NewStreamItem:
    return NewStreamItem("part_delta", json.dumps({"request": 0, "index": 0, "delta": f"w{n} "}))


async def items_of(store: Store, run_id: str) -> list[StreamItem]:
    return [item async for item in read(store, run_id)]


async def streamed(store: Store, run_id: str, parent_id: str | None = None) -> Lease:
    """A live run with a few deltas appended under its lease."""
    lease = await store.create_run(run_id, name="s", owner="one", ttl=TTL, parent_id=parent_id)
    start = NewStreamItem("part_start", json.dumps({"request": 0, "index": 0, "part_kind": "text"}))
    await store.append_stream(lease, [start, delta(0), delta(1)], durable=False)
    return lease


async def test_a_cancelled_runs_stream_ends_with_its_result(store: Store) -> None:
    await streamed(store, "c")
    got: list[StreamItem] = []

    async def follow() -> None:
        async for item in read(store, "c"):
            got.append(item)

    follower = asyncio.ensure_future(follow())
    await asyncio.sleep(0.2)
    assert not follower.done() and len(got) == 3  # mid-stream: the reader waits for more
    assert await zincir.cancel_run(store, "c", reason="operator stop") == ["c"]
    await asyncio.wait_for(follower, 10)
    assert [item.kind for item in got] == ["part_start", "part_delta", "part_delta", "result"]
    assert got[-1] == StreamItem(4, "result", {"status": "cancelled", "reason": "operator stop"})
    tail = await store.stream_tail("c")
    assert tail is not None and tail.key == "result" and tail.offset == 4
    assert await items_of(store, "c") == got  # a new reader ends after it too
    assert await items_of(store, "c") and [item async for item in read(store, "c", 4)] == []
    run = await store.get_run("c")
    assert run is not None and run["status"] == "cancelled"


async def test_without_a_reason_the_result_has_none(store: Store) -> None:
    await streamed(store, "c")
    await store.cancel_run("c")
    assert (await items_of(store, "c"))[-1].payload == {"status": "cancelled"}


async def test_a_run_that_never_streamed_gets_no_stream(store: Store) -> None:
    await store.create_run("quiet", name="s", owner="one", ttl=TTL)
    assert await store.cancel_run("quiet", reason="stop") == ["quiet"]
    assert await store.read_stream("quiet", 0) == [] and await store.stream_tail("quiet") is None
    assert await items_of(store, "quiet") == []


async def test_cascade_ends_each_streamed_descendants_stream(store: Store) -> None:
    await streamed(store, "p")
    await streamed(store, "child", parent_id="p")
    await store.create_run("quiet-child", name="s", owner="one", ttl=TTL, parent_id="p")
    await streamed(store, "grandchild", parent_id="child")
    cancelled = await store.cancel_run("p", reason="tree stop", cascade=True)
    assert sorted(cancelled) == ["child", "grandchild", "p", "quiet-child"]
    for run_id in ("p", "child", "grandchild"):
        items = await items_of(store, run_id)
        assert [item.kind for item in items][-2:] == ["part_delta", "result"], run_id
        assert items[-1].payload == {"status": "cancelled", "reason": "tree stop"}
    assert await store.read_stream("quiet-child", 0) == []


async def test_a_cancel_after_the_loops_result_adds_no_second_one(store: Store) -> None:
    lease = await streamed(store, "c")
    done = NewStreamItem("result", json.dumps({"status": "completed", "output": "hi"}), "result")
    await store.append_stream(lease, [done])  # the loop wrote its result, then was cancelled
    await store.cancel_run("c")
    items = await items_of(store, "c")
    assert [item.kind for item in items].count("result") == 1
    assert items[-1].payload == {"status": "completed", "output": "hi"}


async def test_the_owner_after_the_cancel_gets_the_runs_cancellation(store: Store) -> None:
    lease = await store.create_run("c", name="s", owner="one", ttl=TTL)
    writer = StreamWriter(store, lease, interval=60)
    await writer.add(0, "part_start", {"request": 0, "index": 0, "part_kind": "text"})
    await writer.add(0, "part_delta", {"request": 0, "index": 0, "delta": "half"})
    await writer.flush()
    await store.cancel_run("c", reason="stop")
    before = await items_of(store, "c")
    assert [item.kind for item in before] == ["part_start", "part_delta", "result"]

    await writer.add(0, "part_delta", {"request": 0, "index": 0, "delta": " more"})
    with pytest.raises(RunCancelled) as raised:
        await writer.flush()
    assert raised.value.run_id == "c"
    with pytest.raises(RunCancelled):
        await writer.put("message", {"request": 0, "response": {"parts": []}}, "message:0")
    with pytest.raises(RunCancelled):
        await writer.result({"status": "completed", "output": "half"})
    with pytest.raises(RunCancelled):
        await store.append_stream(lease, [delta(2)])

    async def parts() -> Any:
        yield PartStart(index=0, part_kind="text")
        yield PartDelta(index=0, delta="again")

    passed: list[StreamPart] = [part async for part in writer.tee(1, parts())]
    assert len(passed) == 2  # a handler's model request goes on, unwritten
    assert await items_of(store, "c") == before


def _append_until_refused(url: str, lease: Lease) -> tuple[int, type[BaseException]]:
    """Append deltas under ``lease`` from a store of this thread's own until a write is
    refused: (the batches written, the error)."""

    async def run() -> tuple[int, type[BaseException]]:
        owner = zincir.open_store(url)
        written = 0
        try:
            while True:
                await owner.append_stream(lease, [delta(n) for n in range(4)], durable=False)
                written += 1
        except zincir.ZincirError as error:
            return written, type(error)
        finally:
            await owner.close()

    return asyncio.run(run())


async def test_an_owner_appending_while_cancelled_never_writes_after_the_result(
    store: Store, store_url: str
) -> None:
    lease = await streamed(store, "c")
    owner = asyncio.ensure_future(asyncio.to_thread(_append_until_refused, store_url, lease))
    while len(await store.read_stream("c", 0, 100)) < 40:
        await asyncio.sleep(0.01)
    await store.cancel_run("c", reason="stop")
    written, error = await asyncio.wait_for(owner, 30)
    assert written >= 9 and error is RunCancelled
    items = await items_of(store, "c")
    assert items[-1] == StreamItem(len(items), "result", {"status": "cancelled", "reason": "stop"})
    assert len(items) == 3 + 4 * written + 1  # every batch written lies before the result


async def test_a_streamed_run_cancelled_by_its_own_tool_ends_at_the_cancel(
    store: Store, server: ChatServer
) -> None:
    @tool(name="lookup")
    async def lookup(city: str) -> dict[str, Any]:
        """Look up the weather of a city; the run is cancelled meanwhile."""
        await store.cancel_run("doomed", reason="the user left")
        return {"city": city, "sky": "clear"}

    weather = Agent(OpenAIChatModel("gpt-test", server.client()), name="weather", tools=[lookup])
    server.script(call_reply(), text_reply(answer(5)))
    runner = Runner(store, [weather])
    with pytest.raises(RunCancelled):
        async for _ in runner.run_stream("weather", PROMPT, run_id="doomed"):
            pass
    items = await asyncio.wait_for(items_of(store, "doomed"), 10)
    assert shape(items) == ["deltas", "message", "result"]
    assert items[-1].payload == {"status": "cancelled", "reason": "the user left"}
    assert [item.offset for item in items] == list(range(1, len(items) + 1))
    assert fold(items).result == {"status": "cancelled", "reason": "the user left"}
