"""An owner whose event loop a CPU-bound handler blocks past its lease deadline.

    python -m reliability._procs.starved_owner DB RUN_ID TTL KIND

Creates run RUN_ID (lease TTL seconds), stores one step, prints ``starving EXPIRY`` (the
stored lease expiry, epoch seconds) and then blocks its event loop, as a CPU-bound handler
does, until two TTLs past that expiry: no heartbeat can run. Then it starts new work of
KIND: ``step`` (a workflow step) or ``tool`` (a tool call through a LocalRuntime, as the
durable agent runs them). The work's body prints ``started LATE`` where LATE is 1 when the
run's stored lease had expired as the body began; a lease error prints ``refused ERROR``.
``done`` ends the output.
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import zincir
from reliability._procs import query, say
from zincir import AgentContext, WorkflowContext
from zincir._time import from_db
from zincir.contract import Invocation, OperationKind
from zincir.durable import HandlerRegistry, LocalRuntime, RetryPolicy

HANDLER_ID = "starved-tools"


def report_start(db: str, run_id: str) -> None:
    """Print whether the run's stored lease had expired as a body started (read without
    awaiting, so nothing else runs in between)."""
    [(expires,)] = query(db, "SELECT lease_expires_at FROM agent_runs WHERE id = ?", (run_id,))
    late = expires is None or datetime.now(UTC) >= from_db(expires)
    say(f"started {int(late)}")


async def main(db: str, run_id: str, ttl: float, kind: str) -> None:
    store = zincir.open_store(db)
    try:
        ctx = await AgentContext.create(
            store, "starved", run_id=run_id, lease_ttl=timedelta(seconds=ttl)
        )
        wf = WorkflowContext.from_agent(ctx)
        await wf.step("warm-up", lambda: {"ok": True})
        [(expires,)] = query(db, "SELECT lease_expires_at FROM agent_runs WHERE id = ?", (run_id,))
        deadline = from_db(expires).timestamp()
        say(f"starving {deadline}")
        while time.time() < deadline + 2 * ttl:  # the CPU-bound handler: no await
            pass

        async def tool(invocation: Invocation, request: Any) -> Any:
            report_start(db, run_id)
            return {"ran": True}

        def body() -> dict[str, bool]:
            report_start(db, run_id)
            return {"ran": True}

        try:
            if kind == "step":
                await wf.step("after-starving", body)
            else:
                registry = HandlerRegistry()
                registry.register(OperationKind.TOOL_CALL, HANDLER_ID, tool)
                runtime = LocalRuntime(store, registry, RetryPolicy.no_retry(), claim_ttl=ttl)
                await runtime.execute(
                    Invocation(run_id, "starved", 0, OperationKind.TOOL_CALL, HANDLER_ID, "{}")
                )
        except zincir.LeaseError as error:
            say(f"refused {type(error).__name__}")
        say("done")
    finally:
        await store.close()


if __name__ == "__main__":
    db, run_id, ttl, kind = sys.argv[1:5]
    asyncio.run(main(db, run_id, float(ttl), kind))
