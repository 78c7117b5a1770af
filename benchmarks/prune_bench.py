"""Retention figures for ``make bench``: the database size one 1,000-turn run costs, how
long a writer of a live run waits while ``prune_runs`` deletes old runs beside it, and
resuming a run of a million events before and after ``compact_run``.

A turn is a response with one tool intent and its result (two events, as ``AgentContext``
logs them). The writer appends to its own live run in a loop, first alone, then while a
prune deletes the finished runs; its per-write latency is compared between the two.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from datetime import timedelta
from typing import Any

import apsw

import zincir
from zincir import AgentContext, ToolCall, Verification, compact_run, prune_runs
from zincir.store import NewEvent
from zincir.testing import FakeClock

RESULT = {"rows": [{"id": i, "name": f"item {i}", "price": i * 1.5} for i in range(8)]}


def _size(path: str) -> int:
    """The database's size once its WAL is checkpointed into it."""
    conn = apsw.Connection(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return os.path.getsize(path)


async def _turns(ctx: AgentContext, turns: int) -> None:
    for turn in range(turns):
        call_id = f"call-{turn}"
        await ctx.record_response(
            f"turn {turn}: looking it up", [ToolCall(call_id, "lookup", {"item": turn})]
        )
        await ctx.record_tool_result(call_id, RESULT)


async def _write_latencies(ctx: AgentContext, stop: asyncio.Event) -> list[float]:
    latencies = []
    while not stop.is_set():
        started = time.perf_counter()
        await ctx.record_response("still working", [])
        latencies.append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(0.001)
    return latencies


def _quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _measure(path: str, runs: int, turns: int) -> dict[str, float]:
    clock = FakeClock()
    store = zincir.open_store(path, clock=clock)
    try:
        empty = _size(path)
        for i in range(runs):
            ctx = await AgentContext.create(store, "bench", run_id=f"old-{i:04}")
            await _turns(ctx, turns)
            await ctx.complete({"answer": i})
        size = _size(path) - empty
        clock.advance(timedelta(days=40).total_seconds())
        writer = await AgentContext.create(store, "bench", run_id="live-writer")
        stop = asyncio.Event()
        task = asyncio.create_task(_write_latencies(writer, stop))
        await asyncio.sleep(1.0)
        stop.set()
        alone = await task
        stop = asyncio.Event()
        task = asyncio.create_task(_write_latencies(writer, stop))
        started = time.perf_counter()
        report = await prune_runs(store, older_than=timedelta(days=30))
        elapsed = time.perf_counter() - started
        stop.set()
        during = await task
        await writer.close()
        assert report.runs == runs, report
        return {
            "prune_kb_per_1000_turn_run": size / runs / 1024 * 1000 / turns,
            "prune_runs_per_s": runs / elapsed,
            "prune_events_per_s": report.events / elapsed,
            "prune_longest_batch_ms": report.longest_batch_ms,
            "prune_writer_alone_p50_ms": statistics.median(alone),
            "prune_writer_alone_p99_ms": _quantile(alone, 0.99),
            "prune_writer_during_p50_ms": statistics.median(during),
            "prune_writer_during_p99_ms": _quantile(during, 0.99),
            "prune_writer_during_max_ms": max(during),
        }
    finally:
        await store.close()


def measure(bench: Any, run_async: Any) -> dict[str, float]:
    """The retention figures, on a SQLite file of ``bench``'s folder."""
    return dict(run_async(_measure(bench.db("prune"), bench.n(40, 8), bench.n(1000, 250))))


async def _long_run(path: str, events: int, after: int) -> str:
    """A run of ``events`` events whose accepted checkpoint leaves ``after`` of them after
    it (bulk-appended notes: the figure is about reading the log, not writing it)."""
    store = zincir.open_store(path, synchronous="normal")
    try:
        ctx = await AgentContext.create(store, "long", run_id="long")
        note = NewEvent("note", '{"text":"an observation the agent made"}')

        async def fill(count: int) -> None:
            while count > 0:
                batch = min(count, 5000)
                await store.append_events(ctx.lease, [note] * batch)
                count -= batch

        await fill(events - after - 3)
        await ctx.checkpoint({"completed": ["most"]}, lambda c: Verification(True))
        await fill(after)
        await ctx.release()
        return ctx.run_id
    finally:
        await store.close()


async def _compact(path: str, run_id: str) -> dict[str, float]:
    store = zincir.open_store(path, synchronous="normal")
    try:
        started = time.perf_counter()
        report = await compact_run(store, run_id)
        elapsed = time.perf_counter() - started
        return {
            "compact_events_per_s": report.archived / elapsed,
            "compact_longest_batch_ms": report.longest_batch_ms,
            "compact_archived": float(report.archived),
        }
    finally:
        await store.close()


def measure_compaction(bench: Any, run_async: Any, resume: Any) -> dict[str, float]:
    """Resume (``state()`` in a fresh process) of a long run before and after compaction."""
    events = bench.n(1_000_000, 100_000)
    path = bench.db("compact")
    run_id = run_async(_long_run(path, events, 10_000))
    before = resume(path, run_id)
    figures = run_async(_compact(path, run_id))
    after = resume(path, run_id)
    label = "1m" if events == 1_000_000 else f"{events // 1000}k"
    return {
        f"resume_{label}_before_compact_ms": before["ms"],
        f"resume_{label}_after_compact_ms": after["ms"],
        **figures,
    }
