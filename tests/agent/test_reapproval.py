"""Re-approval: a decision bound to arguments that would no longer run is refused
(ApprovalMismatch), the call is paused again on its current arguments, and a new decision,
its next round, lets it run once: in process, across processes, and after a kill."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.agent.reapproval_worker import PROMPT, binding, build
from tests.agent.reference import lines
from tests.conftest import REPO
from tests.helpers import select
from zincir.agent import (
    APPROVAL_TOPIC,
    AgentRunResult,
    Approve,
    Deny,
    args_sha256,
    decide,
    pending_approvals,
)
from zincir.restart import SQLRestartStore
from zincir.store import NewApproval, Store, approval_id

WORKER = Path(__file__).with_name("reapproval_worker.py")
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}
RUN = "re-run"
APPROVAL = approval_id(RUN, "c1")
STRIDE = 10**12  # a decision round's sequences are the next attempt of its call's
V1 = {"order_id": "A-17", "amount_cents": 500}
V2 = {**V1, "currency": "EUR"}  # what build 2 validates the same model call to
D1, D2 = args_sha256(V1), args_sha256(V2)


def start(db: str, log: Path, *options: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), db, str(log), RUN, *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )


def finish(db: str, log: Path, *options: str) -> str:
    """Run the worker to its end in a separate process; what it printed."""
    done = subprocess.run(
        [sys.executable, str(WORKER), db, str(log), RUN, *options],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def kill_inside_the_refund(db: str, log: Path, *options: str) -> None:
    """A process applies the recorded decision and is killed inside the refund, before it
    did anything: the decision is bound and logged, the tool call has no record."""
    worker = start(db, log, "--hang", *options)
    try:
        assert worker.stdout is not None
        line = await asyncio.to_thread(worker.stdout.readline)
        assert line == "inside refund\n", worker.stderr.read() if worker.stderr else ""
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        for stream in (worker.stdout, worker.stderr):
            if stream is not None:
                stream.close()


async def retrying(step: Callable[[], Awaitable[AgentRunResult]]) -> AgentRunResult:
    """``step`` once the killed process's run lease has expired."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return await step()
        except zincir.LeaseHeld:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)


def operations(db: str) -> list[tuple[str, int, str]]:
    return [
        (step, sequence, status)
        for step, sequence, status in select(
            db,
            "SELECT step_id, sequence, status FROM operations WHERE run_id = ? ORDER BY 2, 1",
            (RUN,),
        )
    ]


def logged(db: str, kind: str) -> list[dict[str, Any]]:
    return [
        json.loads(payload)
        for (payload,) in select(
            db, "SELECT payload FROM events WHERE run_id = ? AND type = ? ORDER BY seq", (RUN, kind)
        )
    ]


def unreceived_decisions(db: str) -> int:
    return int(
        select(
            db,
            "SELECT COUNT(*) FROM messages WHERE to_run_id = ? AND topic = ? "
            "AND received_at IS NULL",
            (RUN, APPROVAL_TOPIC),
        )[0][0]
    )


@dataclass
class Killed:
    db: str
    log: Path
    store: Store


@pytest.fixture
async def killed(store_target: str, tmp_path: Path) -> AsyncIterator[Killed]:
    """Build 1 paused for the refund, a person approved it, and the process applying the
    approval was killed inside the refund."""
    db, log = store_target, tmp_path / "log"
    store = zincir.open_store(db)
    try:
        agent = build(log)
        first = await agent.run(PROMPT, durable=binding(agent, store, RUN))
        assert first.paused is not None and first.paused.calls[0].args_sha256 == D1
        await decide(store, APPROVAL, Approve(), args_sha256=D1)
        await kill_inside_the_refund(db, log)
        assert [
            (e["call_id"], e["args_sha256"], e["round"]) for e in logged(db, "approval_decided")
        ] == [("c1", D1, 0)]
        assert ("approval.resume", 0, "completed") in operations(db)
        assert ("tool.call", 0, "completed") not in operations(db)
        assert lines(log) == []
        yield Killed(db, log, store)
    finally:
        await store.close()


