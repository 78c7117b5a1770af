"""Approvals on PostgreSQL under real concurrency: deciders on two stores (separate pools, as
two processes would have), a decision racing the run's own settle, and the stored rows and
messages read back from the schema."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import zincir
from zincir import ApprovalDecided, FencedOut
from zincir.store import Lease, NewApproval, NewEvent, Store
from zincir.store._restart_records import APPROVAL_TOPIC

TTL = timedelta(seconds=30)
APPROVE, DENY = '{"decision":"approve"}', '{"decision":"deny"}'
ARGS = {"order_id": "A-17"}
PAUSED = NewEvent("agent_paused", '{"calls":["c1"]}')


@pytest.fixture
async def stores(postgres_url: str) -> AsyncIterator[tuple[Store, Store]]:
    first, second = zincir.open_store(postgres_url), zincir.open_store(postgres_url)
    yield first, second
    await first.close()
    await second.close()


def paused_call(run_id: str, call_id: str, sequence: int = 2000) -> NewApproval:
    text = json.dumps(ARGS, sort_keys=True, separators=(",", ":"))
    return NewApproval(
        run_id=run_id,
        call_id=call_id,
        tool="refund",
        arguments_json=json.dumps(ARGS),
        args_sha256=hashlib.sha256(text.encode()).hexdigest(),
        sequence=sequence,
        execution="approval",
    )


def rows(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Read the test's schema on a connection of its own."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def wake_ups(url: str, run_id: str) -> list[tuple[Any, ...]]:
    """The run's approval messages: (payload, received_by)."""
    return rows(
        url,
        "SELECT payload, received_by FROM messages WHERE to_run_id = %s AND topic = %s ORDER BY id",
        (run_id, APPROVAL_TOPIC),
    )


async def paused_run(store: Store, run_id: str, *calls: str) -> Lease:
    lease = await store.create_run(run_id, name="approvals", owner="me", ttl=TTL)
    await store.open_approvals(lease, [paused_call(run_id, call) for call in calls], [PAUSED])
    return lease


async def test_racing_decisions_have_one_winner_and_one_wake_up(
    stores: tuple[Store, Store], postgres_url: str
) -> None:
    calls = [f"c{n}" for n in range(8)]
    await paused_run(stores[0], "r1", *calls)
    for call in calls:
        outcomes = await asyncio.gather(
            *(
                stores[n % 2].decide_approval(f"r1/{call}", APPROVE if n % 2 else DENY)
                for n in range(8)
            ),
            return_exceptions=True,
        )
        won = [o for o in outcomes if not isinstance(o, BaseException)]
        assert len(won) == 1, outcomes
        assert all(isinstance(o, ApprovalDecided) for o in outcomes if o not in won)
        stored = await stores[1].get_approval(f"r1/{call}")
        assert stored == won[0] and stored.decided_at is not None
    messages = wake_ups(postgres_url, "r1")
    assert sorted(json.loads(payload)["call_id"] for payload, _ in messages) == sorted(calls)
    assert await stores[0].list_approvals("r1") == []


async def test_a_decision_racing_the_runs_settle_leaves_no_wake_up(
    stores: tuple[Store, Store], postgres_url: str
) -> None:
    """The run applies its own decision while a person decides: one decision is kept, and
    no wake-up message is left to wake a later pause."""
    calls = [f"c{n}" for n in range(10)]
    lease = await paused_run(stores[0], "r1", *calls)

    async def decide(call: str) -> bool:
        try:
            await stores[1].decide_approval(f"r1/{call}", APPROVE)
        except ApprovalDecided:
            return False
        return True

    async def settle(call: str) -> None:
        await stores[0].settle_approval(lease, call, DENY)

    results = await asyncio.gather(*(job for c in calls for job in (decide(c), settle(c))))
    decided = [call for call, won in zip(calls, results[::2], strict=True) if won]
    for call in calls:
        row = await stores[0].get_approval(f"r1/{call}")
        assert row is not None
        assert row.decision_json == (APPROVE if call in decided else DENY)
    messages = wake_ups(postgres_url, "r1")
    assert len(messages) == len(decided)
    assert all(received for _, received in messages)
    assert not await stores[0].message_ready("r1", APPROVAL_TOPIC)


async def test_a_fenced_owner_opens_nothing(stores: tuple[Store, Store]) -> None:
    old = await stores[0].create_run("r1", name="approvals", owner="old", ttl=TTL)
    await stores[1].acquire_run("r1", owner="new", ttl=TTL, force=True)
    before = await stores[1].list_events("r1")
    with pytest.raises(FencedOut):
        await stores[0].open_approvals(old, [paused_call("r1", "c1")], [PAUSED])
    assert await stores[1].list_events("r1") == before
    assert await stores[1].list_approvals("r1", pending=False) == []


async def test_a_new_round_replaces_the_row_and_takes_the_old_wake_up(
    stores: tuple[Store, Store], postgres_url: str
) -> None:
    lease = await paused_run(stores[0], "r1", "c1")
    await stores[1].decide_approval("r1/c1", APPROVE)
    [(_, received)] = wake_ups(postgres_url, "r1")
    assert received is None
    [again] = await stores[0].open_approvals(lease, [paused_call("r1", "c1")], [PAUSED])
    assert again.decision_json == APPROVE  # the same round keeps its decision
    [reopened] = await stores[0].open_approvals(lease, [paused_call("r1", "c1", 2001)], [PAUSED])
    assert (reopened.sequence, reopened.decision_json, reopened.decided_at) == (2001, None, None)
    assert [received for _, received in wake_ups(postgres_url, "r1")] == [
        f"{APPROVAL_TOPIC}:c1:2000"
    ]
    assert [row.sequence for row in await stores[1].list_approvals("r1")] == [2001]
    # the new round is decided and settled once more, its wake-up taken in its own name
    await stores[1].decide_approval("r1/c1", DENY)
    await stores[0].settle_approval(lease, "c1", DENY)
    assert [received for _, received in wake_ups(postgres_url, "r1")] == [
        f"{APPROVAL_TOPIC}:c1:2000",
        f"{APPROVAL_TOPIC}:c1:2001",
    ]
