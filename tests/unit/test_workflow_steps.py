"""WorkflowContext: opening runs, durable steps, claims, recover() and fencing."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from tests.helpers import event_types, select
from zincir import (
    AgentContext,
    FencedOut,
    InvalidInput,
    LeaseHeld,
    NotJsonSerializable,
    RunTerminal,
    SQLiteStore,
    StepInProgress,
)
from zincir.workflow import WorkflowContext


async def test_open_creates_the_run_with_a_transition(store: SQLiteStore, store_url: str) -> None:
    async with await WorkflowContext.open(store, "wf-1", config={"goal": "g"}) as wf:
        assert wf.run_id == "wf-1" and wf.lease_token == 1
        run = await store.get_run("wf-1")
        assert run is not None
        assert (run["status"], run["lease_token"], run["config"]) == ("running", 1, '{"goal":"g"}')
        assert run["lease_owner"] == wf.agent.lease_owner
        events = await store.list_events("wf-1")
        assert [(e.type, e.payload) for e in events] == [
            ("state_transition", {"from": "pending", "to": "running"})
        ]
    assert select(store_url, "SELECT lease_owner FROM agent_runs") == [(None,)]


async def test_open_takes_a_new_token_each_time_and_refuses_a_live_lease(
    store: SQLiteStore, store_url: str
) -> None:
    first = await WorkflowContext.open(store, "wf-1")
    with pytest.raises(LeaseHeld) as held:
        await WorkflowContext.open(store, "wf-1")
    assert held.value.run_id == "wf-1"
    await first.close()
    tokens = []
    for _ in range(3):
        async with await WorkflowContext.open(store, "wf-1") as again:
            tokens.append(again.lease_token)
    assert tokens == [2, 3, 4]
    assert event_types(store_url, "wf-1") == ["state_transition"]  # created once


async def test_open_refuses_terminal_runs_and_bad_input(store: SQLiteStore) -> None:
    wf = await WorkflowContext.open(store, "done")
    await wf.complete({"ok": True})
    with pytest.raises(RunTerminal):
        await WorkflowContext.open(store, "done")
    with pytest.raises(InvalidInput):
        await WorkflowContext.open(store, "")
    with pytest.raises(InvalidInput):
        await WorkflowContext.open(store, "x", lease_ttl=0.001)
    with pytest.raises(NotJsonSerializable):
        await WorkflowContext.open(store, "x", config={"f": object()})
    assert await store.get_run("x") is None


async def test_step_runs_once_and_replays_the_stored_value(
    store: SQLiteStore, store_url: str
) -> None:
    calls: list[str] = []

    async def fetch() -> dict[str, Any]:
        calls.append("fetch")
        return {"pair": (1, 2), "text": "ü"}

    def compute() -> int:
        calls.append("compute")
        return 42

    async with await WorkflowContext.open(store, "wf") as wf:
        first = await wf.step("fetch", fetch)
        assert first == {"pair": [1, 2], "text": "ü"}  # the stored JSON form
        assert await wf.step("compute", compute) == 42
        assert await wf.step("fetch", fetch) == first
    async with await WorkflowContext.open(store, "wf") as wf:
        assert await wf.step("fetch", fetch) == first
        assert await wf.step("compute", compute) == 42
    assert calls == ["fetch", "compute"]
    assert select(store_url, "SELECT name, status, result FROM steps ORDER BY name") == [
        ("compute", "completed", "42"),
        ("fetch", "completed", '{"pair":[1,2],"text":"ü"}'),
    ]
    assert event_types(store_url, "wf") == ["state_transition", "step_completed", "step_completed"]


async def test_failing_step_stores_nothing_and_can_be_retried(
    store: SQLiteStore, store_url: str
) -> None:
    attempts = 0

    async def flaky() -> str:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise ConnectionError("provider down")
        return "ok"

    async with await WorkflowContext.open(store, "wf") as wf:
        with pytest.raises(ConnectionError):
            await wf.step("call", flaky)
        assert select(store_url, "SELECT COUNT(*) FROM steps") == [(0,)]
        assert await wf.step("call", flaky) == "ok"
    assert attempts == 2
    assert event_types(store_url, "wf").count("step_completed") == 1


async def test_unserialisable_result_is_a_clear_error_and_stores_nothing(
    store: SQLiteStore, store_url: str
) -> None:
    async with await WorkflowContext.open(store, "wf") as wf:
        with pytest.raises(NotJsonSerializable) as error:
            await wf.step("bad", lambda: {"when": object()})
        assert "bad" in str(error.value) and error.value.run_id == "wf"
        with pytest.raises(NotJsonSerializable):
            await wf.step("nan", lambda: float("nan"))
        assert select(store_url, "SELECT COUNT(*) FROM steps") == [(0,)]
        assert await wf.step("bad", lambda: {"when": "now"}) == {"when": "now"}
    assert event_types(store_url, "wf") == ["state_transition", "step_completed"]


async def test_bad_step_arguments(store: SQLiteStore) -> None:
    async with await WorkflowContext.open(store, "wf") as wf:
        with pytest.raises(InvalidInput):
            await wf.step("", lambda: 1)
        with pytest.raises(InvalidInput):
            await wf.step("x" * 300, lambda: 1)
        with pytest.raises(InvalidInput):
            await wf.step("s", 42)  # type: ignore[arg-type]


async def test_a_running_step_refuses_a_second_execution(store: SQLiteStore) -> None:
    gate = asyncio.Event()
    entered = asyncio.Event()

    async def slow() -> str:
        entered.set()
        await gate.wait()
        return "done"

    async with await WorkflowContext.open(store, "wf") as wf:
        task = asyncio.ensure_future(wf.step("slow", slow))
        await entered.wait()
        with pytest.raises(StepInProgress) as error:
            await wf.step("slow", slow)
        assert error.value.run_id == "wf" and "recover()" in str(error.value)
        assert await wf.recover() == []  # never releases this context's own claim
        gate.set()
        assert await task == "done"


async def test_claim_of_a_fenced_owner_blocks_until_recover(
    store: SQLiteStore, store_url: str
) -> None:
    gate = asyncio.Event()
    entered = asyncio.Event()
    runs: list[str] = []

    async def body() -> str:
        runs.append("body")
        entered.set()
        await gate.wait()
        return "old owner"

    old = await WorkflowContext.open(store, "wf")
    task = asyncio.ensure_future(old.step("effect", body))
    await entered.wait()
    # The old owner is taken to be dead: an operator fences it.
    new = WorkflowContext.from_agent(await AgentContext.force_recover(store, "wf"))
    assert new.lease_token == old.lease_token + 1
    with pytest.raises(StepInProgress):
        await new.step("effect", body)
    with pytest.raises(StepInProgress):  # still refused: claims are not timers
        await new.step("effect", body)
    gate.set()
    with pytest.raises(FencedOut):  # the old owner's result is rejected
        await task
    assert select(store_url, "SELECT status FROM steps") == [("running",)]
    assert await new.recover() == ["effect"]
    assert await new.step("effect", lambda: "new owner") == "new owner"
    with pytest.raises(FencedOut):
        await old.step("another", lambda: 1)
    await new.close()
    await old.close()
    assert runs == ["body"]
    assert select(store_url, "SELECT name, result FROM steps") == [("effect", '"new owner"')]
    assert event_types(store_url, "wf") == ["state_transition", "steps_recovered", "step_completed"]


async def test_from_agent_shares_one_lease(store: SQLiteStore, store_url: str) -> None:
    agent = await AgentContext.create(store, name="agent", run_id="shared")
    wf = WorkflowContext.from_agent(agent)
    assert wf.agent is agent and wf.lease_token == agent.lease_token
    await agent.record_response("thinking", [])
    await wf.step("s", lambda: 1)
    await wf.close()
    assert select(store_url, "SELECT lease_owner FROM agent_runs") == [(None,)]
    with pytest.raises(FencedOut):
        await agent.record_response("after close", [])
    assert event_types(store_url, "shared") == ["state_transition", "llm_call", "step_completed"]
    with pytest.raises(InvalidInput):
        WorkflowContext.from_agent("not a context")  # type: ignore[arg-type]


async def test_pending_run_opened_becomes_running(store: SQLiteStore) -> None:
    async with await WorkflowContext.open(store, "parent") as parent:
        child_id = await parent.spawn("child")
    async with await WorkflowContext.open(store, child_id, lease_ttl=timedelta(seconds=5)):
        run = await store.get_run(child_id)
        assert run is not None and run["status"] == "running"
    events = await store.list_events(child_id)
    assert [e.payload for e in events] == [{"from": "pending", "to": "running"}]


async def test_oversized_step_result_stores_nothing(store: SQLiteStore, store_url: str) -> None:
    from zincir import PayloadTooLarge
    from zincir._json import MAX_DOCUMENT_BYTES

    async with await WorkflowContext.open(store, "big") as wf:
        with pytest.raises(PayloadTooLarge):
            await wf.step("huge", lambda: "x" * (MAX_DOCUMENT_BYTES + 1))
        assert select(store_url, "SELECT COUNT(*) FROM steps") == [(0,)]
        assert await wf.step("huge", lambda: "fits") == "fits"
