"""No new work starts on a lease that lapsed unrenewed (a blocked event loop)."""

from __future__ import annotations

import asyncio
import time

import pytest

import zincir
from zincir import Invocation, OperationKind, WorkflowContext
from zincir.durable import HandlerRegistry, LocalRuntime
from zincir.store import Store

TTL = 0.3


def block_the_loop() -> None:
    """A CPU-bound handler: the heartbeat cannot renew while this runs."""
    time.sleep(TTL * 1.2)


async def test_a_step_body_does_not_start_after_the_lease_lapsed(store: Store) -> None:
    ran: list[str] = []
    wf = await WorkflowContext.open(store, "run-1", lease_ttl=TTL)
    await wf.step("before", lambda: ran.append("before"))
    block_the_loop()
    with pytest.raises(zincir.LeaseLost, match="past its local deadline"):
        await wf.step("after", lambda: ran.append("after"))
    assert ran == ["before"]
    rows = await store.list_events("run-1")
    assert "step_completed" in [event.type for event in rows]
    await wf.agent.release()


async def test_an_operation_handler_does_not_start_after_the_lease_lapsed(store: Store) -> None:
    calls: list[int] = []
    registry = HandlerRegistry()
    registry.register(
        OperationKind.TOOL_CALL, "tools", lambda invocation, request: calls.append(1) or {}
    )
    runtime = LocalRuntime(store, registry)
    wf = await WorkflowContext.open(store, "run-1", lease_ttl=TTL)
    invocation = Invocation(
        run_id="run-1",
        step_id="tool.call",
        sequence=0,
        kind=OperationKind.TOOL_CALL,
        handler_id="tools",
        input_json="{}",
    )
    block_the_loop()
    with pytest.raises(zincir.LeaseLost):
        await runtime.execute(invocation)
    assert calls == []
    await wf.agent.release()


async def test_a_lease_the_heartbeat_renews_keeps_working(store: Store) -> None:
    wf = await WorkflowContext.open(store, "run-1", lease_ttl=TTL)
    await asyncio.sleep(TTL * 2)  # the loop is free: the heartbeat renews meanwhile
    assert await wf.step("later", lambda: 7) == 7
    await wf.complete()
