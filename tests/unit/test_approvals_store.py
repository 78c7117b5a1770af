"""The approvals table: opened with a pause under the run's lease, decided once from anywhere,
and a decision wakes a run parked on the approval topic."""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import timedelta
from typing import Any

import pytest

import zincir
import zincir.agent
from tests.conftest import START, FakeClock
from tests.helpers import event_types, select
from zincir import (
    ApprovalDecided,
    ApprovalExpired,
    ApprovalMismatch,
    ApprovalNotFound,
    FencedOut,
    InvalidInput,
    RunCancelled,
    RunTerminal,
    SQLiteStore,
)
from zincir.store import Lease, NewApproval, NewEvent, approval_id
from zincir.store._restart_records import APPROVAL_TOPIC, approval_run_id

TTL = timedelta(seconds=30)
APPROVE = '{"decision":"approve"}'


def digest(arguments: dict[str, Any]) -> str:
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def paused_call(
    run_id: str,
    call_id: str,
    arguments: dict[str, Any] | None = None,
    *,
    execution: str = "approval",
    expires_in: timedelta | None = None,
    tool: str = "refund",
) -> NewApproval:
    args = {"order_id": "A-17"} if arguments is None else arguments
    return NewApproval(
        run_id=run_id,
        call_id=call_id,
        tool=tool,
        arguments_json=json.dumps(args),
        args_sha256=digest(args),
        sequence=2000,
        execution=execution,
        expires_at=None if expires_in is None else START + expires_in,
    )


PAUSED = NewEvent("agent_paused", '{"calls":["c1","c2"]}')


async def new_run(store: SQLiteStore, run_id: str = "r1") -> Lease:
    return await store.create_run(run_id, name="approvals", owner="me", ttl=TTL)


def test_approval_ids_are_readable_and_never_shared() -> None:
    assert approval_id("r1", "c2") == "r1/c2"
    pairs = [("a/b", "c"), ("a", "b/c"), ("a%2Fb", "c"), ("a%", "2Fb/c"), ("a", "b%2Fc")]
    ids = [approval_id(run, call) for run, call in pairs]
    assert len(set(ids)) == len(pairs)
    assert [approval_run_id(aid) for aid in ids] == [run for run, _ in pairs]
    assert approval_run_id("no slash") is None
    assert APPROVAL_TOPIC == zincir.agent.APPROVAL_TOPIC


async def test_open_logs_the_pause_and_opens_one_row_per_call(
    store: SQLiteStore, store_url: str
) -> None:
    lease = await new_run(store)
    opened = await store.open_approvals(
        lease, [paused_call("r1", "c2"), paused_call("r1", "c1", execution="external")], [PAUSED]
    )
    assert [(row.approval_id, row.call_id, row.execution) for row in opened] == [
        ("r1/c2", "c2", "approval"),
        ("r1/c1", "c1", "external"),
    ]
    assert all(row.decision_json is None and row.decided_at is None for row in opened)
    assert opened[0].args_sha256 == digest({"order_id": "A-17"})
    assert event_types(store_url, "r1") == ["state_transition", "agent_paused"]
    listed = await store.list_approvals()
    assert [row.approval_id for row in listed] == ["r1/c1", "r1/c2"]  # same instant: by id
    assert await store.get_approval("r1/c2") == opened[0]
    assert await store.get_approval("r1/nope") is None


async def test_reopening_a_pause_keeps_its_rows_and_decisions(store: SQLiteStore) -> None:
    lease = await new_run(store)
    first = await store.open_approvals(lease, [paused_call("r1", "c1"), paused_call("r1", "c2")])
    await store.decide_approval("r1/c1", APPROVE)
    again = await store.open_approvals(
        lease, [paused_call("r1", "c1", {"order_id": "B-2"}), paused_call("r1", "c2")], [PAUSED]
    )
    assert again[0].decision_json == APPROVE and again[0].arguments_json == first[0].arguments_json
    assert again[1] == first[1]
    assert len(await store.list_approvals(pending=False)) == 2
    assert [row.call_id for row in await store.list_approvals()] == ["c2"]


