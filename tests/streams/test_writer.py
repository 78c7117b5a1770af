"""StreamWriter: deltas in batches, boundary items durable, every write fenced."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

import zincir
from zincir.payloads import PartDelta, PartEnd, PartStart, StreamPart
from zincir.store import Store
from zincir.streams import read
from zincir.streams._writer import StreamWriter

TTL = timedelta(seconds=30)


async def kinds(store: Store, run_id: str) -> list[str]:
    return [row.kind for row in await store.read_stream(run_id, 0, 10_000)]


async def test_deltas_commit_a_batch_at_a_time(store: Store) -> None:
    lease = await store.create_run("w", name="w", owner="one", ttl=TTL)
    writer = StreamWriter(store, lease)
    for index in range(200):
        await writer.add(0, "part_delta", {"request": 0, "index": 0, "delta": f"t{index}"})
    assert writer.commits == 3  # three full batches; the last 8 wait for the interval
    await asyncio.sleep(0.2)
    assert writer.commits == 4
    # each batch's text is one item, the text itself whole and in order
    rows = await store.read_stream("w", 0, 10_000)
    assert [row.kind for row in rows] == ["part_delta"] * 4
    text = "".join(json.loads(row.payload_json)["delta"] for row in rows)
    assert text == "".join(f"t{index}" for index in range(200))
    await writer.put("message", {"request": 0, "response": {"parts": []}}, "message:0")
    assert writer.commits == 5


async def test_a_boundary_item_takes_the_buffered_deltas_with_it(store: Store) -> None:
    lease = await store.create_run("w", name="w", owner="one", ttl=TTL)
    writer = StreamWriter(store, lease, interval=60)
    await writer.add(0, "part_start", {"request": 0, "index": 0, "part_kind": "text"})
    await writer.add(0, "part_delta", {"request": 0, "index": 0, "delta": "hi"})
    assert await writer.put("message", {"request": 0, "response": {}}, "message:0") == 3
    assert writer.commits == 1
    assert await writer.put("message", {"request": 0, "response": {}}, "message:0") is None
    assert await kinds(store, "w") == ["part_start", "part_delta", "message"]


async def test_a_dead_attempts_deltas_are_voided_once(store: Store) -> None:
    lease = await store.create_run("w", name="w", owner="one", ttl=TTL)
    dead = StreamWriter(store, lease)
    await dead.add(2, "part_start", {"request": 2, "index": 0, "part_kind": "text"})
    await dead.add(2, "part_delta", {"request": 2, "index": 0, "delta": "half"})
    await dead.flush()
    taken = await store.acquire_run("w", owner="two", ttl=TTL, force=True)
    writer = StreamWriter(store, taken)
    assert await writer.void_open(1) is None  # another request's: nothing to void
    assert await writer.void_open(2) == 3
    assert await writer.void_open(2) is None
    row = await store.stream_tail("w")
    assert row is not None and row.key == "void:2:2"


async def test_a_fenced_out_owners_writes_are_refused(store: Store) -> None:
    lease = await store.create_run("w", name="w", owner="one", ttl=TTL)
    old = StreamWriter(store, lease)
    await old.put("event", {"step_id": "s", "sequence": 0, "event": {}}, "event:s#0")
    await store.acquire_run("w", owner="two", ttl=TTL, force=True)
    with pytest.raises(zincir.FencedOut):
        await old.put("message", {"request": 0, "response": {}}, "message:0")
    await old.add(0, "part_delta", {"request": 0, "index": 0, "delta": "x"})
    with pytest.raises(zincir.FencedOut):
        await old.flush()

    async def parts() -> AsyncIterator[StreamPart]:
        yield PartStart(index=0, part_kind="text")
        yield PartDelta(index=0, delta="x")
        yield PartEnd(index=0)

    # a handler's tee never fails its model request: the parts go on, unwritten
    passed = [part async for part in old.tee(0, parts())]
    await asyncio.sleep(0.1)
    assert len(passed) == 3 and await kinds(store, "w") == ["event"]


async def test_a_reader_ends_at_a_terminal_run_without_a_result(store: Store) -> None:
    lease = await store.create_run("w", name="w", owner="one", ttl=TTL)
    writer = StreamWriter(store, lease)
    await writer.add(0, "part_start", {"request": 0, "index": 0, "part_kind": "text"})
    await writer.flush()
    got: list[Any] = []

    async def follow() -> None:
        async for item in read(store, "w"):
            got.append(item)

    follower = asyncio.ensure_future(follow())
    await asyncio.sleep(0.1)
    assert not follower.done() and [item.kind for item in got] == ["part_start"]
    await store.finish_run(lease, "failed", error="the writer died before its result")
    await asyncio.wait_for(follower, 10)
    assert [item.kind for item in got] == ["part_start"]


async def test_a_replayed_turns_items_are_not_written_again(store: Store) -> None:
    """A new writer on a stream whose last item is of model request 5 writes nothing for
    requests before it (one owner appends in the loop's order), dedupes request 5's by key,
    and writes request 6's: a long run's replay costs no write a turn."""
    lease = await store.create_run("w", name="w", owner="one", ttl=TTL)
    first = StreamWriter(store, lease)
    for request in range(6):
        await first.put("message", {"request": request, "response": {}}, f"message:{request}")
    await first.put(
        "tool_result",
        {"request": 5, "tool_call_id": "c5", "tool_name": "t", "content": "", "is_error": False},
        "tool_result:c5",
    )
    calls: list[int] = []
    append = store.append_stream

    async def counting(lease: Any, items: Any, *, durable: bool = True) -> list[int]:
        calls.append(len(items))
        return await append(lease, items, durable=durable)

    store.append_stream = counting  # type: ignore[method-assign]
    again = StreamWriter(store, lease)
    for request in range(5):
        assert await again.put("message", {"request": request}, f"message:{request}") is None
    assert calls == []
    assert await again.put("message", {"request": 5}, "message:5") is None  # by its key
    assert await again.put("message", {"request": 6, "response": {}}, "message:6") == 8
    assert calls == [1, 1]
