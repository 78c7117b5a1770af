"""Pruning old terminal runs: exactly the selected runs go, each with every row it owns, in
bounded transactions, while live and paused runs and other writers are left alone."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import timedelta
from typing import Any

import pytest

import zincir
from tests.helpers import select
from zincir import (
    AgentContext,
    InvalidInput,
    Invocation,
    LocalRuntime,
    OperationKind,
    ToolCall,
    WorkflowContext,
    WorkflowSuspended,
    cancel_run,
    prune_runs,
    send_message,
)
from zincir.durable import HandlerRegistry
from zincir.store import Store
from zincir.store._lifecycle import RUN_TABLES
from zincir.testing import FakeClock

DAY = 86_400.0


def _rows_of(target: str, run_id: str) -> dict[str, str]:
    """A digest of every row run ``run_id`` owns, per table (empty tables left out)."""
    found = {}
    for table, column in (*RUN_TABLES, ("agent_runs", "id")):
        rows = select(target, f"SELECT * FROM {table} WHERE {column} = ?", (run_id,))
        if rows:
            found[table] = hashlib.sha256(repr(sorted(map(repr, rows))).encode()).hexdigest()
    return found


async def _rich_finished_runs(store: Store, clock: FakeClock) -> None:
    """Two completed runs with rows in most tables: "old-done" (events, an open intent, an
    operation, a message in its inbox) and "old-wf" (a step, a timer)."""
    ctx = await AgentContext.create(store, "agent", run_id="old-done")
    await ctx.record_response("", [ToolCall("call-1", "lookup", {"q": 1})])
    runtime = LocalRuntime(store, HandlerRegistry())
    invocation = Invocation("old-done", "tool.call", 0, OperationKind.TOOL_CALL, "h", "{}")
    await runtime.execute(invocation, inline=lambda inv, request: {"ok": True})
    await send_message(store, "old-done", "inbox", {"hello": 1})
    await ctx.complete({"done": True})
    wf = await WorkflowContext.open(store, "old-wf", sleeper=clock.sleep)
    await wf.step("fetch", lambda: 1)
    await wf.sleep("pause", 1)
    await wf.complete({"done": True})


@pytest.fixture
def target(store_url: str) -> str:
    return store_url


async def test_prune_deletes_exactly_the_selected_runs(
    fake_store: Store, clock: FakeClock, target: str
) -> None:
    store = fake_store
    await _rich_finished_runs(store, clock)
    failed = await AgentContext.create(store, "agent", run_id="old-failed")
    await failed.fail("boom")
    await AgentContext.create(store, "agent", run_id="old-cancelled")
    await cancel_run(store, "old-cancelled")
    live = await AgentContext.create(store, "agent", run_id="old-live", lease_ttl=3600)
    paused = await WorkflowContext.open(store, "old-paused", suspend_waits=True)
    with pytest.raises(WorkflowSuspended):
        await paused.recv("approval")  # parked: waits for a message
    keeper = await WorkflowContext.open(store, "old-parent")  # finishes, a child stays live
    live_child = await keeper.spawn("child", run_id="old-live-child")
    await keeper.send(live_child, "work", {"n": 1})
    await keeper.complete()
    tree = await WorkflowContext.open(store, "old-tree")  # finishes with a finished child
    leaf = await tree.spawn("leaf", run_id="old-leaf")
    await (await WorkflowContext.open(store, leaf)).complete()
    await tree.complete()

    clock.advance(40 * DAY)
    recent = await AgentContext.create(store, "agent", run_id="recent-done")
    await recent.complete()
    await live.record_response("still working", [])

    pruned = {"old-done", "old-wf", "old-failed", "old-cancelled", "old-tree", "old-leaf"}
    kept = {"old-live", "old-paused", "old-parent", "old-live-child", "recent-done"}
    assert set(_rows_of(target, "old-done")) >= {
        "events",
        "open_intents",
        "operations",
        "messages",
        "agent_runs",
    }
    assert set(_rows_of(target, "old-wf")) >= {"events", "step_claims", "timers", "agent_runs"}
    assert select(target, "SELECT wait_kind FROM agent_runs WHERE id = ?", ("old-paused",)) == [
        ("message",)
    ]
    before = {run_id: _rows_of(target, run_id) for run_id in kept}

    report = await prune_runs(store, older_than=timedelta(days=30))
    assert set(report.run_ids) == pruned
    assert report.runs == len(pruned)
    for run_id in pruned:
        assert _rows_of(target, run_id) == {}, run_id
    assert {run_id: _rows_of(target, run_id) for run_id in kept} == before
    # The message the finished parent sent stays in its live child's inbox.
    inbox = select(target, "SELECT topic FROM messages WHERE to_run_id = ?", ("old-live-child",))
    assert inbox == [("work",)]
    again = await prune_runs(store, older_than=timedelta(days=30))
    assert again.runs == 0 and again.batches == 0
    await live.close()


async def test_statuses_and_age_select(fake_store: Store, clock: FakeClock) -> None:
    store = fake_store
    done = await AgentContext.create(store, "agent", run_id="done")
    await done.complete()
    failed = await AgentContext.create(store, "agent", run_id="failed")
    await failed.fail("x")
    clock.advance(2 * DAY)
    report = await prune_runs(store, older_than=timedelta(days=3))
    assert report.runs == 0
    report = await prune_runs(store, older_than=timedelta(days=1), statuses=["failed"])
    assert report.run_ids == ["failed"]
    assert await store.get_run("done") is not None
    report = await prune_runs(store, older_than=DAY, statuses="completed")
    assert report.run_ids == ["done"]


async def test_batches_hold_whole_runs_within_the_budget(
    fake_store: Store, clock: FakeClock, target: str
) -> None:
    store = fake_store
    sizes = {}
    for i in range(12):
        ctx = await AgentContext.create(store, "agent", run_id=f"run-{i:02}")
        for k in range(i % 4):
            await ctx.record_response(f"turn {k}", [])
        await ctx.complete()
        row = await store.get_run(f"run-{i:02}")
        assert row is not None
        sizes[f"run-{i:02}"] = int(row["last_seq"])
    clock.advance(DAY)
    report = await prune_runs(store, older_than=0, batch_events=6)
    assert sorted(report.run_ids) == sorted(sizes)
    assert report.events == sum(sizes.values())
    assert report.batches >= sum(sizes.values()) // 6
    assert select(target, "SELECT COUNT(*) FROM events") == [(0,)]


async def test_bad_input_deletes_nothing(fake_store: Store, clock: FakeClock) -> None:
    store = fake_store
    ctx = await AgentContext.create(store, "agent", run_id="done")
    await ctx.complete()
    clock.advance(DAY)
    bad: list[dict[str, Any]] = [
        {"older_than": -1},
        {"older_than": "30d"},
        {"older_than": 0, "statuses": ["running"]},
        {"older_than": 0, "statuses": ["completed", "pending"]},
        {"older_than": 0, "statuses": []},
        {"older_than": 0, "batch_events": 0},
        {"older_than": 0, "batch_events": 1.5},
    ]
    for arguments in bad:
        with pytest.raises(InvalidInput):
            await prune_runs(store, **arguments)
    assert await store.get_run("done") is not None


async def test_prune_beside_eight_writers(store_url: str) -> None:
    clock = FakeClock()
    store = zincir.open_store(store_url, clock=clock)
    try:
        for i in range(60):
            ctx = await AgentContext.create(store, "agent", run_id=f"old-{i:03}")
            for k in range(5):
                await ctx.record_response(f"turn {k}", [])
            await ctx.complete()
        clock.advance(2 * DAY)
        writers = [
            await AgentContext.create(store, "agent", run_id=f"writer-{w}") for w in range(8)
        ]
        stop = asyncio.Event()
        written = [0] * len(writers)

        async def write(index: int) -> None:
            while not stop.is_set():
                await writers[index].record_response(f"step {written[index]}", [])
                written[index] += 1
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(write(i)) for i in range(len(writers))]
        report = await prune_runs(store, older_than=DAY, batch_events=30)
        stop.set()
        await asyncio.gather(*tasks)
        assert sorted(report.run_ids) == [f"old-{i:03}" for i in range(60)]
        assert report.batches >= 10
        for index, ctx in enumerate(writers):
            events = await store.list_events(ctx.run_id)
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            assert len(events) == 1 + written[index]
            await ctx.close()
        assert min(written) > 0
    finally:
        await store.close()


def test_cli_prune(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from zincir.cli import main

    path = str(tmp_path / "cli.db")

    async def setup() -> None:
        store = zincir.open_store(path)
        for i in range(3):
            ctx = await AgentContext.create(store, "agent", run_id=f"done-{i}")
            await ctx.complete()
        await AgentContext.create(store, "agent", run_id="live")
        await store.close()

    asyncio.run(setup())
    runner = CliRunner()
    kept = runner.invoke(main, ["prune", "--older-than", "30d", "--db", path])
    assert kept.exit_code == 0, kept.output
    assert kept.output.startswith("pruned 0 runs")
    result = runner.invoke(main, ["prune", "--older-than", "0s", "--db", path])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("pruned 3 runs (6 events) in 1 transactions")
    assert select(path, "SELECT id FROM agent_runs") == [("live",)]
    for bad in (["--older-than", "soon"], ["--older-than", "1d", "--status", "running"]):
        refused = runner.invoke(main, ["prune", "--db", path, *bad])
        assert refused.exit_code != 0
    assert select(path, "SELECT id FROM agent_runs") == [("live",)]
