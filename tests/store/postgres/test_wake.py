"""LISTEN/NOTIFY: waiters on PostgreSQL wake on the commit they wait for, long before their
poll interval; SQLite waiters keep polling."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import zincir
from zincir import AgentContext, WorkflowContext

SLOW_POLL = timedelta(seconds=20)


async def test_a_recv_wakes_on_the_message_not_the_poll(postgres_url: str) -> None:
    store = zincir.open_store(postgres_url)
    sender = zincir.open_store(postgres_url)  # another process's store, in effect
    try:
        async with await WorkflowContext.open(store, "waiter", poll_interval=SLOW_POLL) as wf:

            async def send_soon() -> None:
                await asyncio.sleep(0.3)
                await zincir.send_message(sender, "waiter", "go", {"n": 1})

            started = time.monotonic()
            task = asyncio.ensure_future(send_soon())
            message = await wf.recv("go", timeout=timedelta(seconds=60))
            await task
            assert message == {"n": 1}
            assert time.monotonic() - started < 5  # woken by NOTIFY, not the 20 s poll
    finally:
        await sender.close()
        await store.close()


async def test_a_join_wakes_when_the_child_finishes(postgres_url: str) -> None:
    store = zincir.open_store(postgres_url)
    other = zincir.open_store(postgres_url)
    try:
        async with await WorkflowContext.open(store, "parent", poll_interval=SLOW_POLL) as wf:
            child_id = await wf.spawn("child", {})

            async def finish_child() -> None:
                await asyncio.sleep(0.3)
                child = await AgentContext.recover(other, child_id)
                await child.complete({"ok": True})

            started = time.monotonic()
            task = asyncio.ensure_future(finish_child())
            result = await wf.join(child_id)
            await task
            assert result.status == "completed" and result.result == {"ok": True}
            assert time.monotonic() - started < 5
    finally:
        await other.close()
        await store.close()


async def test_a_resume_worker_claims_a_released_run_at_once(postgres_url: str) -> None:
    store = zincir.open_store(postgres_url)
    other = zincir.open_store(postgres_url)
    try:
        claimed = asyncio.Event()

        async def handler(ctx: AgentContext) -> None:
            await ctx.complete()
            claimed.set()

        worker = zincir.ResumeWorker(store).poll_interval(SLOW_POLL)
        started = 0.0

        async def release_soon() -> None:
            nonlocal started
            await asyncio.sleep(0.5)  # the worker's first (empty) poll is behind it
            ctx = await AgentContext.create(other, name="job")
            started = time.monotonic()
            await ctx.close()

        task = asyncio.ensure_future(release_soon())
        await asyncio.wait_for(worker.run(handler, claimed.wait()), timeout=15)
        await task
        assert time.monotonic() - started < 5
    finally:
        await other.close()
        await store.close()
