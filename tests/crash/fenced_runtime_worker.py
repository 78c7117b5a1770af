"""An agent process whose LocalRuntime runs an operation inside its own run, for the fencing tests.

    python fenced_runtime_worker.py DB RUN_ID RELEASE_FILE

DB is what ``zincir.open_store`` opens: a SQLite path or a postgresql:// URL.

Creates run RUN_ID with an AgentContext (so this process holds its lease), then executes
one invocation of that run whose handler prints ``inside`` and waits for RELEASE_FILE.
Prints ``record <canonical record>`` when execute returns, or ``error <ErrorName>`` when it
raises a zincir error, and exits 0 either way.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import zincir
from zincir.contract import Invocation, OperationKind, encode_record
from zincir.durable import HandlerRegistry, LocalRuntime, RetryPolicy


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(db: str, run_id: str, release: str) -> None:
    async def handler(invocation: Invocation, request: Any) -> Any:
        say("inside")
        while not os.path.exists(release):
            await asyncio.sleep(0.01)
        return {"by": os.getpid()}

    registry = HandlerRegistry()
    registry.register(OperationKind.TOOL_CALL, "fenced-tools", handler)
    store = zincir.open_store(db)
    try:
        ctx = await zincir.AgentContext.create(store, "fenced", run_id=run_id)
        runtime = LocalRuntime(
            store, registry, RetryPolicy.no_retry(), claim_ttl=0.3, poll_interval=0.02
        )
        invocation = Invocation(
            run_id, "tool.call", 0, OperationKind.TOOL_CALL, "fenced-tools", '{"order":"A1"}'
        )
        try:
            record = await runtime.execute(invocation)
        except zincir.ZincirError as error:
            say(f"error {type(error).__name__}")
        else:
            say("record " + encode_record(record))
        await ctx.close()
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
