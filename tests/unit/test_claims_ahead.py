"""LocalRuntime's claims ahead: the invocations a record says run next are claimed in the
record's own transaction, run without a claim commit of their own, and are released (never
run) when the caller stops before them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tests.helpers import select
from tests.runtime_conformance import Calls, make_invocation, registry_with
from zincir import AgentContext
from zincir.contract import Invocation, Record
from zincir.durable import LocalRuntime
from zincir.store import Store

RUN = "run-ahead"


def no_entries(record: Record) -> list[Any]:
    return []


def operations(target: str) -> dict[tuple[str, int], tuple[str, int, str, str | None]]:
    """(step id, sequence) -> (status, attempts, created_at, completed_at) of the run."""
    return {
        (str(step), int(sequence)): (str(status), int(attempts), str(created), completed)
        for step, sequence, status, attempts, created, completed in select(
            target,
            "SELECT step_id, sequence, status, attempts, created_at, completed_at "
            "FROM operations WHERE run_id = ?",
            (RUN,),
        )
    }


async def started(store: Store, handler: Calls) -> tuple[AgentContext, LocalRuntime]:
    ctx = await AgentContext.create(store, "ahead", run_id=RUN)
    return ctx, LocalRuntime(store, registry_with(handler), poll_interval=0.01)


async def test_the_next_calls_are_claimed_in_the_records_transaction(
    store: Store, store_url: str
) -> None:
    handler = Calls()
    ctx, runtime = await started(store, handler)
    first = make_invocation(RUN, step_id="model.request", sequence=0)
    following = [make_invocation(RUN, sequence=n, request={"n": n}) for n in (1, 2)]
    try:
        await runtime.execute_and_log(first, no_entries, ahead=lambda record: following)
        rows = operations(store_url)
        completed_at = rows[("model.request", 0)][3]
        for n in (1, 2):
            status, attempts, created, completed = rows[("tool.call", n)]
            assert (status, attempts, completed) == ("claimed", 1, None)
            assert created == completed_at  # the same transaction's time
        claimed = select(
            store_url,
            "SELECT claim_lease_owner, claim_lease_token FROM operations "
            "WHERE run_id = ? AND step_id = 'tool.call'",
            (RUN,),
        )
        assert set(claimed) == {(ctx.lease.owner, ctx.lease.token)}
        for invocation in following:
            record = await runtime.execute(invocation)
            assert record.invocation == invocation
        rows = operations(store_url)
        assert [rows[("tool.call", n)][:2] for n in (1, 2)] == [("completed", 1)] * 2
        assert len(handler.calls) == 3
        events = await store.list_events(RUN)
        assert [event.payload["attempts"] for event in events[1:]] == [1, 1, 1]
    finally:
        await ctx.close()


async def test_a_call_claimed_ahead_runs_without_a_claim_of_its_own(store: Store) -> None:
    handler = Calls()
    ctx, runtime = await started(store, handler)
    following = make_invocation(RUN, sequence=1)
    claims: list[object] = []
    claim = store.claim_operation

    async def counted(*args: Any, **kwargs: Any) -> Any:
        claims.append(args[0].key)
        return await claim(*args, **kwargs)

    store.claim_operation = counted  # type: ignore[method-assign]
    try:
        await runtime.execute_and_log(
            make_invocation(RUN, step_id="model.request"), no_entries, ahead=lambda r: [following]
        )
        await runtime.execute(following)
        assert len(claims) == 1  # the first invocation's own claim, none for the next
    finally:
        await ctx.close()


async def test_a_claim_ahead_for_other_input_is_released_and_claimed_anew(
    store: Store, store_url: str
) -> None:
    handler = Calls()
    ctx, runtime = await started(store, handler)
    planned = make_invocation(RUN, sequence=1, request={"planned": True})
    actual = make_invocation(RUN, sequence=1, request={"planned": False})
    try:
        await runtime.execute_and_log(
            make_invocation(RUN, step_id="model.request"), no_entries, ahead=lambda r: [planned]
        )
        planned_row = select(
            store_url,
            "SELECT input_digest FROM operations WHERE run_id = ? AND sequence = 1",
            (RUN,),
        )
        assert planned_row == [(planned.input_digest(),)]
        record = await runtime.execute(actual)
        assert record.invocation == actual
        assert handler.calls[-1][1] == {"planned": False}
        digest = select(
            store_url,
            "SELECT input_digest, status FROM operations WHERE run_id = ? AND sequence = 1",
            (RUN,),
        )
        assert digest == [(actual.input_digest(), "completed")]
    finally:
        await ctx.close()


async def test_claims_ahead_not_run_are_released(store: Store, store_url: str) -> None:
    handler = Calls()
    ctx, runtime = await started(store, handler)
    following = [make_invocation(RUN, sequence=n) for n in (1, 2)]
    try:
        await runtime.execute_and_log(
            make_invocation(RUN, step_id="model.request"), no_entries, ahead=lambda r: following
        )
        await runtime.execute(following[0])
        assert operations(store_url)[("tool.call", 2)][0] == "claimed"
        await runtime.release_ahead(following)
        rows = operations(store_url)
        assert rows[("tool.call", 1)][0] == "completed"
        assert ("tool.call", 2) not in rows
        assert len(handler.calls) == 2
    finally:
        await ctx.close()


async def test_a_replayed_record_claims_nothing_ahead(store: Store, store_url: str) -> None:
    handler = Calls()
    ctx, runtime = await started(store, handler)
    first = make_invocation(RUN, step_id="model.request")
    try:
        await runtime.execute(first)
        asked: list[Record] = []

        def ahead(record: Record) -> Sequence[Invocation]:
            asked.append(record)
            return [make_invocation(RUN, sequence=1)]

        await runtime.execute_and_log(first, no_entries, ahead=ahead)
        assert asked == []
        assert ("tool.call", 1) not in operations(store_url)
    finally:
        await ctx.close()


@pytest.mark.parametrize(
    "ahead",
    [
        pytest.param(lambda record: [make_invocation("another-run", sequence=1)], id="other-run"),
        pytest.param(lambda record: ["not an invocation"], id="not-an-invocation"),
        pytest.param(lambda record: [make_invocation(RUN, input_json="{")], id="invalid"),
        pytest.param(lambda record: 1 / 0, id="raises"),
    ],
)
async def test_what_cannot_be_claimed_ahead_is_left_out(
    store: Store, store_url: str, ahead: Any
) -> None:
    handler = Calls()
    ctx, runtime = await started(store, handler)
    try:
        record = await runtime.execute_and_log(
            make_invocation(RUN, step_id="model.request"), no_entries, ahead=ahead
        )
        assert record[0].invocation.step_id == "model.request"
        assert list(operations(store_url)) == [("model.request", 0)]
        assert select(store_url, "SELECT COUNT(*) FROM operations")[0][0] == 1
    finally:
        await ctx.close()
