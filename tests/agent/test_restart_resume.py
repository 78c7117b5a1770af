"""Paused runs that survive the process: a pause kept in a restart store, decisions recorded
from anywhere (``decide``, ``zincir approvals``), the run resumed by another process."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import pytest

import zincir
from tests.agent.approval_worker import PROMPT, binding, build
from tests.agent.reference import lines
from tests.conftest import REPO
from tests.helpers import select
from zincir.agent import (
    Approve,
    DurableBinding,
    ExternalResult,
    Handlers,
    decide,
    pending_approvals,
    serve,
)
from zincir.payloads import ToolReturnPart
from zincir.restart import FileRestartStore, RestartStore, SQLRestartStore
from zincir.store import Store

WORKER = Path(__file__).with_name("approval_worker.py")
RUN = "ckpt-run"
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}


@dataclass
class Paused:
    db: str
    log: Path
    store: Store
    restart: RestartStore
    kind: str


def pause_in_subprocess(db: str, log: Path, kind: str, timeout: float | None = None) -> str:
    """A separate process runs the agent until it pauses, saves the pause and exits."""
    argv = [sys.executable, str(WORKER), db, str(log), RUN, kind]
    if timeout is not None:
        argv.append(str(timeout))
    done = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def zincir_cli(db: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zincir", "approvals", *args, "--db", db],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
    )


@pytest.fixture(params=["sql", "file"])
async def paused(
    request: pytest.FixtureRequest, store_target: str, tmp_path: Path
) -> AsyncIterator[Paused]:
    db, log = store_target, tmp_path / "log"
    kind = "sql" if request.param == "sql" else str(tmp_path / "pauses")
    assert pause_in_subprocess(db, log, kind) == "saved 1\n"
    store = zincir.open_store(db)
    restart: RestartStore = SQLRestartStore(store) if kind == "sql" else FileRestartStore(kind)
    yield Paused(db, log, store, restart, kind)
    await store.close()


async def test_a_new_process_resumes_the_saved_pause_with_decisions(paused: Paused) -> None:
    agent = build(paused.log)
    decisions = {"c-refund": Approve(), "c-ship": ExternalResult({"shipped": True})}
    result = await agent.resume_checkpoint(
        paused.restart, RUN, decisions, durable=binding(agent, paused.store, RUN)
    )
    assert result.paused is None and "refunded" in result.output
    # the code before the pause never ran again: one lookup, one first model request
    assert sorted(lines(paused.log)) == [
        "lookup A-17",
        "model 0",
        "model 1",
        "refund A-17 500",
        "ship A-17 deferred",
    ]
    run = await paused.store.get_run(RUN)
    assert run is not None and run["status"] == "completed"


async def test_saving_the_same_pause_again_is_a_no_op_and_a_divergent_one_fails_closed(
    paused: Paused,
) -> None:
    agent = build(paused.log)
    found = await agent.paused_run(durable=binding(agent, paused.store, RUN))
    assert found is not None
    again = await found.save_checkpoint(paused.restart)
    assert again.revision == found.revision == 1
    diverged = replace(found, prompt="Refund order B-2.")
    with pytest.raises(zincir.RevisionConflict):
        await diverged.save_checkpoint(paused.restart)
    kept = await paused.restart.load(RUN, "zincir.agent.paused")
    assert kept is not None and kept.payload == found.to_dict()


async def test_decisions_from_the_command_line_are_applied_once(paused: Paused) -> None:
    pending = await pending_approvals(paused.store, RUN)
    by_call = {approval.call_id: approval for approval in pending}
    assert sorted(by_call) == ["c-refund", "c-ship"]
    refund, ship = by_call["c-refund"], by_call["c-ship"]
    assert refund.tool == "refund" and refund.arguments == {"order_id": "A-17", "amount_cents": 500}
    listed = zincir_cli(paused.db, "list", "--run", RUN)
    assert listed.returncode == 0 and refund.approval_id in listed.stdout, listed.stderr

    approved = zincir_cli(
        paused.db, "approve", refund.approval_id, "--args-sha256", refund.args_sha256
    )
    assert approved.returncode == 0, approved.stderr
    shipped = zincir_cli(paused.db, "result", ship.approval_id, '{"shipped": true}')
    assert shipped.returncode == 0, shipped.stderr
    twice = zincir_cli(paused.db, "deny", refund.approval_id, "--reason", "changed my mind")
    assert twice.returncode == 1 and len(twice.stderr.strip().splitlines()) == 1
    assert await pending_approvals(paused.store, RUN) == []

    agent = build(paused.log)
    result = await agent.resume_checkpoint(
        paused.restart, RUN, durable=binding(agent, paused.store, RUN)
    )
    assert result.paused is None and "refunded" in result.output
    again = await agent.resume_checkpoint(
        paused.restart, RUN, durable=binding(agent, paused.store, RUN)
    )
    assert again.output == result.output
    assert lines(paused.log).count("refund A-17 500") == 1


async def test_a_decision_for_other_arguments_is_refused(paused: Paused) -> None:
    pending = await pending_approvals(paused.store, RUN)
    refund = next(a for a in pending if a.call_id == "c-refund")
    wrong = zincir_cli(paused.db, "approve", refund.approval_id, "--args-sha256", "0" * 64)
    assert wrong.returncode == 1 and "ApprovalMismatch" not in wrong.stdout
    with pytest.raises(zincir.ApprovalMismatch):
        await decide(paused.store, refund.approval_id, Approve(), args_sha256="f" * 64)
    assert [a.call_id for a in await pending_approvals(paused.store, RUN)] == ["c-refund", "c-ship"]


async def test_a_person_decides_and_a_resume_worker_finishes_the_run(paused: Paused) -> None:
    agent = build(paused.log)
    worker = zincir.ResumeWorker(paused.store, lease_ttl=timedelta(seconds=5)).max_attempts(1)
    finished: list[str] = []

    async def handler(ctx: zincir.AgentContext) -> None:
        await ctx.close()  # the agent takes the run itself
        result = await agent.resume_checkpoint(
            paused.restart, ctx.run_id, durable=binding(agent, paused.store, ctx.run_id)
        )
        finished.append(result.output)

    assert await worker.run_once(handler) == 0  # parked: nothing decided yet
    for approval in await pending_approvals(paused.store, RUN):
        decision = Approve() if approval.execution == "approval" else ExternalResult("sent")
        await decide(paused.store, approval.approval_id, decision)
    assert await worker.run_once(handler) == 1
    assert len(finished) == 1 and "refunded" in finished[0]
    assert select(paused.db, "SELECT status FROM agent_runs") == [("completed",)]


async def test_an_approval_that_expires_denies_its_call(store_target: str, tmp_path: Path) -> None:
    db, log = store_target, tmp_path / "log"
    assert pause_in_subprocess(db, log, "sql", timeout=0.3) == "saved 1\n"
    store = zincir.open_store(db)
    try:
        pending = await pending_approvals(store, RUN)
        assert all(a.expires_at is not None for a in pending)
        worker = zincir.ResumeWorker(store, lease_ttl=timedelta(seconds=5)).max_attempts(1)
        agent = build(log, approval_timeout=0.3)
        outputs: list[str] = []

        async def handler(ctx: zincir.AgentContext) -> None:
            await ctx.close()
            result = await agent.resume_checkpoint(
                SQLRestartStore(store), ctx.run_id, durable=binding(agent, store, ctx.run_id)
            )
            outputs.append(result.output)

        await asyncio.sleep(0.5)
        with pytest.raises(zincir.ApprovalExpired):
            await decide(store, pending[0].approval_id, Approve())
        assert await worker.run_once(handler) == 1  # woken by the expiry, not a message
        assert len(outputs) == 1 and "expired" in outputs[0]
        assert "refund A-17 500" not in lines(log)
    finally:
        await store.close()


async def test_a_decided_call_leaves_the_list_and_its_message_wakes_nothing_later(
    paused: Paused,
) -> None:
    refund = next(a for a in await pending_approvals(paused.store, RUN) if a.call_id == "c-refund")
    await decide(paused.store, refund.approval_id, Approve())
    agent = build(paused.log)
    again = await agent.resume_checkpoint(
        paused.restart, RUN, durable=binding(agent, paused.store, RUN)
    )
    assert again.paused is not None and [c.call_id for c in again.paused.calls] == ["c-ship"]
    assert [a.call_id for a in await pending_approvals(paused.store, RUN)] == ["c-ship"]
    worker = zincir.ResumeWorker(paused.store, lease_ttl=timedelta(seconds=5)).max_attempts(1)

    async def handler(ctx: zincir.AgentContext) -> None:
        raise AssertionError("the run waits for c-ship; the refund's decision was consumed")

    assert await worker.run_once(handler) == 0
    # a decision made in this process is recorded on its approval too
    await again.paused.save_checkpoint(paused.restart)
    done = await agent.resume_checkpoint(
        paused.restart,
        RUN,
        {"c-ship": ExternalResult("sent")},
        durable=binding(agent, paused.store, RUN),
    )
    assert done.paused is None
    decided = await paused.store.list_approvals(RUN, pending=False)
    assert all(row.decision_json is not None for row in decided)
    assert lines(paused.log).count("refund A-17 500") == 1


async def test_resume_checkpoint_stream_yields_the_rest_of_a_streamed_run(
    store_target: str, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    agent = build(log)
    handlers = Handlers(
        model_request="appr-model",
        model_stream="appr-stream",
        tool_call="appr-tools",
        approval_resume="appr-approvals",
    )
    async with zincir.open_store(store_target) as store:

        def bind() -> DurableBinding:
            registry = zincir.HandlerRegistry()
            serve(registry, agent, handlers)
            return DurableBinding(zincir.LocalRuntime(store, registry), RUN, handlers)

        first = agent.run_stream(PROMPT, durable=bind())
        assert [event async for event in first]
        assert first.result.paused is not None
        await first.result.paused.save_checkpoint(SQLRestartStore(store))

        with pytest.raises(zincir.InvalidInput, match="run_stream"):
            await agent.resume_checkpoint(SQLRestartStore(store), RUN, durable=bind())
        decisions = {"c-refund": Approve(), "c-ship": ExternalResult("sent")}
        stream = agent.resume_checkpoint_stream(
            SQLRestartStore(store), RUN, decisions, durable=bind()
        )
        events = [event async for event in stream]
        returned = [e.tool_call_id for e in events if isinstance(e, ToolReturnPart)]
        assert sorted(returned) == ["c-lookup", "c-refund", "c-ship"]
        assert stream.result.paused is None and "refunded" in stream.result.output
        assert lines(log).count("refund A-17 500") == 1 and lines(log).count("model 0") == 1
