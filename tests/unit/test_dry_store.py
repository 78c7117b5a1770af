"""check-compat's dry store: reads pass through, every other operation is refused before it
reaches the store, and the store's list of reads names only real reads."""

from __future__ import annotations

import inspect

import pytest

import zincir
from zincir.runs._dry_store import DryStore, ReplayStopped
from zincir.store import Lease, NewEvent, Store
from zincir.store._protocol import READS

ASYNC_OPERATIONS = {
    name
    for name, member in inspect.getmembers(Store, inspect.iscoroutinefunction)
    if not name.startswith("_")
}


def test_the_reads_are_store_operations_that_take_no_lease() -> None:
    assert READS <= ASYNC_OPERATIONS
    for name in READS:
        assert "lease" not in inspect.signature(getattr(Store, name)).parameters, name


def test_every_store_operation_is_passed_answered_or_refused() -> None:
    for name in ASYNC_OPERATIONS:
        assert inspect.iscoroutinefunction(getattr(DryStore, name)), name


async def test_writes_are_refused_before_they_reach_the_store(store: Store) -> None:
    ctx = await zincir.AgentContext.create(store, name="dry", run_id="d")
    before = await store.list_events("d")
    lease = Lease("d", "zincir-check-compat", ctx.lease.token + 1, ctx.lease.ttl)
    dry = DryStore(store, lease, before, {}, store.path)
    assert isinstance(dry, Store)
    with pytest.raises(ReplayStopped, match="appends events"):
        await dry.append_events(lease, [NewEvent("note", '{"x": 1}')])
    with pytest.raises(ReplayStopped, match="sends 'topic' to run 'd'"):
        await dry.send_message("d", "topic", "{}")
    with pytest.raises(ReplayStopped, match="completes the run"):
        await dry.finish_run(lease, "completed", result_json="1")
    with pytest.raises(ReplayStopped) as stopped:
        await dry.claim_step(lease, "fetch")
    assert stopped.value.new_work and stopped.value.what == "step 'fetch'"
    assert (await dry.get_run("d"))["status"] == "running"
    assert await store.list_events("d") == before
    await ctx.close()
