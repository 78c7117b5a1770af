"""Automatic resume: a ResumeWorker finishes a run that a dead process abandoned.

1. A child process creates a run with a short lease, records a model response that asks for
   a tool, and exits without releasing its lease (``os._exit``: no cleanup, like a crash).
2. This process starts a ResumeWorker. It cannot claim the run while that lease is live;
   once the lease expires it claims the run (a new fencing token) and hands an owned
   AgentContext to the handler, which runs the pending tool with its idempotency key,
   records the result and completes the run.

Database: $ZINCIR_DATABASE_PATH, else a temporary file.
Run it with: python examples/automatic_resume.py
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta

import zincir

ABANDONED_LEASE = timedelta(milliseconds=500)


async def abandon(db_path: str, run_id: str) -> None:
    """Start a run, record some work, then die holding the lease."""
    store = zincir.open_store(db_path)
    ctx = await zincir.AgentContext.create(
        store,
        name="release-notes-agent",
        config={"goal": "Summarise the 2.0 release"},
        lease_ttl=ABANDONED_LEASE,
        run_id=run_id,
    )
    await ctx.record_response(
        "I need the release notes first.",
        [zincir.ToolCall("call_1", "fetch_notes", {"version": "2.0"})],
        "tool_use",
    )
    print(
        f"[first process] run {run_id}: recorded a response and the intent for call_1; "
        "dying without releasing the lease",
        flush=True,
    )
    os._exit(0)  # no close(), no release(): what a crash leaves behind


async def resume(db_path: str, run_id: str) -> None:
    """Run a ResumeWorker until it has completed the abandoned run."""
    store = zincir.open_store(db_path)
    finished = asyncio.Event()
    started = time.monotonic()

    async def handler(ctx: zincir.AgentContext) -> None:
        if ctx.run_id != run_id:  # a shared database may hold other runs: leave them be
            await ctx.close()
            return
        state = await ctx.state()
        pending = await ctx.pending_tools()
        print(
            f"[worker] claimed the run {time.monotonic() - started:.2f}s after the crash, "
            f"lease token {ctx.lease_token}; {len(state.events)} events in its log, "
            f"pending tools: {[call.id for call in pending]}"
        )
        for call in pending:
            notes = {"version": call.arguments["version"], "highlights": ["faster replay"]}
            await ctx.record_tool_result(call.id, notes)
            print(f"[worker] ran {call.name}({call.arguments}) with idempotency key {call.id}")
        await ctx.complete({"summary": "2.0 makes replay faster"})
        finished.set()

    try:
        run = await store.get_run(run_id)
        assert run is not None
        print(
            f"[worker] the run is {run['status']}, leased by {run['lease_owner']} until "
            f"{run['lease_expires_at']}: waiting for that lease to expire"
        )
        worker = (
            zincir.ResumeWorker(store, lease_ttl=timedelta(seconds=5))
            .poll_interval(timedelta(milliseconds=50))
            .max_concurrency(4)
        )
        await asyncio.wait_for(worker.run(handler, finished.wait()), timeout=30)
        run = await store.get_run(run_id)
        assert run is not None
        print(
            f"[worker] run {run_id} is {run['status']} after {run['attempts']} claim(s); "
            f"result {run['result']}"
        )
        for event in await store.list_events(run_id):
            print(f"  {event.seq:>2} {event.type:<17} {json.dumps(event.payload)}")
    finally:
        await store.close()


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--abandon":
        asyncio.run(abandon(sys.argv[2], sys.argv[3]))
        return
    db_path = os.environ.get("ZINCIR_DATABASE_PATH") or os.path.join(
        tempfile.mkdtemp(prefix="zincir-resume-"), "zincir.db"
    )
    run_id = f"resume-{uuid.uuid4().hex[:8]}"
    print(f"database: {db_path}")
    subprocess.run([sys.executable, __file__, "--abandon", db_path, run_id], check=True)
    asyncio.run(resume(db_path, run_id))


if __name__ == "__main__":
    main()
