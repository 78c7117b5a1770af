"""A ResumeWorker process for the queued-workflow tests: ``python queued_flow_worker.py DB STOP``.

Serves workflows named ``queued-flow`` (``$ZINCIR_QUEUE_SLOTS`` at a time, default 10) until
the file STOP exists. Each run's one step appends ``start LABEL KEY PID TIME`` and ``end LABEL
KEY PID TIME`` (its config's label and key) to ``$ZINCIR_QUEUE_LOG`` around a sleep of
``$ZINCIR_QUEUE_SLEEP`` seconds (default 0.3).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import zincir  # noqa: E402
from tests.agent.reference import append  # noqa: E402
from zincir import AgentContext, WorkflowContext  # noqa: E402

NAME = "queued-flow"
LOG_ENV = "ZINCIR_QUEUE_LOG"
SLEEP_ENV = "ZINCIR_QUEUE_SLEEP"
SLOTS_ENV = "ZINCIR_QUEUE_SLOTS"


def note(what: str, label: str, key: str) -> None:
    append(Path(os.environ[LOG_ENV]), f"{what} {label} {key} {os.getpid()} {time.time():.6f}")


async def handler(ctx: AgentContext) -> None:
    config = (await ctx.state()).config
    label, key = str(config["label"]), str(config.get("key") or "-")

    async def work() -> str:
        note("start", label, key)
        await asyncio.sleep(float(os.environ.get(SLEEP_ENV, "0.3")))
        note("end", label, key)
        return "done"

    wf = WorkflowContext.from_agent(ctx)
    await wf.complete(await wf.step("work", work))


async def stopped(path: Path) -> None:
    while not path.exists():
        await asyncio.sleep(0.05)


async def main(target: str, stop: Path) -> None:
    store = zincir.open_store(target)
    try:
        worker = (
            zincir.ResumeWorker(store, names=[NAME])
            .max_concurrency(int(os.environ.get(SLOTS_ENV, "10")))
            .poll_interval(0.05)
        )
        sys.stdout.write("serving\n")
        sys.stdout.flush()
        await worker.run(handler, stopped(stop))
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
