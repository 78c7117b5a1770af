"""Reads that may scan a long log run off the event loop; short ones stay on it."""

from __future__ import annotations

import asyncio

import pytest

from zincir import AgentContext, SQLiteStore, ToolCall


async def _ticks_during(awaitable: object) -> tuple[object, int]:
    """What ``awaitable`` returned and how often another task ran while it was awaited."""
    ticks = 0
    stop = False

    async def ticker() -> None:
        nonlocal ticks
        while not stop:
            await asyncio.sleep(0)
            ticks += 1

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    start = ticks
    result = await awaitable  # type: ignore[misc]
    during = ticks - start
    stop = True
    await task
    return result, during


async def test_a_long_log_is_read_without_blocking_the_loop(store: SQLiteStore) -> None:
    ctx = await AgentContext.create(store, name="long", run_id="long")
    for n in range(200):
        await ctx.record_response("x", [ToolCall(f"c{n}", "t", {"n": n})])
    events, during = await _ticks_during(store.list_events("long"))
    assert len(events) == 401  # type: ignore[arg-type]
    assert during >= 1
    state, during = await _ticks_during(ctx.state())
    assert len(state.events) == 401 and during >= 1  # type: ignore[attr-defined]
    runs, during = await _ticks_during(store.list_runs(limit=1000))
    assert len(runs) == 1 and during >= 1  # type: ignore[arg-type]
    await ctx.close()


@pytest.mark.sqlite_only  # PostgreSQL reads are network round trips: always on a thread
async def test_a_short_read_stays_on_the_loop(store: SQLiteStore) -> None:
    ctx = await AgentContext.create(store, name="short", run_id="short")
    await ctx.record_response("x", [])
    events, during = await _ticks_during(store.list_events("short"))
    assert len(events) == 2 and during == 0  # type: ignore[arg-type]
    await ctx.close()
