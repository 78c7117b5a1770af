"""Step claims that a fenced owner must leave and that a live context must be able to clear."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import apsw
import pytest

import zincir
from tests.helpers import event_types, rows, select
from zincir import (
    AgentContext,
    NotJsonSerializable,
    SQLiteStore,
    StepInProgress,
    StoreError,
    StoreUnavailable,
)
from zincir.workflow import WorkflowContext


@pytest.fixture
async def impatient_store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    """A store that gives up on a locked database after 100 ms."""
    opened = zincir.open_store(db_path, busy_timeout=0.1)
    yield opened
    await opened.close()


class Lock:
    """Another connection holding ``BEGIN IMMEDIATE`` on the database (a stuck writer)."""

    def __init__(self, db_path: Path) -> None:
        self.conn = apsw.Connection(str(db_path))
        self.conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        self.conn.execute("ROLLBACK")
        self.conn.close()


async def test_a_fenced_owner_whose_body_raises_leaves_its_claim(
    store: SQLiteStore, store_url: str
) -> None:
    gate = asyncio.Event()
    entered = asyncio.Event()
    runs: list[str] = []

    async def failing() -> str:
        runs.append("old")
        entered.set()
        await gate.wait()
        raise ConnectionError("provider down")

    old = await WorkflowContext.open(store, "wf")
    task = asyncio.ensure_future(old.step("effect", failing))
    await entered.wait()
    new = WorkflowContext.from_agent(await AgentContext.force_recover(store, "wf"))
    gate.set()
    with pytest.raises(ConnectionError):
        await task
    # The fenced owner could not drop its claim: the new owner must recover() first.
    assert select(store_url, "SELECT status, claim_token FROM steps") == [("running", 1)]
    with pytest.raises(StepInProgress):
        await new.step("effect", lambda: runs.append("new") or "new")
    assert runs == ["old"]
    assert await new.recover() == ["effect"]
    assert await new.step("effect", lambda: "new") == "new"
    await new.close()
    await old.close()
    assert event_types(store_url, "wf") == ["state_transition", "steps_recovered", "step_completed"]


# SQLite only: another connection holds the file's write lock past the store's busy_timeout.
async def test_a_failed_result_write_leaves_a_claim_the_same_context_runs_again(
    impatient_store: SQLiteStore, db_path: Path
) -> None:
    calls: list[int] = []
    lock: Lock | None = None

    def body() -> int:
        nonlocal lock
        calls.append(len(calls) + 1)
        if len(calls) == 1:
            lock = Lock(db_path)  # the result's write will find the database locked
        return len(calls)

    async with await WorkflowContext.open(impatient_store, "wf") as wf:
        with pytest.raises(StoreUnavailable):
            await wf.step("s", body)
        assert lock is not None
        lock.release()
        assert rows(db_path, "SELECT status FROM steps") == [("running",)]
        # Its own claim, with no body running: the context claims it again (at least once).
        assert await wf.step("s", body) == 2
        assert await wf.step("s", body) == 2  # a replay
    assert calls == [1, 2]
    assert rows(db_path, "SELECT status, result FROM steps") == [("completed", "2")]
    assert event_types(db_path, "wf") == ["state_transition", "step_completed"]


# SQLite only: another connection holds the file's write lock past the store's busy_timeout.
async def test_concurrent_calls_after_a_failed_write_still_run_the_body_once(
    impatient_store: SQLiteStore, db_path: Path
) -> None:
    locks: list[Lock] = []
    gate = asyncio.Event()
    entered = asyncio.Event()
    bodies: list[str] = []

    async def slow() -> str:
        bodies.append("slow")
        entered.set()
        await gate.wait()
        return "done"

    async with await WorkflowContext.open(impatient_store, "wf") as wf:
        with pytest.raises(StoreUnavailable):
            await wf.step("s", lambda: locks.append(Lock(db_path)))
        locks[0].release()
        first = asyncio.ensure_future(wf.step("s", slow))
        await asyncio.wait(
            [first, asyncio.ensure_future(entered.wait())], return_when=asyncio.FIRST_COMPLETED
        )
        assert entered.is_set(), first.exception()
        with pytest.raises(StepInProgress):
            await wf.step("s", slow)
        assert await wf.recover() == []  # its body runs: the claim stays
        gate.set()
        assert await first == "done"
    assert bodies == ["slow"]


# SQLite only: another connection holds the file's write lock past the store's busy_timeout.
async def test_recover_releases_this_contexts_stale_claims_but_not_running_ones(
    impatient_store: SQLiteStore, db_path: Path
) -> None:
    store = impatient_store
    locks: list[Lock] = []

    gate = asyncio.Event()
    entered = asyncio.Event()

    async def slow() -> str:
        entered.set()
        await gate.wait()
        return "slow"

    async with await WorkflowContext.open(store, "wf") as wf:
        for name in ("c", "a", "b"):  # each result write finds the database locked
            with pytest.raises(StoreUnavailable):
                await wf.step(name, lambda: locks.append(Lock(db_path)))
            locks.pop().release()
        assert rows(db_path, "SELECT COUNT(*) FROM steps WHERE status = 'running'") == [(3,)]
        running = asyncio.ensure_future(wf.step("in-flight", slow))
        await entered.wait()
        assert await wf.recover() == ["a", "b", "c"]  # not the claim whose body runs
        assert await wf.recover() == []
        gate.set()
        assert await running == "slow"
        assert [await wf.step(n, lambda n=n: n.upper()) for n in "abc"] == ["A", "B", "C"]
    assert rows(db_path, "SELECT name, status FROM steps ORDER BY name") == [
        ("a", "completed"),
        ("b", "completed"),
        ("c", "completed"),
        ("in-flight", "completed"),
    ]


async def test_a_result_with_a_lone_surrogate_drops_the_claim(
    store: SQLiteStore, store_url: str
) -> None:
    async with await WorkflowContext.open(store, "wf") as wf:
        with pytest.raises(NotJsonSerializable):
            await wf.step("s", lambda: {"text": "lone \ud800"})
        with pytest.raises(NotJsonSerializable):
            await wf.step("t", lambda: {"\udc80": 1})
        assert select(store_url, "SELECT COUNT(*) FROM steps") == [(0,)]
        assert await wf.step("s", lambda: "fine") == "fine"


# SQLite only: another connection holds the file's write lock past the store's busy_timeout.
async def test_store_errors_are_zincir_errors(impatient_store: SQLiteStore, db_path: Path) -> None:
    async with await WorkflowContext.open(impatient_store, "wf") as wf:
        lock = Lock(db_path)
        try:
            with pytest.raises(StoreError):
                await wf.sleep("nap", 0)
            with pytest.raises(StoreError):
                await wf.spawn("child")
        finally:
            lock.release()
        await wf.sleep("nap", 0)
