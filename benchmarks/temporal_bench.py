"""TemporalRuntime.execute against a raw temporalio workflow + activity, in the same run.

``measure(n)`` times n sequential operations of each kind, interleaved so both share the
dev server's state (its ~40 ms per-activity dispatch floor dominates), then the replay of a
completed identity (plain, and served from a record store). Temporal:
$ZINCIR_TEMPORAL_ADDRESS, else a dev server started here on a free loopback port.

    python benchmarks/temporal_bench.py [N]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.client import Client
    from temporalio.worker import Worker as TemporalWorker

    import zincir
    from zincir.contract import Invocation, OperationKind
    from zincir.durable import HandlerRegistry
    from zincir.temporal import TemporalRuntime, Worker
    from zincir.temporal.testing import DevServer

__all__ = ["measure"]

PAYLOAD = "x" * 100


@activity.defn(name="bench.raw.step")
async def raw_step(i: int) -> dict[str, Any]:
    """The raw baseline's activity: returns what every benchmarked step returns."""
    return {"i": i, "payload": PAYLOAD}


@workflow.defn(name="bench.raw.operation")
class RawOperation:
    """The raw baseline: one workflow running one activity, as zincir.operation.v1 does."""

    @workflow.run
    async def run(self, i: int) -> dict[str, Any]:
        result: dict[str, Any] = await workflow.execute_activity(
            raw_step, i, start_to_close_timeout=timedelta(minutes=10)
        )
        return result


def _registry() -> HandlerRegistry:
    registry = HandlerRegistry()

    @registry.handler(OperationKind.TOOL_CALL, "bench")
    async def step(invocation: Invocation, request: Any) -> dict[str, Any]:
        return {"i": request["i"], "payload": PAYLOAD}

    return registry


def _invocation(run_id: str, i: int) -> Invocation:
    return Invocation(run_id, "bench.step", i, OperationKind.TOOL_CALL, "bench", f'{{"i":{i}}}')


async def _ms(call: Any) -> float:
    started = time.perf_counter()
    await call
    return (time.perf_counter() - started) * 1e3


async def measure(n: int) -> dict[str, float]:
    """Median ms per operation: zincir execute, raw workflow, their ratio, and replays."""
    async with AsyncExitStack() as stack:
        address = os.environ.get("ZINCIR_TEMPORAL_ADDRESS")
        if not address:
            server = await stack.enter_async_context(await asyncio.to_thread(DevServer.start))
            address = server.address
        client = await Client.connect(address)
        folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="zincir-tbench-"))
        store = zincir.open_store(Path(folder) / "records.db")
        stack.push_async_callback(store.close)
        tag = uuid.uuid4().hex[:8]
        zincir_queue, raw_queue = f"bench-zincir-{tag}", f"bench-raw-{tag}"
        registry = _registry()
        await stack.enter_async_context(Worker(client, registry, zincir_queue))
        await stack.enter_async_context(
            TemporalWorker(
                client, task_queue=raw_queue, workflows=[RawOperation], activities=[raw_step]
            )
        )
        runtime = TemporalRuntime(client, task_queue=zincir_queue, registrations=registry)
        stored = TemporalRuntime(
            client, task_queue=zincir_queue, registrations=registry, record_store=store
        )

        async def raw(i: int) -> None:
            await client.execute_workflow(
                RawOperation.run, i, id=f"bench-raw-{tag}-{i}", task_queue=raw_queue
            )

        for i in range(5):  # warm-up
            await runtime.execute(_invocation(f"warm-{tag}", i))
            await raw(-1 - i)
        execute, baseline, with_store = [], [], []
        for i in range(n):
            if i % 2:
                baseline.append(await _ms(raw(i)))
                execute.append(await _ms(runtime.execute(_invocation(f"run-{tag}", i))))
            else:
                execute.append(await _ms(runtime.execute(_invocation(f"run-{tag}", i))))
                baseline.append(await _ms(raw(i)))
            with_store.append(await _ms(stored.execute(_invocation(f"store-{tag}", i))))
        replay = [await _ms(runtime.execute(_invocation(f"run-{tag}", i))) for i in range(n)]
        replay_store = [await _ms(stored.execute(_invocation(f"store-{tag}", i))) for i in range(n)]
    execute_ms, raw_ms = statistics.median(execute), statistics.median(baseline)
    return {
        "execute_ms": execute_ms,
        "raw_ms": raw_ms,
        "runtime_over_raw": execute_ms / raw_ms,
        "execute_record_store_ms": statistics.median(with_store),
        "replay_ms": statistics.median(replay),
        "replay_record_store_ms": statistics.median(replay_store),
    }


if __name__ == "__main__":
    figures = asyncio.run(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 30))
    for name, value in figures.items():
        print(f"{name:<26} {value:8.2f}")
    sys.stdout.flush()
    os._exit(0)  # temporalio's Rust threads can abort interpreter teardown (sdk-python #300)
