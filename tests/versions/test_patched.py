"""``patched(id)``: new code branches around runs that already passed a point, and every
replay of a run answers the same."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import zincir
from zincir import AgentContext, WorkflowContext
from zincir.store import Store


async def markers(store: Store, run_id: str) -> list[Any]:
    events = await store.list_events(run_id)
    return [event.payload for event in events if event.type == "patch_marker"]


async def test_a_run_reaching_the_point_on_new_code_is_patched_across_takeovers(
    store: Store,
) -> None:
    async with await WorkflowContext.open(store, "r") as wf:
        assert await wf.step("fetch", lambda: 1) == 1
        assert await wf.patched("new-path") is True
        assert await wf.patched("new-path") is True  # one marker, however often it is asked
        assert await wf.step("quote", lambda: 2) == 2
    assert await markers(store, "r") == [{"id": "new-path"}]
    for _ in range(2):  # every later owner replays the same branch
        async with await WorkflowContext.open(store, "r") as wf:
            assert await wf.step("fetch", lambda: 1) == 1
            assert await wf.patched("new-path") is True
            assert await wf.step("quote", lambda: 3) == 2
            assert await wf.unreplayed() == []
    assert await markers(store, "r") == [{"id": "new-path"}]


async def test_a_run_that_passed_the_point_without_the_marker_keeps_the_old_path(
    store: Store,
) -> None:
    async with await WorkflowContext.open(store, "r") as wf:  # old code: no patched() call
        await wf.step("fetch", lambda: 1)
        await wf.step("price", lambda: 2)
    for _ in range(2):
        async with await WorkflowContext.open(store, "r") as wf:
            assert await wf.step("fetch", lambda: 1) == 1
            assert await wf.patched("new-path") is False
            assert await wf.step("price", lambda: 9) == 2
            assert await wf.step("notify", lambda: 3) == 3
            # Asked again past the recorded work, the answer for this run does not change.
            assert await wf.patched("new-path") is False
    assert await markers(store, "r") == []


async def test_a_run_that_stopped_before_the_point_takes_the_new_path(store: Store) -> None:
    async with await WorkflowContext.open(store, "r") as wf:
        await wf.step("fetch", lambda: 1)
    async with await WorkflowContext.open(store, "r") as wf:
        assert await wf.step("fetch", lambda: 1) == 1
        assert await wf.patched("new-path") is True
    assert await markers(store, "r") == [{"id": "new-path"}]


async def test_concurrent_calls_record_one_marker(store: Store) -> None:
    async with await WorkflowContext.open(store, "r") as wf:
        answers = await asyncio.gather(*(wf.patched("p") for _ in range(5)))
    assert answers == [True] * 5
    assert await markers(store, "r") == [{"id": "p"}]


async def test_an_agent_context_is_patched_the_same_way(store: Store) -> None:
    ctx = await AgentContext.create(store, "agent", run_id="a")
    try:
        assert await ctx.patched("fix-1") is True
        assert await ctx.unreplayed() == []
    finally:
        await ctx.close()
    ctx = await AgentContext.recover(store, "a")
    try:
        assert await ctx.patched("fix-1") is True
    finally:
        await ctx.close()
    assert await markers(store, "a") == [{"id": "fix-1"}]


async def test_a_bad_patch_id_is_refused_and_a_fenced_context_records_nothing(
    store: Store,
) -> None:
    ctx = await AgentContext.create(store, "agent", run_id="a")
    try:
        with pytest.raises(zincir.InvalidInput):
            await ctx.patched("")
        newer = await AgentContext.force_recover(store, "a")
        with pytest.raises(zincir.FencedOut):
            await ctx.patched("fix-1")
        await newer.close()
    finally:
        await ctx.close()
    assert await markers(store, "a") == []
