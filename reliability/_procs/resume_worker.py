"""A ResumeWorker process that reports when it resumes each run.

    python -m reliability._procs.resume_worker DB TTL POLL

Runs a ResumeWorker (lease TTL and poll interval in seconds) until stdin closes. Its
handler prints ``resumed RUN EPOCH TOKEN`` (``time.time()`` as the handler starts) and
completes the run.
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import timedelta

import zincir
from reliability._procs import say


async def stdin_closed() -> None:
    """Wait until the parent closes our stdin: the signal to shut down."""
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)


async def resume(ctx: zincir.AgentContext) -> None:
    say(f"resumed {ctx.run_id} {time.time():.6f} {ctx.lease_token}")
    await ctx.complete()


async def main(db: str, ttl: float, poll: float) -> None:
    store = zincir.open_store(db)
    try:
        worker = (
            zincir.ResumeWorker(store, lease_ttl=timedelta(seconds=ttl))
            .poll_interval(timedelta(seconds=poll))
            .max_concurrency(32)
        )
        say("ready")
        await worker.run(resume, stdin_closed())
    finally:
        await store.close()


if __name__ == "__main__":
    db, ttl, poll = sys.argv[1:4]
    asyncio.run(main(db, float(ttl), float(poll)))