@pytest.mark.crash
async def test_a_changed_argument_after_approval_is_refused_then_approved_again(
    killed: Killed,
) -> None:
    db, log, store = killed.db, killed.log, killed.store
    agent = build(log, currency="EUR")  # the next deploy: refund takes a currency too
    bound = binding(agent, store, RUN)
    with pytest.raises(zincir.ApprovalMismatch, match="approved again") as refused:
        await retrying(lambda: agent.run(PROMPT, durable=bound))
    message = str(refused.value)
    assert f"would run with arguments {D2} but the decision was made for {D1}" in message
    assert "paused_run" in message and "pending_approvals" in message
    assert lines(log) == []
    # The run is left paused for the call, on the arguments that would now run.
    assert select(db, "SELECT status, lease_owner, wait_kind, wait_ref FROM agent_runs") == [
        ("running", None, "message", APPROVAL_TOPIC)
    ]
    assert logged(db, "approval_reopened") == [
        {"call_id": "c1", "round": 1, "args_sha256": D2, "replaces": D1}
    ]
    paused = await agent.paused_run(durable=bound)
    assert paused is not None
    assert [(c.call_id, dict(c.arguments), c.args_sha256) for c in paused.calls] == [("c1", V2, D2)]
    [pending] = await pending_approvals(store, RUN)
    assert (pending.arguments, pending.args_sha256, pending.sequence, pending.decision) == (
        V2,
        D2,
        STRIDE,
        None,
    )
    # Running it again is that pause, without an error; a decision on the old digest is
    # refused and reopens nothing.
    assert (await agent.run(PROMPT, durable=bound)).paused == paused
    stale = dataclasses.replace(
        paused, calls=(dataclasses.replace(paused.calls[0], arguments=V1, args_sha256=D1),)
    )
    with pytest.raises(zincir.ApprovalMismatch, match="decision was made for"):
        await agent.resume(stale, {"c1": Approve()}, durable=bound)
    assert len(logged(db, "approval_reopened")) == 1 and lines(log) == []

    # Approved again: the refund runs once, with the arguments of this round.
    done = await agent.resume(paused, {"c1": Approve()}, durable=bound)
    assert done.output == "done: [{'refunded': 500, 'currency': 'EUR'}]"
    assert lines(log) == ["refund A-17 500 EUR"]
    steps = operations(db)
    assert [seq for step, seq, _ in steps if step == "approval.resume"] == [0, STRIDE]
    assert ("tool.call", STRIDE, "completed") in steps
    assert [(e["round"], e["args_sha256"]) for e in logged(db, "approval_decided")] == [
        (0, D1),
        (1, D2),
    ]
    # A replay calls nothing, in this process or with a new build of the agent; the
    # decision of this round is the one on record.
    again = build(log, currency="EUR")
    replay = await again.run(PROMPT, durable=binding(again, store, RUN))
    assert replay.output == done.output and lines(log) == ["refund A-17 500 EUR"]
    with pytest.raises(zincir.ApprovalMismatch, match="already decided"):
        await agent.resume(paused, {"c1": Deny("changed my mind")}, durable=bound)
    assert operations(db) == steps


@pytest.mark.crash
async def test_the_new_decision_is_recorded_in_one_process_and_applied_in_another(
    killed: Killed,
) -> None:
    db, log = killed.db, killed.log
    refused = finish(db, log, "--currency", "EUR")
    assert refused.startswith("mismatch ") and "approved again" in refused

    def approve(digest: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "zincir", "approvals", "approve", APPROVAL]
            + ["--args-sha256", digest, "--db", db],
            capture_output=True,
            text=True,
            env=ENV,
            timeout=60,
        )

    listed = subprocess.run(
        [sys.executable, "-m", "zincir", "approvals", "list", "--json", "--db", db],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
        check=True,
    )
    [pending] = json.loads(listed.stdout)
    assert (pending["approval_id"], pending["arguments"], pending["args_sha256"]) == (
        APPROVAL,
        V2,
        D2,
    )
    assert approve(D1).returncode != 0  # the old arguments are not the ones waiting
    assert approve(D2).returncode == 0
    assert approve(D2).returncode != 0  # a decision is used once in its round
    assert finish(db, log, "--currency", "EUR") == (
        "output done: [{'refunded': 500, 'currency': 'EUR'}]\n"
    )
    assert lines(log) == ["refund A-17 500 EUR"]
    assert finish(db, log, "--currency", "EUR") == (
        "output done: [{'refunded': 500, 'currency': 'EUR'}]\n"
    )
    assert lines(log) == ["refund A-17 500 EUR"]


