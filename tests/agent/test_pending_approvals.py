"""``pending_approvals`` and ``decide``: what waits for a person, and one decision each, of
the right kind for the call (approve an approval, supply an external call's result)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import START, FakeClock
from tests.helpers import select
from zincir import (
    ApprovalDecided,
    ApprovalExpired,
    ApprovalMismatch,
    ApprovalNotFound,
    InvalidInput,
)
from zincir.agent import (
    APPROVAL_TOPIC,
    Approve,
    Deny,
    ExternalResult,
    PendingApproval,
    args_sha256,
    decide,
    pending_approvals,
)
from zincir.payloads import ApprovalDecision
from zincir.store import NewApproval, Store

TTL = timedelta(seconds=30)
REFUND = {"order_id": "A-17", "amount_cents": 4200}
SHIPPING = {"order_id": "A-17"}


def call(
    run_id: str,
    call_id: str,
    tool: str,
    arguments: dict[str, Any],
    execution: str,
    expires_in: timedelta | None = None,
) -> NewApproval:
    return NewApproval(
        run_id=run_id,
        call_id=call_id,
        tool=tool,
        arguments_json=json.dumps(arguments),
        args_sha256=args_sha256(arguments),
        sequence=2001,
        execution=execution,
        expires_at=None if expires_in is None else START + expires_in,
    )


async def pause(store: Store, run_id: str, *calls: NewApproval) -> None:
    lease = await store.create_run(run_id, name="support", owner="agent", ttl=TTL)
    await store.open_approvals(lease, list(calls))


async def test_pending_approvals_lists_what_waits_oldest_first(
    fake_store: Store, clock: FakeClock
) -> None:
    await pause(
        fake_store,
        "run-a",
        call("run-a", "c2", "refund", REFUND, "approval", expires_in=timedelta(minutes=5)),
    )
    clock.advance(1)
    await pause(fake_store, "run-b", call("run-b", "c1", "ship", SHIPPING, "external"))
    found = await pending_approvals(fake_store)
    assert found == [
        PendingApproval(
            approval_id="run-a/c2",
            run_id="run-a",
            call_id="c2",
            tool="refund",
            arguments=REFUND,
            args_sha256=args_sha256(REFUND),
            execution="approval",
            sequence=2001,
            since=START,
            expires_at=START + timedelta(minutes=5),
            expired=False,
            decision=None,
        ),
        PendingApproval(
            approval_id="run-b/c1",
            run_id="run-b",
            call_id="c1",
            tool="ship",
            arguments=SHIPPING,
            args_sha256=args_sha256(SHIPPING),
            execution="external",
            sequence=2001,
            since=START + timedelta(seconds=1),
            expires_at=None,
            expired=False,
            decision=None,
        ),
    ]
    assert [item.approval_id for item in await pending_approvals(fake_store, "run-b")] == [
        "run-b/c1"
    ]
    clock.advance(300)
    later = await pending_approvals(fake_store)
    assert [(item.approval_id, item.expired) for item in later] == [
        ("run-a/c2", True),
        ("run-b/c1", False),
    ]
    with pytest.raises(ApprovalExpired, match=r"\[run run-a\]"):
        await decide(fake_store, "run-a/c2", Approve())


async def test_decide_records_each_kind_once_and_wakes_the_run(
    store: Store, store_url: str
) -> None:
    await pause(
        store,
        "run-1",
        call("run-1", "refund", "refund", REFUND, "approval"),
        call("run-1", "ship", "ship", SHIPPING, "external"),
        call("run-1", "delete", "delete", SHIPPING, "approval"),
    )
    approved = await decide(
        store,
        "run-1/refund",
        Approve({"order_id": "A-17", "amount_cents": 100}),
        args_sha256=args_sha256(REFUND),
    )
    assert approved.decision == ApprovalDecision(
        decision="approve", override_arguments={"order_id": "A-17", "amount_cents": 100}
    )
    assert approved.arguments == REFUND  # the override is recorded as given, checked on resume
    shipped = await decide(store, "run-1/ship", ExternalResult({"tracking": "Z1"}))
    assert shipped.decision == ApprovalDecision(
        decision="external_result", result={"tracking": "Z1"}
    )
    denied = await decide(store, "run-1/delete", Deny("not today"))
    assert denied.decision == ApprovalDecision(decision="deny", reason="not today")
    assert await pending_approvals(store) == []
    assert select(store_url, "SELECT topic, payload FROM messages ORDER BY id") == [
        (APPROVAL_TOPIC, '{"approval_id":"run-1/refund","call_id":"refund"}'),
        (APPROVAL_TOPIC, '{"approval_id":"run-1/ship","call_id":"ship"}'),
        (APPROVAL_TOPIC, '{"approval_id":"run-1/delete","call_id":"delete"}'),
    ]
    with pytest.raises(ApprovalDecided, match=r"\[run run-1\]"):
        await decide(store, "run-1/refund", Deny())


async def test_a_decision_must_fit_the_call(store: Store, store_url: str) -> None:
    await pause(
        store,
        "run-1",
        call("run-1", "refund", "refund", REFUND, "approval"),
        call("run-1", "ship", "ship", SHIPPING, "external"),
    )
    with pytest.raises(InvalidInput, match=r"\[run run-1\] .*waits for approval.*ExternalResult"):
        await decide(store, "run-1/refund", ExternalResult("done"))
    with pytest.raises(InvalidInput, match=r"\[run run-1\] .*external result.*not Approve"):
        await decide(store, "run-1/ship", Approve())
    with pytest.raises(InvalidInput, match=r"\[run run-1\] a decision must be"):
        await decide(store, "run-1/refund", "yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="not JSON data"):
        await decide(store, "run-1/ship", ExternalResult({1: "non-str key"}))
    with pytest.raises(InvalidInput, match=r"\[run run-1\] the decision is not JSON data"):
        await decide(store, "run-1/refund", Deny("\udcff"))  # a lone surrogate
    with pytest.raises(ApprovalMismatch, match=r"\[run run-1\]"):
        await decide(store, "run-1/refund", Approve(), args_sha256=args_sha256(SHIPPING))
    with pytest.raises(ApprovalNotFound, match=r"\[run run-1\] no approval 'run-1/nope'"):
        await decide(store, "run-1/nope", Deny())
    with pytest.raises(InvalidInput):
        await decide(store, "", Deny())
    assert select(store_url, "SELECT COUNT(*) FROM messages") == [(0,)]
    assert [item.call_id for item in await pending_approvals(store)] == ["refund", "ship"]
    assert (await decide(store, "run-1/ship", Deny("no carrier"))).decision == ApprovalDecision(
        decision="deny", reason="no carrier"
    )
