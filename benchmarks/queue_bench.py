"""A durable queue's cost: enqueue-to-start latency and throughput with 4 serving processes,
against the plain ResumeWorker claiming the same runs.

    python benchmarks/queue_bench.py [--quick] [--postgres]

The run is one model request answered at once (a ``FunctionModel``: the figure is zincir's
own cost). ``queue`` runs are enqueued (``Runner.enqueue`` into a ``Queue`` with
``concurrency=40``, the 4 processes' slots) and started by ``Runner.serve``; ``plain`` runs
are stored pending (the same row and config, no queue) and claimed by a plain
``ResumeWorker`` running the same handler. Both poll every 50 ms (SQLite has no
notifications).

- ``queue_start_ms`` / ``plain_start_ms``: the median time from storing a run to its model
  request, one run at a time with the processes idle.
- ``queue_runs_per_s`` / ``plain_runs_per_s``: N runs stored at once, until all completed.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "src"))

import zincir  # noqa: E402
from zincir._json import dumps  # noqa: E402
from zincir.agent import Agent, FunctionModel, Runner  # noqa: E402
from zincir.agent._fork import new_run_id  # noqa: E402
from zincir.payloads import ModelRequest, ModelResponse, TextPart  # noqa: E402
from zincir.store._log import insert_run  # noqa: E402

PROCESSES = 4
SLOTS = 10
POLL = 0.05
STARTS_ENV = "ZINCIR_BENCH_STARTS"


def _prompt(request: ModelRequest) -> str:
    for message in request.messages:
        if message.role == "user":
            return "".join(getattr(part, "text", "") for part in message.parts)
    return ""


async def _model(request: ModelRequest) -> ModelResponse:
    """Notes the start (the prompt is the time the run was stored), answers at once."""
    path = os.environ.get(STARTS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as starts:
            starts.write(f"{time.time() - float(_prompt(request)):.6f}\n")
    return ModelResponse(parts=[TextPart(text="ok")])


agent = Agent(FunctionModel(_model), name="bench-queued")
QUEUE = zincir.Queue("bench", concurrency=PROCESSES * SLOTS)


async def _serve(target: str, stop: str, mode: str) -> None:
    async def stopped() -> None:
        while not os.path.exists(stop):
            await asyncio.sleep(0.05)

    async with Runner(target, [agent]) as runner:
        sys.stdout.write("serving\n")
        sys.stdout.flush()
        if mode == "queue":
            await runner.serve(stopped(), max_concurrency=SLOTS, poll_interval=POLL)
            return
        worker = zincir.ResumeWorker(runner.store, runner.lease_ttl, names=[agent.name])
        worker.max_concurrency(SLOTS).poll_interval(POLL)
        await worker.run(runner._resume_claimed, stopped())


async def _store(runner: Runner, mode: str) -> str:
    """Store one run the mode's way; its prompt is the time it was stored."""
    prompt = f"{time.time():.6f}"
    if mode == "queue":
        return await runner.enqueue(agent, prompt, queue=QUEUE)
    run_id = new_run_id(agent.name)
    config = dumps({"agent": agent.name, "prompt": prompt, "stream": False})
    store: Any = runner.store
    await store._write_tx(
        lambda tx: insert_run(tx, run_id, name=agent.name, provider="function", config_json=config)
    )
    return run_id


async def _finished(runner: Runner, run_ids: list[str]) -> None:
    pending = set(run_ids)
    while pending:
        pending = {r for r in pending if not await runner.store.run_is_finished(r)}
        if pending:
            await asyncio.sleep(0.01)


async def _drive(target: str, mode: str, single: int, batch: int) -> tuple[float, float]:
    """(median store-to-start ms one run at a time, runs per second of a batch)."""
    async with Runner(target, [agent]) as runner:
        for _ in range(single):
            await _finished(runner, [await _store(runner, mode)])
        began = time.perf_counter()
        run_ids = [await _store(runner, mode) for _ in range(batch)]
        await _finished(runner, run_ids)
        took = time.perf_counter() - began
    return took, batch / took


def measure_mode(target: str, mode: str, single: int, batch: int, work: Path) -> dict[str, float]:
    """Start the processes, drive them, stop them: the mode's two figures."""
    starts = work / f"{mode}-starts"
    stop = work / f"{mode}-stop"
    env = {**os.environ, STARTS_ENV: str(starts), "PYTHONPATH": str(REPO / "src")}
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--serve", target, str(stop), mode],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(PROCESSES)
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline() == "serving\n"
        _, per_s = asyncio.run(_drive(target, mode, single, batch))
    finally:
        stop.touch()
        for child in children:
            child.communicate(timeout=120)
    latencies = [float(line) * 1000 for line in starts.read_text().split()]
    return {f"{mode}_start_ms": statistics.median(latencies[:single]), f"{mode}_runs_per_s": per_s}


def measure(quick: bool = False, postgres: bool = False) -> dict[str, float]:
    """Both modes on SQLite (and, ``postgres``, on a PostgreSQL server of its own: figures
    prefixed ``pg_``)."""
    single, batch = (10, 50) if quick else (40, 400)
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for mode in ("plain", "queue"):
            figures.update(measure_mode(str(work / f"{mode}.db"), mode, single, batch, work))
        if postgres:
            sys.path.insert(0, str(REPO))
            from tests.postgres_server import PostgresServer

            server = PostgresServer().start()
            try:
                (work / "pg").mkdir()
                for mode in ("plain", "queue"):
                    url = server.new_schema_url(f"bench_{mode}")
                    found = measure_mode(url, mode, single, batch, work / "pg")
                    figures.update({f"pg_{name}": value for name, value in found.items()})
            finally:
                server.stop()
    return figures


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        asyncio.run(_serve(*sys.argv[2:5]))
        return
    for name, value in measure("--quick" in sys.argv, "--postgres" in sys.argv).items():
        print(f"{name:<24} {value:10.1f}")


if __name__ == "__main__":
    main()