@pytest.mark.crash
async def test_a_deny_on_reapproval_denies(killed: Killed) -> None:
    db, log, store = killed.db, killed.log, killed.store
    agent = build(log, currency="EUR")
    bound = binding(agent, store, RUN)
    with pytest.raises(zincir.ApprovalMismatch):
        await retrying(lambda: agent.run(PROMPT, durable=bound))
    paused = await agent.paused_run(durable=bound)
    assert paused is not None
    done = await agent.resume(paused, {"c1": Deny("no refunds in euros")}, durable=bound)
    assert done.paused is None and "no refunds in euros" in done.output
    assert lines(log) == []
    decided = logged(db, "approval_decided")
    assert [(e["round"], e["proposed"]["decision"]) for e in decided] == [
        (0, "approve"),
        (1, "deny"),
    ]
    assert not any(step == "tool.call" and seq == STRIDE for step, seq, _ in operations(db))


async def test_a_decision_recorded_for_the_old_arguments_is_asked_again(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    db, log = store_url, tmp_path / "log"
    first = build(log)
    paused = (await first.run(PROMPT, durable=binding(first, store, RUN))).paused
    assert paused is not None
    await paused.save_checkpoint(SQLRestartStore(store))  # as a first process would
    await decide(store, APPROVAL, Approve(), args_sha256=D1)
    assert unreceived_decisions(db) == 1
    # A new build before the decision was applied: the decision binds other arguments.
    agent = build(log, currency="EUR")
    bound = binding(agent, store, RUN)
    with pytest.raises(zincir.ApprovalMismatch, match="approved again"):
        await agent.run(PROMPT, durable=bound)
    assert not any(step == "approval.resume" for step, _, _ in operations(db))
    [pending] = await pending_approvals(store, RUN)
    assert (pending.args_sha256, pending.sequence, pending.decision) == (D2, STRIDE, None)
    assert unreceived_decisions(db) == 0  # the old decision no longer wakes the run
    with pytest.raises(zincir.ApprovalMismatch):
        await decide(store, APPROVAL, Approve(), args_sha256=D1)
    await decide(store, APPROVAL, Approve(), args_sha256=D2)
    with pytest.raises(zincir.ApprovalDecided):
        await decide(store, APPROVAL, Deny(), args_sha256=D2)
    # The pause saved before the deploy still resumes: the recorded decision applies.
    done = await agent.resume_checkpoint(SQLRestartStore(store), RUN, durable=bound)
    assert done.output == "done: [{'refunded': 500, 'currency': 'EUR'}]"
    assert lines(log) == ["refund A-17 500 EUR"]
    assert [seq for step, seq, _ in operations(db) if step == "approval.resume"] == [STRIDE]


@pytest.mark.crash
async def test_an_override_that_now_validates_to_other_arguments_is_asked_again(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    db, log = store_url, tmp_path / "log"
    model_args = {**V1, "currency": "USD"}  # the model names the currency: its call validates
    override = {"order_id": "A-17", "amount_cents": 300}  # the same in both builds, not so
    in_dollars, in_euros = {**override, "currency": "USD"}, {**override, "currency": "EUR"}
    first = build(log, currency="USD", model_currency="USD")
    paused = (await first.run(PROMPT, durable=binding(first, store, RUN))).paused
    assert paused is not None and paused.calls[0].args_sha256 == args_sha256(model_args)
    approve = Approve(override_arguments=override)
    await decide(store, APPROVAL, approve, args_sha256=args_sha256(model_args))
    await kill_inside_the_refund(db, log, "--currency", "USD", "--model-currency", "USD")
    assert [e["args_sha256"] for e in logged(db, "approval_decided")] == [args_sha256(in_dollars)]
    # The default currency changed: the override now validates to other arguments.
    agent = build(log, currency="EUR", model_currency="USD")
    bound = binding(agent, store, RUN)
    with pytest.raises(zincir.ApprovalMismatch, match="approved again") as refused:
        await retrying(lambda: agent.run(PROMPT, durable=bound))
    assert (
        f"would run with arguments {args_sha256(in_euros)} but the decision was made for "
        f"{args_sha256(in_dollars)}"
    ) in str(refused.value)
    assert len(logged(db, "agent_paused")) == 1  # the call's arguments did not change
    assert [e["round"] for e in logged(db, "approval_reopened")] == [1]
    again = await agent.paused_run(durable=bound)
    assert again == paused
    [pending] = await pending_approvals(store, RUN)
    assert (pending.sequence, pending.decision) == (STRIDE, None)
    done = await agent.resume(again, {"c1": approve}, durable=bound)
    assert done.output == "done: [{'refunded': 300, 'currency': 'EUR'}]"
    assert lines(log) == ["refund A-17 300 EUR"]


async def test_a_call_that_has_its_result_is_never_asked_again(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    db, log = store_url, tmp_path / "log"
    orders = ("A-17", "B-9")
    first = build(log, orders=orders)
    bound = binding(first, store, RUN)
    paused = (await first.run(PROMPT, durable=bound)).paused
    assert paused is not None
    second = (await first.resume(paused, {"c1": Approve()}, durable=bound)).paused
    assert second is not None and [c.call_id for c in second.calls] == ["c2"]
    assert lines(log) == ["refund A-17 500"]
    agent = build(log, currency="EUR", orders=orders)
    with pytest.raises(zincir.ApprovalMismatch, match="has its result"):
        await agent.run(PROMPT, durable=binding(agent, store, RUN))
    assert lines(log) == ["refund A-17 500"]
    assert logged(db, "approval_reopened") == []
    assert select(db, "SELECT status FROM agent_runs") == [("running",)]


async def test_opening_a_call_at_its_next_round_replaces_its_row(
    store: Store, store_url: str
) -> None:
    """The store side: the same sequence keeps the row and its decision; another sequence
    (the next round) replaces the row, clears its decision and takes its wake-up message."""
    db = store_url
    lease = await store.create_run(RUN, name="refunds", owner="me", ttl=timedelta(seconds=30))

    def opened(arguments: dict[str, Any], sequence: int) -> NewApproval:
        return NewApproval(
            run_id=RUN,
            call_id="c1",
            tool="refund",
            arguments_json=json.dumps(arguments),
            args_sha256=args_sha256(arguments),
            sequence=sequence,
            execution="approval",
        )

    await store.open_approvals(lease, [opened(V1, 0)])
    await store.decide_approval(APPROVAL, '{"decision":"approve"}')
    [kept] = await store.open_approvals(lease, [opened(V2, 0)])
    assert (kept.args_sha256, kept.decision_json) == (D1, '{"decision":"approve"}')
    assert unreceived_decisions(db) == 1
    [replaced] = await store.open_approvals(lease, [opened(V2, STRIDE)])
    assert (replaced.args_sha256, replaced.sequence, replaced.arguments_json) == (
        D2,
        STRIDE,
        json.dumps(V2),
    )
    assert (replaced.decision_json, replaced.decided_at) == (None, None)
    assert unreceived_decisions(db) == 0
    assert [row.approval_id for row in await store.list_approvals(RUN)] == [APPROVAL]
    await store.decide_approval(APPROVAL, '{"decision":"deny"}', args_sha256=D2)
    with pytest.raises(zincir.ApprovalDecided):
        await store.decide_approval(APPROVAL, '{"decision":"approve"}')
