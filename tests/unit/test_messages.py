"""Durable messages: keyed sends, once-only receives, replay and stored receive deadlines."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import zincir
from tests.conftest import START, FakeClock
from tests.helpers import event_types, select
from zincir import FencedOut, InvalidInput, NotJsonSerializable, RunNotFound, SQLiteStore
from zincir.workflow import WorkflowContext, WorkflowSuspended, send_message


async def make_runs(store: SQLiteStore, *run_ids: str) -> None:
    for run_id in run_ids:
        await (await WorkflowContext.open(store, run_id)).close()


async def test_send_and_receive_in_order_once(store: SQLiteStore, store_url: str) -> None:
    await make_runs(store, "receiver")
    async with await WorkflowContext.open(store, "sender") as sender:
        first = await sender.send("receiver", "jobs", {"n": 1})
        second = await sender.send("receiver", "jobs", {"n": 2})
        await sender.send("receiver", "other", "elsewhere")
        assert second > first
    async with await WorkflowContext.open(store, "receiver", poll_interval=0.01) as receiver:
        assert await receiver.recv("jobs") == {"n": 1}
        message = await receiver.recv_message("jobs")
        assert message is not None
        assert (message.id, message.payload, message.from_run_id) == (second, {"n": 2}, "sender")
        assert await receiver.recv("jobs", timeout=0.05) is None
    assert event_types(store_url, "sender") == ["state_transition"] + ["message_sent"] * 3
    assert event_types(store_url, "receiver").count("message_received") == 2
    assert select(store_url, "SELECT topic, received_by FROM messages ORDER BY id") == [
        ("jobs", "jobs#1"),
        ("jobs", "jobs#2"),
        ("other", None),
    ]


async def test_replayed_send_after_restart_does_not_duplicate(
    store: SQLiteStore, store_url: str
) -> None:
    await make_runs(store, "receiver")
    ids = []
    for _ in range(3):  # the sender restarts and replays its code each time
        async with await WorkflowContext.open(store, "sender") as sender:
            ids.append(
                (
                    await sender.send("receiver", "t", "a"),
                    await sender.send("receiver", "t", "b"),
                    await sender.send("receiver", "t", "c", key="explicit"),
                )
            )
    assert ids[0] == ids[1] == ids[2]
    assert select(store_url, "SELECT COUNT(*) FROM messages") == [(3,)]
    assert event_types(store_url, "sender").count("message_sent") == 3


async def test_replayed_recv_returns_the_same_message(store: SQLiteStore) -> None:
    await make_runs(store, "receiver")
    async with await WorkflowContext.open(store, "sender") as sender:
        for n in range(3):
            await sender.send("receiver", "t", n)
    async with await WorkflowContext.open(store, "receiver") as receiver:
        assert [await receiver.recv("t"), await receiver.recv("t")] == [0, 1]
    # Restarted: the first two receives replay; the third takes the next message.
    async with await WorkflowContext.open(store, "receiver", poll_interval=0.01) as receiver:
        assert [await receiver.recv("t") for _ in range(3)] == [0, 1, 2]
        assert await receiver.recv("t", timeout=0) is None


async def test_recv_deadline_is_stored_and_a_timeout_replays(
    fake_store: SQLiteStore, clock: FakeClock, store_url: str
) -> None:
    await make_runs(fake_store, "receiver")
    started = asyncio.Event()

    async def hang(seconds: float) -> None:
        started.set()
        await asyncio.Event().wait()

    first = await WorkflowContext.open(fake_store, "receiver", sleeper=hang, poll_interval=5)
    waiting = asyncio.ensure_future(first.recv("approval", timeout=timedelta(seconds=30)))
    await started.wait()
    waiting.cancel()  # the receiver goes away while waiting
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await first.close()
    deadline = START + timedelta(seconds=30)
    assert select(store_url, "SELECT wait_kind, wait_ref, wait_until FROM agent_runs") == [
        ("message", "approval", deadline.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    ]

    clock.advance(20)
    async with await WorkflowContext.open(
        fake_store, "receiver", sleeper=clock.sleep, poll_interval=60
    ) as second:
        assert await second.recv("approval", timeout=timedelta(seconds=30)) is None
    assert clock.slept == [10.0]  # only what remained of the stored deadline
    await send_message(fake_store, "receiver", "approval", "too late")
    async with await WorkflowContext.open(fake_store, "receiver") as third:
        assert await third.recv("approval", timeout=30) is None  # the timeout replays
        assert await third.recv("approval", timeout=30) == "too late"
    assert event_types(store_url, "receiver").count("recv_timed_out") == 1


async def test_external_keyed_send_is_deduplicated(store: SQLiteStore, store_url: str) -> None:
    await make_runs(store, "run")
    first = await send_message(store, "run", "approval", {"ok": True}, key="click-1")
    assert await send_message(store, "run", "approval", {"ok": True}, key="click-1") == first
    unkeyed = await send_message(store, "run", "approval", {"ok": True})
    assert unkeyed != first
    with pytest.raises(InvalidInput):
        await send_message(store, "run", "other-topic", 1, key="click-1")
    with pytest.raises(RunNotFound):
        await send_message(store, "nobody", "approval", 1)
    with pytest.raises(NotJsonSerializable):
        await send_message(store, "run", "approval", {1, 2})
    with pytest.raises(InvalidInput):
        await send_message(store, "run", "", 1)
    assert select(store_url, "SELECT COUNT(*) FROM messages") == [(2,)]


async def test_workflow_send_errors_store_nothing(store: SQLiteStore, store_url: str) -> None:
    await make_runs(store, "receiver")
    async with await WorkflowContext.open(store, "sender") as sender:
        with pytest.raises(RunNotFound):
            await sender.send("missing", "t", 1)
        with pytest.raises(NotJsonSerializable):
            await sender.send("receiver", "t", object())
        await sender.send("receiver", "t", 1, key="k")
        with pytest.raises(InvalidInput):
            await sender.send("receiver", "u", 1, key="k")
        with pytest.raises(InvalidInput):
            await sender.recv("t", timeout=-1)
    old = await WorkflowContext.open(store, "receiver")
    taker = await zincir.AgentContext.force_recover(store, "receiver")
    with pytest.raises(FencedOut):
        await old.recv("t")
    with pytest.raises(FencedOut):
        await old.send("sender", "t", 1)
    await taker.close()
    await old.close()
    assert select(store_url, "SELECT COUNT(*), COUNT(received_at) FROM messages") == [(1, 0)]


async def test_message_arriving_while_waiting_is_received(store: SQLiteStore) -> None:
    await make_runs(store, "receiver")
    async with await WorkflowContext.open(store, "receiver", poll_interval=0.01) as receiver:
        waiting = asyncio.ensure_future(receiver.recv("signal", timeout=5))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await send_message(store, "receiver", "signal", {"go": True})
        assert await asyncio.wait_for(waiting, 2) == {"go": True}


async def test_suspended_recv_resumes_with_the_message(store: SQLiteStore, store_url: str) -> None:
    await make_runs(store, "receiver")
    async with await WorkflowContext.open(store, "receiver", suspend_waits=True) as receiver:
        with pytest.raises(WorkflowSuspended) as suspended:
            await receiver.recv("approval")
        assert (suspended.value.kind, suspended.value.until) == ("message", None)
    await send_message(store, "receiver", "approval", "yes")
    async with await WorkflowContext.open(store, "receiver", suspend_waits=True) as receiver:
        assert await receiver.recv("approval") == "yes"
    assert select(store_url, "SELECT wait_kind FROM agent_runs WHERE id = 'receiver'") == [(None,)]


async def test_taking_messages_by_a_payload_field_leaves_the_rest(
    store: SQLiteStore, store_url: str
) -> None:
    from zincir.store._messages import take_messages

    await make_runs(store, "run")
    for call_id in ("c2", "c1", "c3"):
        await send_message(store, "run", "decisions", {"call_id": call_id, "n": 1})
    await send_message(store, "run", "other", {"call_id": "c1"})
    await store._write_tx(lambda tx: take_messages(tx, "run", "decisions", "c1#1", call_id="c1"))
    assert select(store_url, "SELECT topic, received_by FROM messages ORDER BY id") == [
        ("decisions", None),
        ("decisions", "c1#1"),
        ("decisions", None),
        ("other", None),
    ]
    assert await store.message_ready("run", "decisions")
    async with await WorkflowContext.open(store, "run") as run:
        assert await run.recv("decisions") == {"call_id": "c2", "n": 1}
        assert await run.recv("decisions") == {"call_id": "c3", "n": 1}
        assert await run.recv("decisions", timeout=0) is None
