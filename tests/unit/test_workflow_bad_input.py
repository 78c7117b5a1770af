"""Workflow entry points refuse bad names and durations with InvalidInput, storing nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

import zincir
import zincir._validate
from tests.helpers import event_types, select
from zincir import InvalidInput, SQLiteStore
from zincir.workflow import WorkflowContext, send_message

BAD_NAMES = ["step\x00one", "lone \ud800", "\udc80", "del\x7f", "c1\x85", "", 5, b"bytes"]
BAD_DURATIONS = [
    1e20,
    -1e20,
    timedelta.max,
    timedelta.min,
    float("inf"),
    float("nan"),
    "5",
    True,
    pytest.param(10**400, id="10**400"),
]


def nothing_stored(target: str) -> None:
    assert select(target, "SELECT COUNT(*) FROM steps") == [(0,)]
    assert select(target, "SELECT COUNT(*) FROM timers") == [(0,)]
    assert select(target, "SELECT COUNT(*) FROM messages") == [(0,)]
    assert select(target, "SELECT id FROM agent_runs ORDER BY id") == [("other",), ("wf",)]
    assert event_types(target, "wf") == ["state_transition"]


@pytest.mark.parametrize("bad", BAD_NAMES)
async def test_every_name_refuses_control_characters_and_lone_surrogates(
    store: SQLiteStore, store_url: str, bad: Any
) -> None:
    await (await WorkflowContext.open(store, "other")).close()
    async with await WorkflowContext.open(store, "wf") as wf:
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: wf.step(bad, lambda: 1),
            lambda: wf.sleep(bad, 0),
            lambda: wf.send("other", bad, 1),
            lambda: wf.send("other", "t", 1, key=bad),
            lambda: wf.send(bad, "t", 1),
            lambda: wf.recv(bad, timeout=0),
            lambda: wf.recv("t", timeout=0, key=bad),
            lambda: wf.spawn(bad),
            lambda: wf.spawn("child", run_id=bad),
            lambda: wf.spawn("child", run_name=bad),
            lambda: wf.join(bad),
            lambda: send_message(store, bad, "t", 1),
            lambda: send_message(store, "wf", bad, 1),
            lambda: send_message(store, "wf", "t", 1, key=bad),
            lambda: WorkflowContext.open(store, bad),
            lambda: WorkflowContext.open(store, "new", name=bad),
        ]
        for number, call in enumerate(calls):
            with pytest.raises(InvalidInput) as error:
                await call()
            assert isinstance(error.value, zincir.ZincirError), number
        nothing_stored(store_url)


@pytest.mark.parametrize("bad", BAD_DURATIONS)
async def test_every_duration_is_bounded_and_typed(
    store: SQLiteStore, store_url: str, bad: Any
) -> None:
    await (await WorkflowContext.open(store, "other")).close()
    async with await WorkflowContext.open(store, "wf", poll_interval=0.01) as wf:
        with pytest.raises(InvalidInput):
            await wf.sleep("nap", bad)
        with pytest.raises(InvalidInput):
            await wf.recv("t", timeout=bad)
        with pytest.raises(InvalidInput):
            WorkflowContext.from_agent(wf.agent, poll_interval=bad)
        with pytest.raises(InvalidInput):
            await WorkflowContext.open(store, "new", poll_interval=bad)
        with pytest.raises(InvalidInput):
            await WorkflowContext.open(store, "new", lease_ttl=bad)
        nothing_stored(store_url)


async def test_poll_interval_and_sleeper_are_checked(store: SQLiteStore) -> None:
    for bad in (0, -1, timedelta(0), "fast"):
        with pytest.raises(InvalidInput):
            await WorkflowContext.open(store, "wf", poll_interval=bad)
    with pytest.raises(InvalidInput):
        await WorkflowContext.open(store, "wf", sleeper="not callable")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        await WorkflowContext.open("zincir.db", "wf")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        await send_message(None, "wf", "t", 1)  # type: ignore[arg-type]
    assert await store.get_run("wf") is None
    async with await WorkflowContext.open(store, "wf", poll_interval=timedelta(days=36_500)) as wf:
        await wf.sleep("now", 0)


async def test_the_longest_duration_is_stored(store: SQLiteStore, store_url: str) -> None:
    async with await WorkflowContext.open(store, "wf", suspend_waits=True) as wf:
        with pytest.raises(zincir.WorkflowSuspended) as suspended:
            await wf.sleep("century", zincir._validate.MAX_DURATION)
        assert suspended.value.until is not None
    assert select(store_url, "SELECT COUNT(*) FROM timers") == [(1,)]


def test_the_default_poll_interval_is_the_one_timedelta() -> None:
    assert zincir.workflow.DEFAULT_POLL_INTERVAL is zincir._validate.DEFAULT_POLL_INTERVAL
    assert isinstance(zincir.workflow.DEFAULT_POLL_INTERVAL, timedelta)
