"""A paused durable run is parked: a ResumeWorker claims it only once a decision arrives."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import zincir
from tests.agent.approval_worker import PROMPT, binding, build
from tests.helpers import select
from zincir.agent import APPROVAL_TOPIC, Approve, ExternalResult
from zincir.store import Store


async def test_a_paused_run_waits_for_its_decision_not_for_a_worker(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    db, log = store_url, tmp_path / "log"
    agent = build(log)
    result = await agent.run(PROMPT, durable=binding(agent, store, "parked"))
    assert result.paused is not None
    assert select(db, "SELECT status, lease_owner, wait_kind, wait_ref FROM agent_runs") == [
        ("running", None, "message", APPROVAL_TOPIC)
    ]
    seen: list[str] = []

    async def handler(ctx: zincir.AgentContext) -> None:
        seen.append(ctx.run_id)
        await ctx.close()

    worker = zincir.ResumeWorker(store, lease_ttl=timedelta(seconds=5)).max_attempts(1)
    for _ in range(3):  # never claimed, so its single attempt is never spent
        assert await worker.run_once(handler) == 0
    assert select(db, "SELECT status, attempts FROM agent_runs") == [("running", 0)]

    await zincir.send_message(store, "parked", APPROVAL_TOPIC, {"decided": True})
    assert await worker.run_once(handler) == 1 and seen == ["parked"]

    # Resuming the run clears the wait; completing it leaves no wait behind.
    paused = await agent.paused_run(durable=binding(agent, store, "parked"))
    assert paused is not None
    decisions = {
        call.call_id: Approve() if call.execution == "approval" else ExternalResult("sent")
        for call in paused.calls
    }
    done = await agent.resume(paused, decisions, durable=binding(agent, store, "parked"))
    assert done.paused is None
    assert select(db, "SELECT status, wait_kind, wait_ref FROM agent_runs") == [
        ("completed", None, None)
    ]
