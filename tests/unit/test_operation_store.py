"""The store's operation records: claims, records and the fence on a run's log.

Temporal's record store is exercised here without a Temporal service: it only speaks to
the store.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

import zincir
from tests.helpers import count
from tests.runtime_conformance import make_invocation
from zincir import AgentContext, FencedOut, InputDrift, RunTerminal, SQLiteStore
from zincir.contract import Failure, Record, Success, encode_record
from zincir.durable._operations import new_operation, stored_outcome
from zincir.store import OperationKey

pytest.importorskip("temporalio")
from zincir.temporal._record_store import load_record, save_record  # noqa: E402

TTL = timedelta(seconds=30)


def done(run_id: str, sequence: int = 0, output: str = '"ok"') -> Record:
    return Record.for_invocation(make_invocation(run_id, sequence=sequence), Success(output))


async def operation_events(store: SQLiteStore, run_id: str) -> list[zincir.store.Event]:
    return [e for e in await store.list_events(run_id) if e.type == "operation_completed"]


# -- the operations of the Store protocol ------------------------------------------------


async def test_claim_renew_count_and_finish(store: SQLiteStore) -> None:
    invocation = make_invocation("run-ops")
    operation = new_operation(invocation)
    claim = await store.claim_operation(operation, owner="a/1", ttl=TTL, owner_prefix="a/")
    assert claim.claimed and claim.row.attempts == 1 and claim.row.status == "claimed"
    other = await store.claim_operation(operation, owner="b/1", ttl=TTL, owner_prefix="b/")
    assert not other.claimed and other.row.claim_owner == "a/1"
    again = await store.claim_operation(operation, owner="a/2", ttl=TTL, owner_prefix="a/")
    assert again.claimed and again.row.attempts == 2  # a stale claim of the same prefix
    assert not await store.renew_operation_claim(operation.key, owner="a/1", ttl=TTL)
    assert await store.renew_operation_claim(operation.key, owner="a/2", ttl=TTL)
    assert await store.count_operation_attempt(operation.key, owner="a/2", ttl=TTL) is None
    record = Record.for_invocation(invocation, Failure("Quota", False))
    outcome = stored_outcome(record, encode_record(record))
    assert await store.finish_operation(operation, outcome, owner="a/2") is None
    row = await store.get_operation(operation.key)
    assert row is not None and (row.status, row.record, row.attempts) == (
        "completed",
        encode_record(record),
        3,
    )
    late = Record.for_invocation(invocation, Success('"late"'))
    kept = await store.finish_operation(
        operation, stored_outcome(late, encode_record(late)), owner="b/1"
    )
    assert kept is not None and kept.record == encode_record(record)  # the first one wins
    assert (await store.claim_operation(operation, owner="c/1", ttl=TTL)).row == kept
    assert await store.count_operation_attempt(operation.key, owner="a/2", ttl=TTL) == kept


async def test_a_claim_for_other_input_changes_nothing(store: SQLiteStore) -> None:
    first = new_operation(make_invocation("run-drift", request={"n": 1}))
    drifted = new_operation(make_invocation("run-drift", request={"n": 2}))
    assert (await store.claim_operation(first, owner="a/1", ttl=timedelta(0))).claimed
    claim = await store.claim_operation(drifted, owner="b/1", ttl=TTL)
    assert not claim.claimed and claim.row.input_digest == first.input_digest
    assert await store.release_operation_claim(first.key, owner="a/1")
    assert await store.get_operation(first.key) is None


async def test_a_claim_records_its_lease_and_dies_with_it(store: SQLiteStore) -> None:
    """Under a lease the claim carries its token; a newer token frees it at once."""
    old = await store.create_run("run-token", name="token", owner="old", ttl=TTL)
    operation = new_operation(make_invocation("run-token"))
    claim = await store.claim_operation(operation, owner="a/1", ttl=TTL, lease=old)
    assert claim.claimed
    assert (claim.row.claim_lease_owner, claim.row.claim_lease_token) == ("old", 1)
    row = await store.get_operation(operation.key)
    assert row is not None and (row.claim_lease_owner, row.claim_lease_token) == ("old", 1)
    assert not row.claim_fenced and row.held_elsewhere("b/", store.now())
    # the same live token, another owner: honoured until it expires
    assert not (await store.claim_operation(operation, owner="b/1", ttl=TTL, lease=old)).claimed
    new = await store.acquire_run("run-token", owner="new", ttl=TTL, force=True)
    row = await store.get_operation(operation.key)
    assert row is not None and row.claim_fenced and not row.held_elsewhere("b/", store.now())
    taken = await store.claim_operation(operation, owner="b/1", ttl=TTL, lease=new)
    assert taken.claimed and taken.row.attempts == 2 and taken.row.claim_lease_token == 2
    assert not await store.renew_operation_claim(operation.key, owner="a/1", ttl=TTL, lease=old)
    record = Record.for_invocation(make_invocation("run-token"), Success('"ok"'))
    outcome = stored_outcome(record, encode_record(record))
    with pytest.raises(FencedOut):
        await store.finish_operation(operation, outcome, owner="a/1", lease=old)
    assert await store.finish_operation(operation, outcome, owner="b/1", lease=new) is None
    [event] = await operation_events(store, "run-token")
    assert event.payload["attempts"] == 2
    row = await store.get_operation(operation.key)
    assert row is not None and (row.status, row.claim_lease_token, row.claim_fenced) == (
        "completed",
        2,
        False,
    )


async def test_a_claim_without_a_lease_is_never_fenced(store: SQLiteStore) -> None:
    old = await store.create_run("run-free", name="free", owner="old", ttl=TTL)
    operation = new_operation(make_invocation("run-free"))
    assert (await store.claim_operation(operation, owner="a/1", ttl=TTL)).claimed
    new = await store.acquire_run("run-free", owner="new", ttl=TTL, force=True)
    assert new.token == old.token + 1
    row = await store.get_operation(operation.key)
    assert row is not None and row.claim_lease_token is None and not row.claim_fenced
    assert not (await store.claim_operation(operation, owner="b/1", ttl=TTL, lease=new)).claimed


# -- Temporal's record store -------------------------------------------------------------


async def test_save_record_without_a_lease_writes_no_log(store: SQLiteStore) -> None:
    ctx = await AgentContext.create(store, "temporal", run_id="run-kept")
    await ctx.close()  # the run exists; this process holds no lease on it
    before = await store.list_events("run-kept")
    record = done("run-kept")
    assert await save_record(store, record) == record
    assert await store.list_events("run-kept") == before
    assert await load_record(store, record.invocation) == record
    assert await save_record(store, done("run-kept", output='"other"')) == record


async def test_save_record_under_a_lease_appends_the_event(store: SQLiteStore) -> None:
    ctx = await AgentContext.create(store, "temporal", run_id="run-leased")
    record = done("run-leased")
    assert await save_record(store, record, store.lease_for("run-leased")) == record
    [event] = await operation_events(store, "run-leased")
    assert event.payload["attempts"] == 1 and event.payload["outcome"] == "success"
    await ctx.close()


@pytest.mark.parametrize("new_owner", ["holds", "finishes"])
async def test_save_record_under_a_lost_lease_stores_nothing(db_path: Path, new_owner: str) -> None:
    old_store, new_store = zincir.open_store(db_path), zincir.open_store(db_path)
    try:
        old_ctx = await AgentContext.create(old_store, "temporal", run_id="run-taken")
        lease = old_store.lease_for("run-taken")
        new_ctx = await AgentContext.force_recover(new_store, "run-taken")
        if new_owner == "finishes":
            await new_ctx.complete()
        before = await new_store.list_events("run-taken")
        with pytest.raises(FencedOut if new_owner == "holds" else RunTerminal):
            await save_record(old_store, done("run-taken"), lease)
        assert await new_store.list_events("run-taken") == before
        assert count(db_path, "operations") == 0
        await new_ctx.close()
        await old_ctx.close()
    finally:
        await old_store.close()
        await new_store.close()


async def test_save_record_refuses_an_unfinished_row_for_other_input(
    store: SQLiteStore,
) -> None:
    claimed = new_operation(make_invocation("run-held", request={"n": 1}))
    assert (await store.claim_operation(claimed, owner="a/1", ttl=TTL)).claimed
    drifted = Record.for_invocation(make_invocation("run-held", request={"n": 2}), Success("1"))
    assert await save_record(store, drifted) is None
    same = Record.for_invocation(make_invocation("run-held", request={"n": 1}), Success("1"))
    assert await save_record(store, same) == same
    row = await store.get_operation(OperationKey("run-held", "tool.call", 0))
    assert row is not None and (row.status, row.claim_owner) == ("completed", None)


async def test_a_local_runtime_record_is_input_drift_for_temporal(store: SQLiteStore) -> None:
    record = done("run-mixed")
    assert await save_record(store, record) == record
    other = Record.for_invocation(make_invocation("run-mixed", request={"n": 9}), Success("1"))
    assert await save_record(store, other) == record  # the completed record wins
    with pytest.raises(InputDrift):
        await zincir.LocalRuntime(store, zincir.durable.HandlerRegistry()).execute(other.invocation)
