"""Child runs: idempotent spawn under replay and a durable join on the child's outcome."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers import event_types, select
from zincir import AgentContext, InvalidInput, RunExists, RunNotFound, SQLiteStore
from zincir.workflow import ChildResult, WorkflowContext, WorkflowSuspended


async def test_spawn_is_idempotent_under_replay(store: SQLiteStore, store_url: str) -> None:
    ids = []
    for _ in range(3):  # the parent restarts and replays its code each time
        async with await WorkflowContext.open(store, "parent") as parent:
            ids.append(
                (
                    await parent.spawn("research", {"topic": "tides"}),
                    await parent.spawn("review", run_name="reviewer"),
                )
            )
    assert ids[0] == ids[1] == ids[2]
    research, review = ids[0]
    assert research != review
    assert select(
        store_url,
        "SELECT id, parent_id, spawn_name, name, status, config, lease_owner "
        "FROM agent_runs WHERE parent_id IS NOT NULL ORDER BY spawn_name",
    ) == [
        (research, "parent", "research", "research", "pending", '{"topic":"tides"}', None),
        (review, "parent", "review", "reviewer", "pending", "{}", None),
    ]
    assert event_types(store_url, "parent").count("child_spawned") == 2
    events = [e.payload for e in await store.list_events("parent") if e.type == "child_spawned"]
    assert events == [
        {"name": "research", "child_id": research},
        {"name": "review", "child_id": review},
    ]


async def test_spawn_with_an_explicit_id_and_bad_input(store: SQLiteStore) -> None:
    async with await WorkflowContext.open(store, "parent") as parent:
        assert await parent.spawn("a", run_id="child-a") == "child-a"
        assert await parent.spawn("a", run_id="ignored-on-replay") == "child-a"
        with pytest.raises(RunExists):
            await parent.spawn("b", run_id="parent")
        with pytest.raises(InvalidInput):
            await parent.spawn("")
        with pytest.raises(InvalidInput):
            await parent.join("parent")
        with pytest.raises(RunNotFound):
            await parent.join("no-such-run")


async def test_join_waits_for_the_child_result(store: SQLiteStore) -> None:
    async with await WorkflowContext.open(store, "parent", poll_interval=0.01) as parent:
        child_id = await parent.spawn("worker", {"n": 3})
        joining = asyncio.ensure_future(parent.join(child_id))
        await asyncio.sleep(0.05)
        assert not joining.done()
        async with await WorkflowContext.open(store, child_id) as child:
            squares = await child.step("compute", lambda: [i * i for i in range(3)])
            await child.complete({"squares": squares})
        outcome = await asyncio.wait_for(joining, 2)
        assert outcome == ChildResult(child_id, "completed", {"squares": [0, 1, 4]}, None)
        assert outcome.ok
        assert await parent.join(child_id) == outcome  # a replayed join
    async with await WorkflowContext.open(store, "parent") as parent:
        assert await parent.join(await parent.spawn("worker")) == outcome


async def test_join_reports_a_failed_child(store: SQLiteStore) -> None:
    async with await WorkflowContext.open(store, "parent") as parent:
        child_id = await parent.spawn("fragile")
        child = await AgentContext.recover(store, child_id)
        await child.fail("tool crashed twice")
        outcome = await parent.join(child_id)
    assert (outcome.status, outcome.result, outcome.error, outcome.ok) == (
        "failed",
        None,
        "tool crashed twice",
        False,
    )


async def test_suspended_join_records_the_wait(store: SQLiteStore, store_url: str) -> None:
    async with await WorkflowContext.open(store, "parent", suspend_waits=True) as parent:
        child_id = await parent.spawn("slow")
        with pytest.raises(WorkflowSuspended) as suspended:
            await parent.join(child_id)
        assert (suspended.value.kind, suspended.value.ref) == ("child", child_id)
    assert select(store_url, "SELECT wait_kind, wait_ref FROM agent_runs WHERE id = 'parent'") == [
        ("child", child_id)
    ]
    async with await WorkflowContext.open(store, child_id) as child:
        await child.complete("done")
    async with await WorkflowContext.open(store, "parent", suspend_waits=True) as parent:
        outcome = await parent.join(child_id)
    assert (outcome.status, outcome.result) == ("completed", "done")
    assert select(store_url, "SELECT wait_kind FROM agent_runs WHERE id = 'parent'") == [(None,)]
