"""Durable sleep on an injected clock: stored wake times, remaining time, due timers."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

import zincir
from tests.conftest import START, FakeClock
from tests.helpers import event_types, select
from zincir import FencedOut, InvalidInput, SQLiteStore
from zincir.workflow import WorkflowContext, WorkflowSuspended


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def test_sleep_stores_the_wake_time_before_waiting(
    fake_store: SQLiteStore, clock: FakeClock, store_url: str
) -> None:
    seen_before_wait: list[object] = []

    async def sleeper(seconds: float) -> None:
        seen_before_wait.append(select(store_url, "SELECT wake_at, completed_at FROM timers"))
        await clock.sleep(seconds)

    async with await WorkflowContext.open(fake_store, "wf", sleeper=sleeper) as wf:
        await wf.sleep("backoff", timedelta(seconds=60))
    wake = stamp(START + timedelta(seconds=60))
    assert seen_before_wait == [[(wake, None)]]
    assert clock.slept == [60.0]
    assert select(store_url, "SELECT name, wake_at, completed_at FROM timers") == [
        ("backoff", wake, wake)
    ]
    assert event_types(store_url, "wf") == ["state_transition", "timer_set", "timer_completed"]
    events = await fake_store.list_events("wf")
    assert events[1].payload == {"name": "backoff", "wake_at": wake}


async def test_restarted_sleep_waits_only_the_remaining_time(
    fake_store: SQLiteStore, clock: FakeClock, store_url: str
) -> None:
    started = asyncio.Event()

    async def hang(seconds: float) -> None:
        started.set()
        await asyncio.Event().wait()

    first = await WorkflowContext.open(fake_store, "wf", sleeper=hang)
    sleeping = asyncio.ensure_future(first.sleep("nap", 60))
    await started.wait()
    sleeping.cancel()  # the process goes away mid-sleep
    with pytest.raises(asyncio.CancelledError):
        await sleeping
    await first.close()

    clock.advance(20)
    async with await WorkflowContext.open(fake_store, "wf", sleeper=clock.sleep) as second:
        await second.sleep("nap", 999)  # the stored wake time wins over the new duration
    assert clock.slept == [40.0]
    assert clock.now == START + timedelta(seconds=60)
    assert select(store_url, "SELECT COUNT(*), MAX(completed_at) FROM timers") == [
        (1, stamp(START + timedelta(seconds=60)))
    ]
    assert event_types(store_url, "wf").count("timer_set") == 1


async def test_a_due_timer_returns_at_once_and_is_completed(
    fake_store: SQLiteStore, clock: FakeClock, store_url: str
) -> None:
    async def never(seconds: float) -> None:
        raise AssertionError("a due timer must not wait")

    async with await WorkflowContext.open(fake_store, "wf", suspend_waits=True) as wf:
        with pytest.raises(WorkflowSuspended) as suspended:
            await wf.sleep("nap", 30)
        assert suspended.value.until == START + timedelta(seconds=30)
    clock.advance(45)
    async with await WorkflowContext.open(fake_store, "wf", sleeper=never) as wf:
        await wf.sleep("nap", 30)
        await wf.sleep("nap", 30)  # completed: a replay returns at once as well
        await wf.sleep("zero", 0)
    assert select(store_url, "SELECT name, completed_at FROM timers ORDER BY name") == [
        ("nap", stamp(START + timedelta(seconds=45))),
        ("zero", stamp(START + timedelta(seconds=45))),
    ]


async def test_suspended_sleep_records_the_wait_and_reopen_clears_it(
    fake_store: SQLiteStore, clock: FakeClock, store_url: str
) -> None:
    async with await WorkflowContext.open(fake_store, "wf", suspend_waits=True) as wf:
        with pytest.raises(WorkflowSuspended) as suspended:
            await wf.sleep("nap", timedelta(minutes=5))
        assert suspended.value.kind == "timer" and suspended.value.ref == "nap"
        assert not isinstance(suspended.value, Exception)  # `except Exception` cannot eat it
    wake = stamp(START + timedelta(minutes=5))
    assert select(store_url, "SELECT wait_kind, wait_ref, wait_until FROM agent_runs") == [
        ("timer", "nap", wake)
    ]
    async with await WorkflowContext.open(fake_store, "wf", sleeper=clock.sleep) as wf:
        assert select(store_url, "SELECT wait_kind FROM agent_runs") == [(None,)]
        await wf.sleep("nap", timedelta(minutes=5))
    assert clock.slept == [300.0]
    assert select(store_url, "SELECT wait_kind, wait_ref, wait_until FROM agent_runs") == [
        (None, None, None)
    ]


async def test_sleep_accepts_seconds_and_rejects_bad_input(
    fake_store: SQLiteStore, clock: FakeClock
) -> None:
    async with await WorkflowContext.open(fake_store, "wf", sleeper=clock.sleep) as wf:
        await wf.sleep("float", 1.5)
        with pytest.raises(InvalidInput):
            await wf.sleep("negative", -1)
        with pytest.raises(InvalidInput):
            await wf.sleep("text", "5")  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            await wf.sleep("", 1)
    assert clock.slept == [1.5]


async def test_sleep_of_a_fenced_owner_stores_nothing(
    fake_store: SQLiteStore, clock: FakeClock, store_url: str
) -> None:
    old = await WorkflowContext.open(fake_store, "wf", sleeper=clock.sleep)
    new = await zincir.AgentContext.force_recover(fake_store, "wf")
    with pytest.raises(FencedOut):
        await old.sleep("nap", 10)
    assert select(store_url, "SELECT COUNT(*) FROM timers") == [(0,)]
    await new.close()
    await old.close()


async def test_real_sleeper_waits_on_the_system_clock(store: SQLiteStore) -> None:
    async with await WorkflowContext.open(store, "wf") as wf:
        loop = asyncio.get_running_loop()
        began = loop.time()
        await wf.sleep("short", timedelta(milliseconds=80))
        assert loop.time() - began >= 0.07