async def test_a_fenced_owner_opens_nothing(store: SQLiteStore, store_url: str) -> None:
    stale = await new_run(store)
    await store.acquire_run("r1", owner="recoverer", ttl=TTL, force=True)
    with pytest.raises(FencedOut, match=r"\[run r1\]"):
        await store.open_approvals(stale, [paused_call("r1", "c1")], [PAUSED])
    assert select(store_url, "SELECT COUNT(*) FROM approvals") == [(0,)]
    assert event_types(store_url, "r1") == ["state_transition"]


async def test_opening_refuses_bad_input_and_stores_nothing(
    store: SQLiteStore, store_url: str
) -> None:
    lease = await new_run(store)
    await new_run(store, "other")
    bad = [
        [paused_call("other", "c1")],
        [paused_call("r1", "c1"), paused_call("r1", "c1")],
        [paused_call("r1", "")],
        [paused_call("r1", "c1", execution="later")],
        [NewApproval("r1", "c1", "refund", "[1]", digest({}), 1, "approval")],
        [NewApproval("r1", "c1", "refund", "{}", "not-a-digest", 1, "approval")],
        [NewApproval("r1", "c1", "refund", "{}", digest({}), -1, "approval")],
    ]
    for approvals in bad:
        with pytest.raises(InvalidInput, match=r"\[run r1\]"):
            await store.open_approvals(lease, approvals, [PAUSED])
    assert select(store_url, "SELECT COUNT(*) FROM approvals") == [(0,)]
    assert event_types(store_url, "r1") == ["state_transition"]


async def test_a_decision_is_recorded_once(store: SQLiteStore, store_url: str) -> None:
    lease = await new_run(store)
    await store.open_approvals(lease, [paused_call("r1", "c1")])
    decided = await store.decide_approval("r1/c1", APPROVE)
    assert decided.decision_json == APPROVE and decided.decided_at is not None
    assert await store.get_approval("r1/c1") == decided
    with pytest.raises(ApprovalDecided, match=r"\[run r1\] approval 'r1/c1' was already decided"):
        await store.decide_approval("r1/c1", '{"decision":"deny","reason":"changed my mind"}')
    assert (await store.get_approval("r1/c1")) == decided
    assert await store.list_approvals() == []
    assert select(store_url, "SELECT COUNT(*) FROM messages") == [(1,)]


async def test_an_expired_approval_is_refused_but_still_listed(
    fake_store: SQLiteStore, clock: FakeClock, store_url: str
) -> None:
    lease = await new_run(fake_store)
    await fake_store.open_approvals(
        lease,
        [
            paused_call("r1", "c1", expires_in=timedelta(minutes=1)),
            paused_call("r1", "c2", expires_in=timedelta(minutes=2)),
        ],
    )
    clock.advance(60)  # exactly at c1's expiry
    with pytest.raises(ApprovalExpired, match=r"\[run r1\] approval 'r1/c1' expired"):
        await fake_store.decide_approval("r1/c1", APPROVE)
    assert [row.call_id for row in await fake_store.list_approvals("r1")] == ["c1", "c2"]
    assert (await fake_store.decide_approval("r1/c2", APPROVE)).decision_json == APPROVE
    assert select(store_url, "SELECT COUNT(*) FROM messages") == [(1,)]


async def test_a_decision_binds_the_arguments_digest(store: SQLiteStore) -> None:
    lease = await new_run(store)
    await store.open_approvals(lease, [paused_call("r1", "c1")])
    other = digest({"order_id": "B-2"})
    with pytest.raises(ApprovalMismatch, match=r"\[run r1\] approval 'r1/c1' binds arguments"):
        await store.decide_approval("r1/c1", APPROVE, args_sha256=other)
    undecided = await store.get_approval("r1/c1")
    assert undecided is not None and undecided.decision_json is None
    right = digest({"order_id": "A-17"}).upper()
    assert (await store.decide_approval("r1/c1", APPROVE, args_sha256=right)).decided_at


