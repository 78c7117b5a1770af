"""Claim-ahead: a step's result transaction also claims the step the code runs next."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.helpers import event_types, select
from zincir import AgentContext, InvalidInput, SQLiteStore, StepInProgress
from zincir import _telemetry as telemetry
from zincir.store import Store
from zincir.workflow import WorkflowContext


def steps_table(target: str) -> list[tuple[Any, ...]]:
    return select(target, "SELECT name, status, claim_token, result FROM steps ORDER BY name")


async def test_the_next_step_is_claimed_with_the_result(store: Store, store_url: str) -> None:
    calls: list[str] = []
    async with await WorkflowContext.open(store, "wf") as wf:
        assert await wf.step("a", lambda: calls.append("a") or 1, next="b") == 1
        assert steps_table(store_url) == [("a", "completed", 1, "1"), ("b", "running", 1, None)]
        assert calls == ["a"]  # b's body has not run: only its claim is stored
        assert await wf.step("b", lambda: calls.append("b") or 2) == 2
    assert calls == ["a", "b"]
    assert steps_table(store_url) == [("a", "completed", 1, "1"), ("b", "completed", 1, "2")]
    assert event_types(store_url, "wf") == ["state_transition", "step_completed", "step_completed"]


async def test_steps_run_in_order_each_claiming_the_next(store: Store, store_url: str) -> None:
    async with await WorkflowContext.open(store, "wf") as wf:
        results = await wf.steps([(f"s{i}", lambda i=i: i * i) for i in range(5)])
        assert results == [0, 1, 4, 9, 16]
        replayed = await wf.steps([(f"s{i}", lambda: "never") for i in range(5)])
        assert replayed == results
    assert [row[:2] for row in steps_table(store_url)] == [(f"s{i}", "completed") for i in range(5)]


@pytest.mark.sqlite_only  # commit counts are the SQLite writer's
async def test_n_steps_cost_n_plus_one_commits(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Counted without tracing: a tracer provider that a telemetry test set in this process
    # (OpenTelemetry keeps the first one for good) adds the run's trace context commit.
    monkeypatch.setattr(telemetry, "tracer", lambda: None)
    async with await WorkflowContext.open(store, "wf") as wf:
        before = store.writer_stats.inline_commits
        await wf.steps([(f"s{i}", lambda: None) for i in range(10)])
        assert store.writer_stats.inline_commits - before == 11
        before = store.writer_stats.inline_commits
        for i in range(10):
            await wf.step(f"t{i}", lambda: None)
        assert store.writer_stats.inline_commits - before == 20


async def test_an_unused_claim_ahead_is_released_never_run(store: Store, store_url: str) -> None:
    calls: list[str] = []
    async with await WorkflowContext.open(store, "wf") as wf:
        await wf.step("a", lambda: 1, next="b")
        await wf.step("c", lambda: calls.append("c") or 3)  # the code went elsewhere
        assert [row[:2] for row in steps_table(store_url)] == [
            ("a", "completed"),
            ("c", "completed"),
        ]
        await wf.step("d", lambda: 4, next="e")
    # Closing released e's claim too: a new owner runs it without recover().
    assert [row[0] for row in steps_table(store_url)] == ["a", "c", "d"]
    async with await WorkflowContext.open(store, "wf") as again:
        for name in ("a", "c", "d"):  # the recorded steps replay first
            await again.step(name, lambda: "never")
        assert await again.step("e", lambda: calls.append("e") or 5) == 5
    assert calls == ["c", "e"]


async def test_a_durable_wait_releases_the_claim_ahead(store: Store, store_url: str) -> None:
    async def no_wait(seconds: float) -> None:
        assert [row[0] for row in steps_table(store_url)] == ["a"]  # b released first

    async with await WorkflowContext.open(store, "wf", sleeper=no_wait) as wf:
        await wf.step("a", lambda: 1, next="b")
        await wf.sleep("pause", timedelta(milliseconds=20))
        assert await wf.step("b", lambda: 2) == 2


async def test_a_failing_claimed_ahead_step_can_be_retried(store: Store, store_url: str) -> None:
    def broken() -> None:
        raise RuntimeError("flaky")

    async with await WorkflowContext.open(store, "wf") as wf:
        await wf.step("a", lambda: 1, next="b")
        with pytest.raises(RuntimeError, match="flaky"):
            await wf.step("b", broken)
        assert [row[0] for row in steps_table(store_url)] == ["a"]  # b's claim dropped
        assert await wf.step("b", lambda: 2) == 2


async def test_a_next_step_already_recorded_is_not_claimed(store: Store, store_url: str) -> None:
    async with await WorkflowContext.open(store, "wf") as wf:
        await wf.step("b", lambda: "first")
        await wf.step("a", lambda: 1, next="b")
        assert await wf.step("b", lambda: "again") == "first"  # replayed, not run
    assert steps_table(store_url) == [
        ("a", "completed", 1, "1"),
        ("b", "completed", 1, '"first"'),
    ]


async def test_recover_releases_a_claim_ahead(store: Store, store_url: str) -> None:
    async with await WorkflowContext.open(store, "wf") as wf:
        await wf.step("a", lambda: 1, next="b")
        assert await wf.recover() == ["b"]
        assert await wf.step("b", lambda: 2) == 2  # claimed anew, not assumed held
    assert [row[:2] for row in steps_table(store_url)] == [("a", "completed"), ("b", "completed")]


async def test_a_claim_ahead_left_by_a_dead_owner_blocks_until_recover(
    store: Store, store_url: str
) -> None:
    old = await WorkflowContext.open(store, "wf")
    await old.step("a", lambda: 1, next="b")
    # Taken to be dead here, between two steps: an operator fences it.
    new = WorkflowContext.from_agent(await AgentContext.force_recover(store, "wf"))
    assert await new.step("a", lambda: "never", next="b") == 1  # replayed: claims nothing
    with pytest.raises(StepInProgress):  # b's body may have started: zincir cannot tell
        await new.step("b", lambda: "runs only after recover")
    assert await new.recover() == ["b"]
    assert await new.step("b", lambda: 2) == 2
    await new.close()
    await old.close()  # fenced: its release of b changes nothing
    assert steps_table(store_url) == [("a", "completed", 1, "1"), ("b", "completed", 2, "2")]


@pytest.mark.parametrize("next_name", ["", "a", "x" * 300, 7])
async def test_a_bad_next_name_is_refused_before_anything_runs(
    store: Store, store_url: str, next_name: Any
) -> None:
    calls: list[str] = []
    async with await WorkflowContext.open(store, "wf") as wf:
        with pytest.raises(InvalidInput):
            await wf.step("a", lambda: calls.append("a"), next=next_name)
        with pytest.raises(InvalidInput):
            await wf.steps([("a", lambda: 1), "not a pair"])  # type: ignore[list-item]
    assert calls == [] and steps_table(store_url) == []


async def test_giving_up_the_shared_lease_releases_the_claim_ahead(
    store: Store, store_url: str
) -> None:
    """A ResumeWorker's handler shares its AgentContext: whoever releases it, the claim
    ahead goes first."""
    ctx = await AgentContext.create(store, name="worker", run_id="wf")
    wf = WorkflowContext.from_agent(ctx)
    await wf.step("a", lambda: 1, next="b")
    await ctx.release()  # as the worker does after its handler returns
    assert [row[0] for row in steps_table(store_url)] == ["a"]
    ctx = await AgentContext.recover(store, "wf")
    wf = WorkflowContext.from_agent(ctx)
    await wf.step("a", lambda: "never")
    await wf.step("c", lambda: 3, next="d")
    await ctx.complete()
    assert [row[:2] for row in steps_table(store_url)] == [("a", "completed"), ("c", "completed")]
