"""The durable stream's cost for ``make bench``: a streamed agent turn with and without it.

    python benchmarks/stream_bench.py [--quick]     (this section alone)

A turn is one ``model.stream`` request whose ``FunctionModel`` yields a text answer of
``DELTAS`` deltas at once (no model latency: the figure is zincir's own cost), on a
LocalRuntime over a FULL store. The runs with and without the durable stream alternate on
one database each. ``stream_bytes_per_1000_deltas`` is what the stream adds to the
database (its size after a WAL checkpoint, with the stream against without it, over the
same runs) per 1,000 deltas; ``stream_delta_payload_bytes_per_1000`` the delta rows'
payload text alone.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import apsw

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

import zincir  # noqa: E402
from zincir.agent import Agent, DurableBinding, FunctionModel, Handlers, serve  # noqa: E402
from zincir.contract.payloads import (  # noqa: E402
    ModelRequest,
    ModelResponse,
    PartDelta,
    PartEnd,
    PartStart,
    StreamPart,
    StreamUsage,
    TextPart,
    Usage,
)
from zincir.durable import HandlerRegistry, LocalRuntime, RetryPolicy  # noqa: E402

DELTAS = 200
HANDLERS = Handlers(model_stream="bench-stream")
WORDS = [f"tok{i % 97} " for i in range(DELTAS)]


def _answer(request: ModelRequest) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text="".join(WORDS))])


async def _stream(request: ModelRequest) -> AsyncIterator[StreamPart]:
    yield PartStart(index=0, part_kind="text")
    for word in WORDS:
        yield PartDelta(index=0, delta=word)
    yield PartEnd(index=0)
    yield StreamUsage(usage=Usage(input_tokens=20, output_tokens=DELTAS))


def _setup(path: str) -> tuple[Agent, zincir.Store, LocalRuntime]:
    agent = Agent(FunctionModel(_answer, _stream), name="streamer")
    registry = HandlerRegistry()
    serve(registry, agent, HANDLERS)
    store = zincir.open_store(path, synchronous="full")
    return agent, store, LocalRuntime(store, registry, retry=RetryPolicy(max_attempts=1))


async def _turn(agent: Agent, runtime: LocalRuntime, run_id: str, durable_stream: bool) -> None:
    binding = DurableBinding(runtime, run_id, HANDLERS, durable_stream=durable_stream)
    stream = agent.run_stream("Say it.", durable=binding)
    async for _ in stream:
        pass
    assert stream.result.output == "".join(WORDS)


def _size(path: str) -> int:
    """The database's size once its WAL is checkpointed into it."""
    conn = apsw.Connection(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return os.path.getsize(path)


def _delta_payload_bytes(path: str) -> int:
    conn = apsw.Connection(path)
    try:
        row = conn.execute(
            "SELECT coalesce(sum(length(payload)), 0) FROM stream_items "
            "WHERE kind IN ('part_start', 'part_delta', 'part_end')"
        ).fetchone()
    finally:
        conn.close()
    return int(row[0]) if row else 0


async def turns_us(plain_db: str, streamed_db: str, runs: int) -> tuple[float, float]:
    """Per streamed turn (µs): without the durable stream, with it; alternating runs."""
    plain, plain_store, plain_runtime = _setup(plain_db)
    streamed, streamed_store, streamed_runtime = _setup(streamed_db)
    try:
        for i in range(3):  # warm-up
            await _turn(plain, plain_runtime, f"warm-{i}", False)
            await _turn(streamed, streamed_runtime, f"warm-{i}", True)
        without, with_stream = [], []
        for i in range(runs):
            for samples, agent, runtime, on in (
                (without, plain, plain_runtime, False),
                (with_stream, streamed, streamed_runtime, True),
            ):
                started = time.perf_counter()
                await _turn(agent, runtime, f"turn-{i}", on)
                samples.append((time.perf_counter() - started) * 1e6)
        return statistics.median(without), statistics.median(with_stream)
    finally:
        await plain_store.close()
        await streamed_store.close()


async def _fill(path: str, runs: int, durable_stream: bool) -> None:
    agent, store, runtime = _setup(path)
    try:
        for i in range(runs):
            await _turn(agent, runtime, f"size-{i}", durable_stream)
    finally:
        await store.close()


def measure(
    bench: Any, run_async: Callable[[Awaitable[Any]], Any]
) -> tuple[dict[str, float], dict[str, float]]:
    """The section's figures and ratios."""
    runs = bench.n(60, 15)
    plain_us, streamed_us = run_async(
        turns_us(bench.db("stream-turn-plain"), bench.db("stream-turn-durable"), runs)
    )
    size_runs = bench.n(50, 10)
    plain_db, streamed_db = bench.db("stream-size-plain"), bench.db("stream-size-durable")
    run_async(_fill(plain_db, size_runs, False))
    run_async(_fill(streamed_db, size_runs, True))
    deltas = size_runs * (DELTAS + 2)  # each text part's start and end are deltas too
    grown = _size(streamed_db) - _size(plain_db)
    figures = {
        "stream_turn_us": plain_us,
        "stream_turn_durable_us": streamed_us,
        "stream_bytes_per_1000_deltas": grown / deltas * 1000,
        "stream_delta_payload_bytes_per_1000": _delta_payload_bytes(streamed_db) / deltas * 1000,
    }
    ratios = {"stream_turn_durable_over_plain": streamed_us / plain_us}
    return figures, ratios


def main() -> None:
    import asyncio

    from run import Bench

    bench = Bench("--quick" in sys.argv, 1)
    figures, ratios = measure(bench, asyncio.run)
    for name, value in {**figures, **ratios}.items():
        print(f"{name:<42} {value:>12.2f}")
    print(f"({DELTAS} deltas a turn, FULL, {'quick' if bench.quick else 'full'} sizes)")


if __name__ == "__main__":
    main()
