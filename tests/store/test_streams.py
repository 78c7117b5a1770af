"""A run's durable stream and trace context, on every backend: gapless offsets, keyed items
stored once, reads from any offset, the fence, pruning, compaction and PostgreSQL's wake."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

import zincir
from zincir import FencedOut, InvalidInput
from zincir.runs._dry_store import DryStore, ReplayStopped
from zincir.store import Lease, NewStreamItem, Store, StreamItemRow, as_store
from zincir.store._readonly import open_read_only

TTL = timedelta(seconds=30)
TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def item(kind: str, key: str | None = None, **payload: object) -> NewStreamItem:
    return NewStreamItem(kind, json.dumps(payload), key)


def shape(rows: list[StreamItemRow]) -> list[tuple[int, str, str | None, dict[str, object]]]:
    return [(row.offset, row.kind, row.key, json.loads(row.payload_json)) for row in rows]


@pytest.fixture
async def lease(store: Store) -> Lease:
    return await store.create_run("s", name="streamer", owner="one", ttl=TTL)


@pytest.fixture
async def other(store_url: str) -> AsyncIterator[Store]:
    """A second store on the same database, as another process would hold."""
    second = zincir.open_store(store_url)
    yield second
    await second.close()


async def test_offsets_are_gapless_per_run_in_append_order(store: Store, lease: Lease) -> None:
    assert await store.append_stream(lease, [item("part_delta", request=1, n=1)]) == [1]
    assert await store.append_stream(
        lease, [item("part_delta", request=1, n=n) for n in (2, 3, 4)], durable=False
    ) == [2, 3, 4]
    second = await store.create_run("t", name="streamer", owner="one", ttl=TTL)
    assert await store.append_stream(second, [item("part_delta", n=1)]) == [1]  # its own count
    final = item("result", key="result", status="completed")
    assert await store.append_stream(lease, [final]) == [5]
    rows = await store.read_stream("s", 0)
    assert [(row.offset, json.loads(row.payload_json).get("n")) for row in rows] == [
        (1, 1), (2, 2), (3, 3), (4, 4), (5, None)
    ]  # fmt: skip
    assert all(row.run_id == "s" and row.created_at.tzinfo is not None for row in rows)
    assert await store.append_stream(lease, []) == []


async def test_a_large_batch_takes_consecutive_offsets(store: Store, lease: Lease) -> None:
    batch = [item("part_delta", request=1, n=n) for n in range(250)]
    batch.insert(120, item("message", "message:1", request=1))
    batch.insert(180, item("message", "message:1", request=1))  # the same key: skipped
    assert await store.append_stream(lease, batch) == list(range(1, 252))
    rows = await store.read_stream("s", 0, limit=1000)
    assert [json.loads(row.payload_json).get("n") for row in rows][118:123] == [
        118,
        119,
        None,
        120,
        121,
    ]


async def test_a_keyed_item_is_stored_once(store: Store, lease: Lease) -> None:
    first = [item("message", "message:1", request=1, v="first"), item("part_delta", request=2)]
    assert await store.append_stream(lease, first) == [1, 2]
    again = [
        item("tool_result", "tool_result:c1", request=1),
        item("message", "message:1", request=1, v="replayed"),  # skipped: no offset used
        item("tool_result", "tool_result:c1", request=1, v="twice in a batch"),  # skipped
        item("part_delta", request=2),
    ]
    assert await store.append_stream(lease, again) == [3, 4]
    rows = shape(await store.read_stream("s", 0))
    assert rows == [
        (1, "message", "message:1", {"request": 1, "v": "first"}),
        (2, "part_delta", None, {"request": 2}),
        (3, "tool_result", "tool_result:c1", {"request": 1}),
        (4, "part_delta", None, {"request": 2}),
    ]
    assert await store.append_stream(lease, [item("message", "message:1", request=1)]) == []


async def test_every_offset_reads_the_same_suffix(store: Store, lease: Lease) -> None:
    for batch in range(4):
        await store.append_stream(lease, [item("part_delta", b=batch, i=i) for i in range(3)])
    whole = await store.read_stream("s", 0)
    assert [row.offset for row in whole] == list(range(1, 13))
    for after in range(0, 14):
        assert await store.read_stream("s", after) == whole[after:]
        assert await store.read_stream("s", after, limit=5) == whole[after : after + 5]
    assert await store.read_stream("missing", 0) == []
    with pytest.raises(InvalidInput, match="after"):
        await store.read_stream("s", -1)
    with pytest.raises(InvalidInput, match="limit"):
        await store.read_stream("s", 0, limit=0)


async def test_the_tail_is_the_last_item(store: Store, lease: Lease) -> None:
    assert await store.stream_tail("s") is None
    await store.append_stream(lease, [item("part_start", request=1), item("part_end", request=1)])
    tail = await store.stream_tail("s")
    assert tail is not None and (tail.offset, tail.kind) == (2, "part_end")


async def test_a_fenced_out_owner_stores_nothing(store: Store, lease: Lease) -> None:
    await store.append_stream(lease, [item("part_delta", request=1)])
    newer = await store.acquire_run("s", owner="two", ttl=TTL, force=True)
    with pytest.raises(FencedOut):
        await store.append_stream(lease, [item("part_delta", request=1), item("void", "void:1:1")])
    assert [row.offset for row in await store.read_stream("s", 0)] == [1]
    assert await store.append_stream(newer, [item("void", "void:1:1", request=1)]) == [2]


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (NewStreamItem("", "{}"), "kind of stream item 1 must not be empty"),
        (NewStreamItem("part_delta", "not json"), "payload of stream item 1 is not strict JSON"),
        (NewStreamItem("part_delta", "[1, 2]"), "payload of stream item 1 must be a JSON object"),
        (NewStreamItem("part_delta", b"{}"), "payload of stream item 1 must be JSON text"),  # type: ignore[arg-type]
        (NewStreamItem("message", "{}", ""), "key of stream item 1 must not be empty"),
        ({"kind": "part_delta"}, "stream item 1 must be a NewStreamItem"),
    ],
)
async def test_bad_items_are_refused_with_nothing_stored(
    store: Store, lease: Lease, bad: NewStreamItem, problem: str
) -> None:
    with pytest.raises(InvalidInput, match=problem) as raised:
        await store.append_stream(lease, [item("part_delta", request=1), bad])
    assert raised.value.run_id == "s" and "[run s]" in str(raised.value)
    assert await store.read_stream("s", 0) == []
    assert await store.append_stream(lease, [item("part_delta", request=1)]) == [1]


def _appender(url: str, lease: Lease, name: str) -> list[int]:
    """Append 25 batches of 3 under ``lease`` from a store and event loop of this thread's
    own (a store runs a call inline when it has nothing else in flight, so appenders that
    share a loop would take turns)."""

    async def run() -> list[int]:
        target = zincir.open_store(url)
        try:
            offsets: list[int] = []
            for n in range(25):
                batch = [item("part_delta", who=name, n=n, i=i) for i in range(3)]
                offsets += await target.append_stream(lease, batch, durable=n % 2 == 0)
            return offsets
        finally:
            await target.close()

    return asyncio.run(run())


async def test_concurrent_appenders_under_one_lease_keep_offsets_gapless(
    store: Store, store_url: str, lease: Lease
) -> None:
    got = await asyncio.gather(
        *(asyncio.to_thread(_appender, store_url, lease, name) for name in "abcd")
    )
    assert sorted(offset for offsets in got for offset in offsets) == list(range(1, 301))
    rows = await store.read_stream("s", 0, limit=1000)
    assert [row.offset for row in rows] == list(range(1, 301))
    by_writer: dict[str, list[int]] = {}
    for row in rows:
        payload = json.loads(row.payload_json)
        by_writer.setdefault(payload["who"], []).append(payload["n"] * 3 + payload["i"])
    assert all(order == list(range(75)) for order in by_writer.values())  # each in its order


async def test_prune_removes_stream_and_trace(store: Store, lease: Lease) -> None:
    await store.append_stream(lease, [item("part_delta", request=1)])
    assert await store.save_trace_context("s", TRACE) == TRACE
    kept = await store.create_run("kept", name="streamer", owner="one", ttl=TTL)
    await store.append_stream(kept, [item("part_delta", request=1)])
    await store.save_trace_context("kept", TRACE)
    await store.finish_run(lease, "completed", result_json="{}")
    report = await store.prune_runs(
        before=store.now() + timedelta(hours=1), statuses=["completed"], max_events=100
    )
    assert report.run_ids == ["s"]
    assert await store.read_stream("s", 0) == [] and await store.stream_tail("s") is None
    assert await store.load_trace_context("s") is None
    assert len(await store.read_stream("kept", 0)) == 1
    assert await store.load_trace_context("kept") == TRACE


async def test_compaction_drops_the_deltas_of_finished_requests(store: Store, lease: Lease) -> None:
    r1 = [item("part_start", request=1, index=0), item("part_delta", request=1, index=0)]
    r1 += [item("part_end", request=1, index=0), item("message", "message:1", request=1)]
    r2 = [item("part_start", request=2, index=0), item("void", "void:2:5", request=2)]
    r2 += [item("part_start", request=2, index=0), item("part_delta", request=2, index=0)]
    tools = [item("tool_result", "tool_result:c", request=2), item("event", "event:x#1")]
    r2 += [item("message", "message:2", request=2), *tools]
    r3 = [item("part_start", request=3, index=0), item("part_delta", request=3, index=0)]
    for batch in (r1, r2, r3):
        await store.append_stream(lease, batch)
    before = shape(await store.read_stream("s", 0))
    report = await store.compact_run("s", max_events=3)  # windows of three offsets
    assert report.stream_deltas == 7
    after = shape(await store.read_stream("s", 0))
    assert [row[0] for row in after] == [4, 9, 10, 11, 12, 13]
    assert after == [row for row in before if row[0] in (4, 9, 10, 11, 12, 13)]
    assert (await store.compact_run("s", max_events=3)).stream_deltas == 0
    assert await store.append_stream(lease, [item("part_end", request=3)]) == [14]


async def test_trace_context_is_saved_once(store: Store) -> None:
    assert await store.load_trace_context("s") is None
    assert await store.save_trace_context("s", TRACE) == TRACE
    later = "00-" + "1" * 32 + "-" + "2" * 16 + "-00"
    assert await store.save_trace_context("s", later) == TRACE  # the first save wins
    assert await store.load_trace_context("s") == TRACE
    with pytest.raises(InvalidInput, match="traceparent"):
        await store.save_trace_context("s", "not-a-traceparent")


async def test_the_read_only_view_reads_the_stream(
    store: Store, store_url: str, lease: Lease
) -> None:
    await store.append_stream(lease, [item("part_delta", request=1, n=n) for n in range(5)])
    view = open_read_only(store_url)
    with view.snapshot() as snapshot:
        assert snapshot.read_stream("s", 2) == await store.read_stream("s", 2)
        assert snapshot.read_stream("s", 0, limit=2) == await store.read_stream("s", 0, limit=2)
        assert snapshot.stream_tail("s") == await store.stream_tail("s")
        assert snapshot.stream_tail("missing") is None


async def test_the_dry_store_reads_the_stream_and_refuses_appends(
    store: Store, lease: Lease
) -> None:
    await store.append_stream(lease, [item("part_delta", request=1)])
    await store.save_trace_context("s", TRACE)
    dry_lease = Lease("s", "zincir-check-compat", lease.token + 1, lease.ttl)
    dry = as_store(DryStore(store, dry_lease, await store.list_events("s"), {}, store.path))
    assert await dry.read_stream("s", 0) == await store.read_stream("s", 0)
    assert await dry.stream_tail("s") == await store.stream_tail("s")
    assert await dry.load_trace_context("s") == TRACE
    with pytest.raises(ReplayStopped):
        await dry.append_stream(dry_lease, [item("part_delta", request=1)])
    with pytest.raises(ReplayStopped):
        await dry.save_trace_context("s", TRACE)
    assert len(await store.read_stream("s", 0)) == 1


async def test_an_append_wakes_the_runs_readers(
    store: Store, other: Store, lease: Lease, backend: str
) -> None:
    if backend != "postgres":
        pytest.skip("SQLite's readers poll")

    async def append_soon() -> None:
        await asyncio.sleep(0.3)
        await other.append_stream(lease, [item("part_delta", request=1)], durable=False)

    started = time.monotonic()
    task = asyncio.ensure_future(append_soon())
    assert await store.wait_for_wake("s", 20) is True
    await task
    assert time.monotonic() - started < 5  # woken by NOTIFY, not the 20 s timeout
    assert await store.wait_for_wake("s", 0.3) is False  # nothing more appended
