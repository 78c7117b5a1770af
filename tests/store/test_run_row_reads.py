"""A run's last seq, update time and lease expiry read exactly while its lease holder
appends (SQLite's holder appends leave the run's row unwritten), each append extends the
lease, and every other writer continues the same gapless log: an outside budget, a cancel,
compaction of the tail."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import zincir
from zincir import AgentContext, Budget, LeaseHeld, Verification, compact_run, set_budget
from zincir._time import to_db
from zincir.store import NewEvent, Store
from zincir.testing import FakeClock


async def _seqs(store: Store, run_id: str) -> list[int]:
    return [event.seq for event in await store.list_events(run_id)]


async def _run_of(store: Store, run_id: str) -> dict[str, Any]:
    run = await store.get_run(run_id)
    assert run is not None
    return dict(run)


async def test_last_seq_and_updated_at_follow_the_holders_appends(
    fake_store: Store, clock: FakeClock
) -> None:
    ctx = await AgentContext.create(fake_store, "agent", run_id="r")
    created = await _run_of(fake_store, "r")
    for n in range(1, 4):
        clock.advance(5)
        last = await fake_store.append_events(ctx.lease, [NewEvent("note", f'{{"n":{n}}}')] * n)
        events = await fake_store.list_events("r")
        assert last == events[-1].seq
        run = await _run_of(fake_store, "r")
        assert run["last_seq"] == last
        assert run["updated_at"] == to_db(events[-1].created_at)
        assert run["updated_at"] > created["updated_at"]
        listed = [row for row in await fake_store.list_runs() if row["id"] == "r"]
        assert (listed[0]["last_seq"], listed[0]["updated_at"]) == (last, run["updated_at"])
    assert await _seqs(fake_store, "r") == list(range(1, 8))
    await ctx.close()
    # Released, the row itself holds the figures.
    run = await _run_of(fake_store, "r")
    assert run["last_seq"] == 7


async def test_each_append_extends_the_lease(fake_store: Store, clock: FakeClock) -> None:
    lease = await fake_store.create_run("r", name="agent", owner="first", ttl=timedelta(seconds=10))
    clock.advance(8)
    await fake_store.append_events(lease, [NewEvent("note", "{}")])
    appended = (await fake_store.list_events("r"))[-1].created_at
    run = await _run_of(fake_store, "r")
    assert run["lease_expires_at"] == to_db(appended + timedelta(seconds=10))
    clock.advance(8)  # 16 s after the acquisition, 8 s after the append: still live
    with pytest.raises(LeaseHeld):
        await fake_store.acquire_run("r", owner="second", ttl=timedelta(seconds=10))
    unclaimed = await fake_store.claim_runs(
        "worker", timedelta(seconds=10), 1, max_attempts=None, backoff=lambda n: timedelta(0)
    )
    assert unclaimed == []
    clock.advance(2.5)
    taken = await fake_store.acquire_run("r", owner="second", ttl=timedelta(seconds=10))
    assert taken.token == lease.token + 1
    run = await _run_of(fake_store, "r")
    assert (run["lease_owner"], run["last_seq"]) == ("second", 2)


async def test_a_write_on_a_clock_stepped_back_sets_the_lease_it_gives(
    fake_store: Store, clock: FakeClock
) -> None:
    lease = await fake_store.create_run("r", name="agent", owner="first", ttl=timedelta(seconds=10))
    clock.now -= timedelta(seconds=6)  # the machine's clock stepped back
    await fake_store.append_events(lease, [NewEvent("note", "{}")])
    run = await _run_of(fake_store, "r")
    assert run["lease_expires_at"] == to_db(clock.now + timedelta(seconds=10))
    assert run["updated_at"] == to_db(clock.now)
    clock.advance(10)  # 4 s past the acquisition's expiry, 10 s past the write
    taken = await fake_store.acquire_run("r", owner="second", ttl=timedelta(seconds=10))
    assert taken.token == lease.token + 1


async def test_writers_beside_the_holder_continue_one_gapless_log(
    store: Store, store_url: str
) -> None:
    ctx = await AgentContext.create(store, "agent", run_id="r")
    await store.append_events(ctx.lease, [NewEvent("note", '{"n":1}')])
    outside = zincir.open_store(store_url)  # another store object: another writer
    try:
        await set_budget(outside, "r", Budget(tokens=1000))
        await store.append_events(ctx.lease, [NewEvent("note", '{"n":2}')] * 2)
        await set_budget(outside, "r", Budget(tokens=2000))
        last = await store.append_events(ctx.lease, [NewEvent("note", '{"n":3}')])
        seqs = await _seqs(store, "r")
        assert seqs == list(range(1, len(seqs) + 1)) and last == seqs[-1]
        types = [event.type for event in await store.list_events("r")]
        assert types.count("budget_set") == 2 and types.count("note") == 4
        assert (await _run_of(outside, "r"))["last_seq"] == last
        await zincir.cancel_run(outside, "r", reason="done here")
        seqs = await _seqs(outside, "r")
        assert seqs == list(range(1, len(seqs) + 1)) and seqs[-1] == last + 1
        assert (await _run_of(outside, "r"))["last_seq"] == last + 1
    finally:
        await outside.close()
    await ctx.close()


async def test_compacting_the_tail_keeps_the_next_seq(store: Store) -> None:
    ctx = await AgentContext.create(store, "agent", run_id="r")
    await ctx.record_response("one", [])
    await ctx.checkpoint({"completed": ["one"]}, lambda c: Verification(True))
    tail = (await _seqs(store, "r"))[-1]
    report = await compact_run(store, "r")
    assert report.archived >= 1
    assert (await _run_of(store, "r"))["last_seq"] == tail
    last = await store.append_events(ctx.lease, [NewEvent("note", "{}")])
    assert last == tail + 1
    assert await _seqs(store, "r") == list(range(1, tail + 2))
    await ctx.close()
