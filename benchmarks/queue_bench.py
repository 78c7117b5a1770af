"""A durable queue's cost for ``make bench``: enqueue-to-start latency and throughput with 4
serving processes, against the plain ResumeWorker claiming the same runs, in the same run.

    python benchmarks/queue_bench.py [--quick] [--postgres]     (this section alone)

The run is one model request answered at once (a ``FunctionModel``: the figure is zincir's
own cost). Queued runs are enqueued (``Runner.enqueue`` into a ``Queue`` with
``concurrency=40``, the 4 processes' slots) and started by ``Runner.serve``; plain runs are
stored pending (the same row and config, no queue) and claimed by a plain ``ResumeWorker``
running the same handler. Both poll every 50 ms. Each round starts 4 fresh processes of one
mode, then of the other (the order swapped each round; 7 rounds, 3 with ``--quick``); a
figure is the median of the rounds, a ratio (queued over plain) the median of the rounds'.

- ``queue_plain_start_ms`` / ``queue_queued_start_ms``: the median time from storing a run
  to its model request, one run at a time with the processes idle (40 runs; 10 quick).
- ``queue_plain_runs_per_s`` / ``queue_queued_runs_per_s``: 400 runs (50 quick) stored one
  after another, until all completed, over the time from the first stored.
- ``queue_pg_...``: the same on a PostgreSQL server of its own (``--postgres``).
"""

from __future__ import annotations

import asyncio
import os
import random
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
MODES = ("plain", "queue")
RATIOS = ("start_queued_over_plain", "runs_per_s_queued_over_plain")


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
    """(seconds the batch took, its runs per second); before the batch, ``single`` runs one
    at a time, each stored after a random pause under one poll interval (a run stored just as
    the last one finished would meet the processes' polls at the same phase every time)."""
    pauses = random.Random(0)
    async with Runner(target, [agent]) as runner:
        for _ in range(single):
            await asyncio.sleep(pauses.uniform(0, POLL))
            await _finished(runner, [await _store(runner, mode)])
        began = time.perf_counter()
        run_ids = [await _store(runner, mode) for _ in range(batch)]
        await _finished(runner, run_ids)
        took = time.perf_counter() - began
    return took, batch / took


def measure_mode(
    target: str, mode: str, single: int, batch: int, work: Path, label: str
) -> tuple[float, float]:
    """Start the mode's processes, drive them, stop them: (median store-to-start ms, runs/s)."""
    starts = work / f"{label}-starts"
    stop = work / f"{label}-stop"
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
    return statistics.median(latencies[:single]), per_s


def rounds_of(
    targets: dict[str, str], single: int, batch: int, rounds: int, work: Path
) -> dict[str, float]:
    """Plain and queued alternately (the order swapped each round), each on its own database
    with fresh processes: the medians of the rounds and of the adjacent pairs' ratios."""
    found: dict[str, dict[str, list[float]]] = {m: {"start": [], "per_s": []} for m in MODES}
    for index in range(rounds):
        for mode in MODES if index % 2 == 0 else MODES[::-1]:
            start, per_s = measure_mode(targets[mode], mode, single, batch, work, f"{mode}-{index}")
            found[mode]["start"].append(start)
            found[mode]["per_s"].append(per_s)
    median = statistics.median

    def ratio(kind: str) -> float:
        pairs = zip(found["plain"][kind], found["queue"][kind], strict=True)
        return median([queued / plain for plain, queued in pairs])

    return {
        "plain_start_ms": median(found["plain"]["start"]),
        "queued_start_ms": median(found["queue"]["start"]),
        "plain_runs_per_s": median(found["plain"]["per_s"]),
        "queued_runs_per_s": median(found["queue"]["per_s"]),
        "start_queued_over_plain": ratio("start"),
        "runs_per_s_queued_over_plain": ratio("per_s"),
    }


def measure(
    quick: bool = False, postgres: bool = False, rounds: int | None = None
) -> tuple[dict[str, float], dict[str, float]]:
    """(figures, ratios) named ``queue_...`` on SQLite and, ``postgres``, ``queue_pg_...`` on a
    PostgreSQL server of its own."""
    single, batch = (10, 50) if quick else (40, 400)
    rounds = rounds or (3 if quick else 7)
    figures: dict[str, float] = {}
    ratios: dict[str, float] = {}

    def add(prefix: str, found: dict[str, float]) -> None:
        for name, value in found.items():
            (ratios if name in RATIOS else figures)[f"{prefix}{name}"] = value

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        targets = {mode: str(work / f"{mode}.db") for mode in MODES}
        add("queue_", rounds_of(targets, single, batch, rounds, work))
        if postgres:
            sys.path.insert(0, str(REPO))
            from tests.postgres_server import PostgresServer

            server = PostgresServer().start()
            try:
                (work / "pg").mkdir()
                targets = {mode: server.new_schema_url(f"bench_{mode}") for mode in MODES}
                add("queue_pg_", rounds_of(targets, single, batch, rounds, work / "pg"))
            finally:
                server.stop()
    return figures, ratios


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        asyncio.run(_serve(*sys.argv[2:5]))
        return
    figures, ratios = measure("--quick" in sys.argv, "--postgres" in sys.argv)
    for name, value in {**figures, **ratios}.items():
        print(f"{name:<40} {value:10.2f}")


if __name__ == "__main__":
    main()
