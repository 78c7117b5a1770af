"""Operations under a run's lease replayed against its log: a LocalRuntime beside an
AgentContext, and the durable agent loop on a LocalRuntime and on another runtime."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import zincir
from tests.agent.reference import HANDLERS, build, lines
from zincir import AgentContext, Invocation, OperationKind, Record
from zincir.agent import DurableBinding, serve
from zincir.store import OperationKey, Store
from zincir.temporal._record_store import load_record, save_record


def tool_call(sequence: int, order: str = "A-17") -> Invocation:
    return Invocation(
        run_id="ops",
        step_id="tool.call",
        sequence=sequence,
        kind=OperationKind.TOOL_CALL,
        handler_id="tools",
        input_json=json.dumps({"order": order}),
    )


def counting_runtime(store: Store) -> tuple[zincir.LocalRuntime, Counter[int]]:
    calls: Counter[int] = Counter()
    registry = zincir.HandlerRegistry()

    @registry.handler(OperationKind.TOOL_CALL, "tools")
    async def run(invocation: Invocation, request: dict[str, Any]) -> dict[str, Any]:
        calls[invocation.sequence] += 1
        return {"sequence": invocation.sequence}

    return zincir.LocalRuntime(store, registry), calls


async def recorded_by_v1(store: Store, runtime: zincir.LocalRuntime) -> None:
    ctx = await AgentContext.create(store, "loop", run_id="ops")
    try:
        for sequence in (1, 2):
            await runtime.execute(tool_call(sequence))
    finally:
        await ctx.close()


async def test_an_unrecorded_identity_raises_before_its_handler_or_claim(store: Store) -> None:
    runtime, calls = counting_runtime(store)
    await recorded_by_v1(store, runtime)
    ctx = await AgentContext.recover(store, "ops")
    try:
        with pytest.raises(zincir.VersionDivergence) as raised:
            await runtime.execute(tool_call(3))
        error = raised.value
        assert (error.position, error.recorded, error.attempted) == (
            0,
            "operation tool.call #1",
            "operation tool.call #3",
        )
        assert await store.get_operation(OperationKey("ops", "tool.call", 3)) is None
        # Recorded identities replay in any order; then new ones run.
        for sequence in (2, 1, 3):
            record = await runtime.execute(tool_call(sequence))
            assert isinstance(record, Record)
        assert await ctx.unreplayed() == []
    finally:
        await ctx.close()
    assert calls == Counter({1: 1, 2: 1, 3: 1})


async def test_a_recorded_identity_with_other_input_is_still_input_drift(store: Store) -> None:
    runtime, calls = counting_runtime(store)
    await recorded_by_v1(store, runtime)
    ctx = await AgentContext.recover(store, "ops")
    try:
        with pytest.raises(zincir.InputDrift):
            await runtime.execute(tool_call(1, order="B-2"))
        assert await ctx.unreplayed() == ["operation tool.call #2"]
    finally:
        await ctx.close()
    assert calls == Counter({1: 1, 2: 1})


async def test_without_the_runs_lease_nothing_is_checked(store: Store) -> None:
    runtime, calls = counting_runtime(store)
    await recorded_by_v1(store, runtime)
    await runtime.execute(tool_call(3))  # no context holds the run here: only the record
    assert calls == Counter({1: 1, 2: 1, 3: 1})


async def test_gathered_operations_cut_short_replay(store: Store) -> None:
    """1 and 3 finished, 2 did not: asked together in the order 1, 2, 3, all replay or run."""
    runtime, calls = counting_runtime(store)
    ctx = await AgentContext.create(store, "loop", run_id="ops")
    try:
        await runtime.execute(tool_call(1))
        await runtime.execute(tool_call(3))
    finally:
        await ctx.close()
    ctx = await AgentContext.recover(store, "ops")
    try:
        records = await asyncio.gather(*(runtime.execute(tool_call(n)) for n in (1, 2, 3)))
    finally:
        await ctx.close()
    assert [record.invocation.sequence for record in records] == [1, 2, 3]
    assert calls == Counter({1: 1, 2: 1, 3: 1})


# -- the durable agent loop -------------------------------------------------------------


class RemoteRuntime:
    """Shaped like a TemporalRuntime: handlers run elsewhere (a LocalRuntime on a scratch
    database), records are kept in the run's store, with ``operation_completed`` under the
    run's lease. Not a LocalRuntime, so the agent loop checks identities itself."""

    def __init__(self, record_store: Store, remote: zincir.LocalRuntime) -> None:
        self.record_store = record_store
        self.remote = remote
        self.registry = remote.registry

    async def execute(self, invocation: Invocation) -> Record:
        stored = await load_record(self.record_store, invocation)
        if stored is not None:
            return stored
        lease = self.record_store.lease_for(invocation.run_id)
        record = await self.remote.execute(invocation)
        return await save_record(self.record_store, record, lease) or record


async def run_until_hung(agent: zincir.agent.Agent, binding: DurableBinding, log: Path) -> None:
    """Start the run; once its model hangs at request 1 (after the first tool), stop it."""
    task = asyncio.ensure_future(agent.run("Use both tools.", durable=binding))
    while "model 1" not in lines(log):
        assert not task.done(), task.exception()
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
async def test_an_agent_whose_identities_moved_diverges_before_anything_runs(
    store: Store, tmp_path: Path, remote: bool
) -> None:
    log = tmp_path / "log"
    scratch = zincir.open_store(tmp_path / "scratch.db")

    def binding(agent: zincir.agent.Agent, namespace: str | None = None) -> DurableBinding:
        registry = zincir.HandlerRegistry()
        serve(registry, agent, HANDLERS)
        runtime: Any = zincir.LocalRuntime(store, registry)
        if remote:
            # The cancelled request's claim (no lease there) blocks until it expires.
            elsewhere = zincir.LocalRuntime(scratch, registry, claim_ttl=0.3, poll_interval=0.02)
            runtime = RemoteRuntime(store, elsewhere)
        return DurableBinding(runtime, "agent-1", HANDLERS, step_namespace=namespace)

    try:
        v1 = build(log, hang_at=1)
        await run_until_hung(v1, binding(v1), log)
        assert lines(log) == ["model 0", "tool first 1", "model 1"]
        v2 = build(log)
        with pytest.raises(zincir.VersionDivergence) as raised:
            await v2.run("Use both tools.", durable=binding(v2, namespace="support"))
        assert (raised.value.position, raised.value.recorded, raised.value.attempted) == (
            0,
            "operation model.request #0",
            "operation support.model.request #0",
        )
        assert lines(log) == ["model 0", "tool first 1", "model 1"]
        # The same code as v1 finishes the run: what was recorded replays.
        result = await v2.run("Use both tools.", durable=binding(v2))
        assert result.output == "done: first=1 + second=2"
        assert lines(log) == [
            "model 0",
            "tool first 1",
            "model 1",
            "model 1",
            "tool second 2",
            "model 2",
        ]
    finally:
        await scratch.close()
