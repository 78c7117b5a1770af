"""Bad input to runs and the ResumeWorker: a zincir error, and nothing stored.

Each case was found by probing: before the fix it raised a non-zincir error
(UnicodeEncodeError, OverflowError, TypeError) or wrote first and failed after.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import zincir
from tests.helpers import count, select
from zincir import AgentContext, ResumeWorker, SQLiteStore, ToolCall, Verification

COLLIDING_KEYS: list[Any] = [{1: "a", "1": "b"}, {True: 1, "true": 2}, {None: 0}, {1.5: "x"}]


def _deep(levels: int) -> Any:
    value: Any = []
    for _ in range(levels):
        value = [value, 1]
    return value


def _snapshot(target: str) -> list[Any]:
    return [
        select(target, f"SELECT * FROM {table} ORDER BY 1, 2")
        for table in ("agent_runs", "events", "checkpoints", "open_intents")
    ]


@pytest.mark.parametrize("ttl", [1e20, -1e20, float("nan"), timedelta.max, "30", None])
async def test_lease_ttls_that_cannot_be_stored(
    store: SQLiteStore, store_url: str, ttl: Any
) -> None:
    with pytest.raises(zincir.InvalidLeaseTtl):
        await AgentContext.create(store, name="n", lease_ttl=ttl)
    assert count(store_url, "agent_runs") == 0


@pytest.mark.parametrize("parent", [5, "", "no-such-run", "p\x00"])
async def test_a_parent_must_be_an_existing_run(
    store: SQLiteStore, store_url: str, parent: Any
) -> None:
    with pytest.raises((zincir.InvalidInput, zincir.RunNotFound)):
        await AgentContext.create(store, name="child", parent_id=parent)
    assert count(store_url, "agent_runs") == 0


@pytest.mark.parametrize("run_id", ["bad-\udc80", "a\x00b", "x" * 257, 7])
async def test_run_ids_follow_one_rule(store: SQLiteStore, store_url: str, run_id: Any) -> None:
    with pytest.raises(zincir.InvalidInput):
        await AgentContext.create(store, name="n", run_id=run_id)
    with pytest.raises(zincir.InvalidInput):
        await AgentContext.recover(store, run_id)
    assert count(store_url, "agent_runs") == 0


@pytest.mark.parametrize("name", ["", "step\x00one", "bad-\udc80", 3])
async def test_run_names_follow_the_id_rule(store: SQLiteStore, store_url: str, name: Any) -> None:
    with pytest.raises(zincir.InvalidInput):
        await AgentContext.create(store, name=name)
    assert count(store_url, "agent_runs") == 0


@pytest.mark.parametrize(
    "value", [*COLLIDING_KEYS, _deep(300), "lone-\udc80", {"k": {"\ud800": 1}}]
)
async def test_values_that_would_not_read_back_are_refused(
    store: SQLiteStore, store_url: str, value: Any
) -> None:
    with pytest.raises(zincir.NotJsonSerializable):
        await AgentContext.create(store, name="n", config=value)
    ctx = await AgentContext.create(store, name="n", run_id="r")
    await ctx.record_response("ok", [ToolCall("c1", "t", {})])
    before = _snapshot(store_url)
    with pytest.raises(zincir.NotJsonSerializable):
        await ctx.record_response(value, [])
    with pytest.raises(zincir.NotJsonSerializable):
        await ctx.record_response("x", [ToolCall("c2", "t", {"v": value})])
    with pytest.raises(zincir.NotJsonSerializable):
        await ctx.record_tool_result("c1", value)
    with pytest.raises(zincir.NotJsonSerializable):
        await ctx.checkpoint({"completed": [value]}, lambda c: Verification(True))
    with pytest.raises(zincir.NotJsonSerializable):
        await ctx.complete(value)
    assert _snapshot(store_url) == before
    # Every read of the run still works.
    assert len((await ctx.state()).events) == 3
    assert [call.id for call in await ctx.pending_tools()] == ["c1"]
    await ctx.close()


async def test_the_deepest_accepted_value_reads_back(store: SQLiteStore) -> None:
    deep = _deep(200)
    ctx = await AgentContext.create(store, name="n", config=deep)
    await ctx.record_response(deep, [])
    state = await ctx.state()
    assert state.config == deep and state.events[-1].payload["content"] == deep
    await ctx.close()


@pytest.mark.parametrize("call_id", ["bad-\udc80", "x" * 300, "a\nb", 5, ""])
async def test_tool_call_ids_follow_the_id_rule(
    store: SQLiteStore, store_url: str, call_id: Any
) -> None:
    ctx = await AgentContext.create(store, name="n", run_id="r")
    before = _snapshot(store_url)
    with pytest.raises(zincir.InvalidInput):
        await ctx.record_response("x", [ToolCall(call_id, "t", {})])
    with pytest.raises(zincir.InvalidInput):
        await ctx.record_tool_result(call_id, 1)
    assert _snapshot(store_url) == before
    await ctx.close()


@pytest.mark.parametrize("verify", [None, "yes", 42])
async def test_a_verifier_that_is_not_callable_stores_nothing(
    store: SQLiteStore, store_url: str, verify: Any
) -> None:
    ctx = await AgentContext.create(store, name="n", run_id="r")
    before = _snapshot(store_url)
    with pytest.raises(zincir.InvalidInput, match="verify"):
        await ctx.checkpoint({"completed": ["a"]}, verify)
    assert _snapshot(store_url) == before
    assert await ctx.pending_checkpoint() is None
    await ctx.close()


async def test_a_plain_function_verifies_too(store: SQLiteStore) -> None:
    ctx = await AgentContext.create(store, name="n", run_id="r")
    outcome = await ctx.checkpoint(
        {"completed": ["a"]}, lambda candidate: Verification(True, {"sync": True})
    )
    assert outcome.accepted
    assert (await ctx.state()).checkpoint is not None
    await ctx.close()


@pytest.mark.parametrize(
    "setting",
    [
        lambda w: w.poll_interval(1e20),
        lambda w: w.poll_interval(timedelta.max),
        lambda w: w.poll_interval(0),
        lambda w: w.backoff(1e20),
        lambda w: w.backoff(1, maximum=timedelta.max),
        lambda w: w.backoff(1, factor=1e300),
        lambda w: w.max_concurrency(True),
        lambda w: w.max_concurrency(10**30),
        lambda w: w.max_attempts(0),
        lambda w: w.max_attempts("3"),
    ],
)
async def test_worker_settings_that_cannot_work(store: SQLiteStore, setting: Any) -> None:
    with pytest.raises(zincir.InvalidInput):
        setting(ResumeWorker(store))
    with pytest.raises(zincir.InvalidInput):
        ResumeWorker(store, lease_ttl=1e20)


async def test_worker_backoff_of_many_attempts_stays_finite(store: SQLiteStore) -> None:
    worker = ResumeWorker(store).backoff(1, factor=10, maximum=timedelta(days=1))
    assert worker.delay(10_000) == timedelta(days=1)
