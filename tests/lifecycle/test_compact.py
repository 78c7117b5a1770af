"""Compaction behind accepted checkpoints: the live log shrinks, nothing a reader relies on
changes (state(), the whole log in seq order, open intents, used tool call ids)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.helpers import select
from zincir import (
    AgentContext,
    Budget,
    BudgetExceeded,
    DuplicateToolCall,
    InvalidInput,
    RunNotFound,
    ToolCall,
    Verification,
    compact_run,
)
from zincir.store import NewEvent, Store


async def _events(store: Store, run_id: str) -> list[tuple[int, str, Any]]:
    return [(e.seq, e.type, e.payload) for e in await store.list_events(run_id)]


async def test_a_long_run_compacts_without_changing_what_readers_see(
    store: Store, store_url: str
) -> None:
    ctx = await AgentContext.create(store, "agent", run_id="long")
    await ctx.record_response("start", [ToolCall("open-1", "slow", {"n": 1})])  # stays open
    for batch in range(20):
        await store.append_events(
            ctx.lease, [NewEvent("note", f'{{"n":{batch * 5000 + i}}}') for i in range(5000)]
        )
    await ctx.record_response("answer", [ToolCall("done-1", "fast", {})])
    await ctx.record_tool_result("done-1", {"ok": True})
    await ctx.checkpoint({"completed": ["most"]}, lambda c: Verification(True))
    await ctx.record_response("after the checkpoint", [])
    state = await ctx.state()
    log = await _events(store, "long")
    assert len(log) > 100_000

    report = await compact_run(store, "long", batch_events=20_000)
    assert report.through_seq == state.checkpoint.decided_seq  # type: ignore[union-attr]
    assert report.kept == 1 and report.batches >= 5
    assert report.archived == report.through_seq - 1  # all but the open intent
    assert await ctx.state() == state
    assert await _events(store, "long") == log  # the whole log, merged by seq
    live = select(store_url, "SELECT COUNT(*) FROM events WHERE run_id = ?", ("long",))[0][0]
    assert live == len(log) - report.archived
    assert await ctx.pending_tools() == [ToolCall("open-1", "slow", {"n": 1})]
    # The run goes on: new events continue the gapless sequence.
    await ctx.record_tool_result("open-1", {"ok": True})
    seqs = [seq for seq, _, _ in await _events(store, "long")]
    assert seqs == list(range(1, len(seqs) + 1))
    # A tool call id archived stays used.
    with pytest.raises(DuplicateToolCall):
        await ctx.record_response("again", [ToolCall("done-1", "fast", {})])
    with pytest.raises(DuplicateToolCall):
        await ctx.record_tool_result("done-1", {"ok": True})
    assert [seq for seq, _, _ in await _events(store, "long")] == seqs
    again = await compact_run(store, "long")
    assert (again.archived, again.kept) == (1, 0)  # the intent, answered since
    assert (await compact_run(store, "long")).archived == 0
    await ctx.close()

    resumed = await AgentContext.recover(store, "long")
    assert (await resumed.state()).checkpoint == state.checkpoint
    await resumed.close()


async def test_nothing_moves_without_an_accepted_checkpoint(store: Store) -> None:
    ctx = await AgentContext.create(store, "agent", run_id="fresh")
    await ctx.record_response("one", [])
    await ctx.checkpoint({}, lambda c: Verification(False))  # rejected
    before = await _events(store, "fresh")
    report = await compact_run(store, "fresh")
    assert (report.archived, report.through_seq) == (0, 0)
    assert await _events(store, "fresh") == before
    with pytest.raises(RunNotFound):
        await compact_run(store, "missing")
    for bad in (0, -1, "10"):
        with pytest.raises(InvalidInput):
            await compact_run(store, "fresh", batch_events=bad)  # type: ignore[arg-type]
    await ctx.close()


async def test_a_durable_agent_resumes_after_compaction(store: Store, tmp_path: Path) -> None:
    from tests.agent.reference import HANDLERS, build, lines
    from zincir.agent import DurableBinding, serve

    log_path = tmp_path / "agent.log"
    agent = build(log_path)
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    runtime = zincir.LocalRuntime(store, registry)
    tight = DurableBinding(runtime, "agent-run", HANDLERS, budget=Budget(model_requests=2))
    with pytest.raises(BudgetExceeded):
        await agent.run("Use both tools.", durable=tight)
    ran = lines(log_path)
    assert ran == ["model 0", "tool first 1", "model 1", "tool second 2"]
    owner = await AgentContext.recover(store, "agent-run")
    await owner.checkpoint({"completed": ["two tools"]}, lambda c: Verification(True))
    await owner.close()
    report = await compact_run(store, "agent-run")
    assert report.archived > 5
    log = await _events(store, "agent-run")

    loose = DurableBinding(runtime, "agent-run", HANDLERS, budget=Budget(model_requests=10))
    result = await agent.run("Use both tools.", durable=loose)
    assert lines(log_path) == [*ran, "model 2"]  # nothing archived ran again
    after = await _events(store, "agent-run")
    assert after[: len(log)] == log  # nothing logged again either
    assert [seq for seq, _, _ in after] == list(range(1, len(after) + 1))
    assert result.output


def test_cli_compact(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from zincir.cli import main

    path = str(tmp_path / "cli.db")

    async def setup() -> None:
        store = zincir.open_store(path)
        ctx = await AgentContext.create(store, "agent", run_id="r")
        for turn in range(10):
            await ctx.record_response(f"turn {turn}", [])
        await ctx.checkpoint({}, lambda c: Verification(True))
        await ctx.close()
        await store.close()

    asyncio.run(setup())
    runner = CliRunner()
    result = runner.invoke(main, ["compact", "r", "--db", path, "--batch-events", "4"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("archived 13 events of run r through seq 13 in 4 transactions")
    missing = runner.invoke(main, ["compact", "nope", "--db", path])
    assert missing.exit_code == 1 and "nope" in missing.output


def test_cli_compact_says_how_many_stream_deltas_it_dropped(tmp_path: Any) -> None:
    """A run without an accepted checkpoint archives no event, but the deltas of its answered
    model requests still go, and the command says so."""
    import json
    from datetime import timedelta

    from click.testing import CliRunner

    from zincir.cli import main
    from zincir.store import NewStreamItem

    path = str(tmp_path / "cli.db")

    async def setup() -> None:
        store = zincir.open_store(path)
        lease = await store.create_run("r", name="agent", owner="one", ttl=timedelta(seconds=30))
        deltas = [
            NewStreamItem("part_start", json.dumps({"request": 1, "index": 0})),
            NewStreamItem("part_delta", json.dumps({"request": 1, "index": 0, "delta": "Hi"})),
            NewStreamItem("part_end", json.dumps({"request": 1, "index": 0})),
        ]
        message = NewStreamItem("message", json.dumps({"request": 1}), "message:1")
        await store.append_stream(lease, [*deltas, message])
        await store.close()

    asyncio.run(setup())
    result = CliRunner().invoke(main, ["compact", "r", "--db", path])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (
        "run r has no accepted checkpoint; no event was archived; "
        "dropped 3 stream deltas of answered model requests"
    )
