"""An owner that works on its run until it is SIGKILLed.

    python -m reliability._procs.latency_owner DB RUN_ID TTL

Creates run RUN_ID under a lease of TTL seconds (renewed by the heartbeat every TTL/3),
prints ``ready`` and stores one workflow step every few milliseconds, forever.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

import zincir
from reliability._procs import say
from zincir import AgentContext, WorkflowContext


async def main(db: str, run_id: str, ttl: float) -> None:
    store = zincir.open_store(db)
    ctx = await AgentContext.create(
        store, "recovery-latency", run_id=run_id, lease_ttl=timedelta(seconds=ttl)
    )
    wf = WorkflowContext.from_agent(ctx)
    say("ready")
    index = 0
    while True:
        await wf.step(f"step-{index}", lambda: {"working": True})
        await asyncio.sleep(0.01)
        index += 1


if __name__ == "__main__":
    db, run_id, ttl = sys.argv[1:4]
    asyncio.run(main(db, run_id, float(ttl)))
