"""Cancelling runs from outside: the run and (with cascade) its live descendants become
``cancelled`` in one transaction, the owner is fenced, no worker claims them again."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest

import zincir
from zincir import (
    AgentContext,
    InvalidInput,
    ResumeWorker,
    RunCancelled,
    RunNotFound,
    RunTerminal,
    WorkflowContext,
    cancel_run,
)
from zincir.store import Store


async def _events(store: Store, run_id: str) -> list[tuple[int, str, Any]]:
    return [(e.seq, e.type, e.payload) for e in await store.list_events(run_id)]


async def test_cancel_fences_the_owner_and_logs_the_transition(store: Store) -> None:
    ctx = await AgentContext.create(store, "agent", run_id="r1")
    await ctx.record_response("thinking", [])
    assert await cancel_run(store, "r1", reason="operator stop") == ["r1"]

    run = await store.get_run("r1")
    assert run is not None
    assert run["status"] == "cancelled"
    assert run["lease_owner"] is None
    assert run["last_error"] == "cancelled: operator stop"
    events = await _events(store, "r1")
    assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1))
    assert events[-1][1:] == (
        "state_transition",
        {"from": "running", "to": "cancelled", "reason": "operator stop"},
    )
    with pytest.raises(RunCancelled) as raised:
        await ctx.record_response("more", [])
    assert "r1" in str(raised.value)
    assert await _events(store, "r1") == events  # the fenced write stored nothing
    with pytest.raises(RunCancelled):
        await AgentContext.recover(store, "r1")
    with pytest.raises(RunCancelled):
        await AgentContext.force_recover(store, "r1")


async def test_cascade_cancels_live_descendants_only(store: Store) -> None:
    parent = await WorkflowContext.open(store, "parent")
    first = await parent.spawn("first")
    second = await parent.spawn("second")
    done = await parent.spawn("done")
    child = await WorkflowContext.open(store, first)
    grandchild = await child.spawn("grand")
    await child.close()
    finished = await WorkflowContext.open(store, done)
    await finished.complete({"ok": True})

    assert await cancel_run(store, "parent", cascade=True) == [
        "parent",
        *sorted([first, second, grandchild]),
    ]
    for run_id in (first, second, grandchild):
        run = await store.get_run(run_id)
        assert run is not None and run["status"] == "cancelled"
        last = (await _events(store, run_id))[-1]
        assert last[2]["cancelled_with"] == "parent"
    finished_row = await store.get_run(done)
    assert finished_row is not None and finished_row["status"] == "completed"
    with pytest.raises(RunCancelled):
        await parent.step("late", lambda: 1)


async def test_without_cascade_children_keep_running(store: Store) -> None:
    parent = await WorkflowContext.open(store, "parent")
    child_id = await parent.spawn("child")
    assert await cancel_run(store, "parent") == ["parent"]
    child = await store.get_run(child_id)
    assert child is not None and child["status"] == "pending"
    # A cancelled parent can still cascade later: the child is live.
    assert await cancel_run(store, "parent", cascade=True) == [child_id]


async def test_refusals_change_nothing(store: Store) -> None:
    ctx = await AgentContext.create(store, "agent", run_id="done")
    await ctx.complete({"answer": 1})
    before = await _events(store, "done")
    with pytest.raises(RunTerminal) as raised:
        await cancel_run(store, "done")
    assert not isinstance(raised.value, RunCancelled)
    assert await _events(store, "done") == before
    with pytest.raises(RunNotFound):
        await cancel_run(store, "missing")

    live = await AgentContext.create(store, "agent", run_id="live")
    for bad in (
        {"reason": "x" * 5000},
        {"reason": 42},
        {"reason": "nul \x00 inside"},
        {"reason": "lone \ud800 surrogate"},
        {"cascade": "yes"},
    ):
        with pytest.raises(InvalidInput):
            await cancel_run(store, "live", **bad)
    with pytest.raises(InvalidInput):
        await cancel_run(store, "")
    row = await store.get_run("live")
    assert row is not None and row["status"] == "running"
    assert len(await _events(store, "live")) == 1

    assert await cancel_run(store, "live") == ["live"]
    events = await _events(store, "live")
    assert await cancel_run(store, "live") == []  # already cancelled: nothing more
    assert await _events(store, "live") == events
    await live.close()


async def test_heartbeat_reports_the_cancellation(store: Store) -> None:
    ctx = await AgentContext.create(store, "agent", run_id="beating", lease_ttl=1.5)
    await cancel_run(store, "beating")
    deadline = asyncio.get_running_loop().time() + 5
    while True:
        try:
            ctx.check_lease()
        except RunCancelled:
            break
        assert asyncio.get_running_loop().time() < deadline, "the heartbeat never noticed"
        await asyncio.sleep(0.1)
    await ctx.close()


async def test_resume_worker_never_claims_a_cancelled_run(store: Store) -> None:
    parent = await WorkflowContext.open(store, "owner")
    for name in ("a", "b", "c"):
        await parent.spawn(name, run_id=f"job-{name}")
    await parent.close()
    await cancel_run(store, "job-b")

    worker = ResumeWorker(store, lease_ttl=timedelta(seconds=30))
    claimed = {lease.run_id for lease in await worker.claim(10)}
    assert claimed == {"owner", "job-a", "job-c"}
    assert await worker.claim(10) == []
    row = await store.get_run("job-b")
    assert row is not None and row["status"] == "cancelled" and row["lease_owner"] is None


def test_cli_cancel(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from zincir.cli import main

    path = str(tmp_path / "cli.db")

    async def setup() -> None:
        store = zincir.open_store(path)
        parent = await WorkflowContext.open(store, "parent")
        await parent.spawn("child", run_id="kid")
        await parent.close()
        await store.close()

    asyncio.run(setup())
    runner = CliRunner()
    result = runner.invoke(
        main, ["runs", "cancel", "parent", "--db", path, "--reason", "stop", "--cascade"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.split() == ["cancelled", "parent", "cancelled", "kid"]
    again = runner.invoke(main, ["runs", "cancel", "parent", "--db", path])
    assert again.exit_code == 0 and "already cancelled" in again.output
    missing = runner.invoke(main, ["runs", "cancel", "nope", "--db", path])
    assert missing.exit_code == 1 and "nope" in missing.output

    shown = runner.invoke(main, ["runs", "show", "parent", "--db", path])
    assert "cancelled" in shown.output
    transition = json.loads(
        next(line for line in shown.output.splitlines() if '"to":"cancelled"' in line).split(
            "state_transition", 1
        )[1]
    )
    assert transition["reason"] == "stop"