async def test_unknown_and_malformed_decisions_store_nothing(
    store: SQLiteStore, store_url: str
) -> None:
    lease = await new_run(store)
    await store.open_approvals(lease, [paused_call("r1", "c1")])
    with pytest.raises(ApprovalNotFound, match=r"\[run r1\] no approval 'r1/c9'"):
        await store.decide_approval("r1/c9", APPROVE)
    for aid, decision, sha in [
        ("", APPROVE, None),
        ("r1/c1", '["approve"]', None),
        ("r1/c1", "approve", None),
        ("r1/c1", '{"a":1,"a":2}', None),
        ("r1/c1", APPROVE, "abc"),
    ]:
        with pytest.raises(InvalidInput):
            await store.decide_approval(aid, decision, args_sha256=sha)
    assert select(store_url, "SELECT decision FROM approvals") == [(None,)]
    assert select(store_url, "SELECT COUNT(*) FROM messages") == [(0,)]


@pytest.mark.parametrize(
    ("status", "error", "says"),
    [
        ("cancelled", RunCancelled, "the run was cancelled"),
        ("failed", RunTerminal, "the run is failed"),
    ],
)
async def test_a_finished_run_cannot_be_decided_and_is_not_pending(
    store: SQLiteStore, store_url: str, status: str, error: type[RunTerminal], says: str
) -> None:
    lease = await new_run(store)
    await store.open_approvals(lease, [paused_call("r1", "c1")])
    await store.finish_run(lease, status)
    assert await store.list_approvals() == []
    assert len(await store.list_approvals(pending=False)) == 1
    with pytest.raises(
        error, match=rf"\[run r1\] {says}; approval 'r1/c1' can no longer"
    ) as raised:
        await store.decide_approval("r1/c1", APPROVE)
    assert type(raised.value) is error  # a failed run's refusal is no RunCancelled
    assert select(store_url, "SELECT decision FROM approvals") == [(None,)]


async def test_a_decision_wakes_a_run_parked_on_the_approval_topic(
    store: SQLiteStore, store_url: str
) -> None:
    lease = await new_run(store)
    await store.open_approvals(lease, [paused_call("r1", "c1")], [PAUSED])
    await store.set_run_wait(lease, "message", APPROVAL_TOPIC)
    await store.release_lease(lease)
    claimed: list[str] = []

    async def handler(ctx: zincir.AgentContext) -> None:
        claimed.append(ctx.run_id)
        await ctx.close()

    worker = zincir.ResumeWorker(store, lease_ttl=TTL)
    assert await worker.run_once(handler) == 0 and claimed == []

    await store.decide_approval("r1/c1", '{"decision":"deny","reason":"no"}')
    assert select(
        store_url,
        "SELECT to_run_id, topic, payload, from_run_id, send_key, received_at FROM messages",
    ) == [("r1", APPROVAL_TOPIC, '{"approval_id":"r1/c1","call_id":"c1"}', None, None, None)]
    assert await store.message_ready("r1", APPROVAL_TOPIC)
    assert await worker.run_once(handler) == 1 and claimed == ["r1"]


async def test_two_processes_deciding_at_once_record_one_decision(
    store: SQLiteStore, store_url: str
) -> None:
    lease = await new_run(store)
    await store.open_approvals(lease, [paused_call("r1", "c1")])
    other = zincir.open_store(store_url)
    try:
        outcomes = await asyncio.gather(
            store.decide_approval("r1/c1", APPROVE),
            other.decide_approval("r1/c1", '{"decision":"deny","reason":""}'),
            return_exceptions=True,
        )
    finally:
        await other.close()
    decided = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(decided) == 1 and len(refused) == 1 and isinstance(refused[0], ApprovalDecided)
    assert select(store_url, "SELECT decision FROM approvals") == [(decided[0].decision_json,)]
    assert select(store_url, "SELECT COUNT(*) FROM messages") == [(1,)]
