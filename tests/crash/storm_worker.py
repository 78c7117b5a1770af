"""One of several processes that keep taking the same run from each other (fencing storm).

    python storm_worker.py DB RUN_ID SECONDS

Until SECONDS have passed: force-recover the run, record an ``llm_call`` naming the new
lease token, then execute operations of the run through a LocalRuntime (each handler
sleeps a little, so other processes take the run over mid-operation). Every zincir error
(FencedOut, RunTerminal, LeaseLost, …) just starts the next round.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from typing import Any

import zincir
from zincir.contract import Invocation, OperationKind
from zincir.durable import HandlerRegistry, LocalRuntime, RetryPolicy


async def main(db: str, run_id: str, seconds: float) -> None:
    async def handler(invocation: Invocation, request: Any) -> Any:
        await asyncio.sleep(random.uniform(0.001, 0.02))
        return {"token": request["token"]}

    registry = HandlerRegistry()
    registry.register(OperationKind.TOOL_CALL, "storm-tools", handler)
    store = zincir.open_store(db)
    runtime = LocalRuntime(store, registry, RetryPolicy.no_retry(), claim_ttl=5)
    deadline = time.monotonic() + seconds
    rounds = 0
    try:
        while time.monotonic() < deadline:
            ctx = await zincir.AgentContext.force_recover(store, run_id, lease_ttl=5)
            token = ctx.lease_token
            try:
                await ctx.record_response(f"token {token}", [])
                for k in range(5):
                    body = json.dumps({"token": token, "k": k})
                    await runtime.execute(
                        Invocation(
                            run_id,
                            "tool.call",
                            token * 100 + k,
                            OperationKind.TOOL_CALL,
                            "storm-tools",
                            body,
                        )
                    )
            except zincir.ZincirError:
                pass
            try:
                await ctx.release()
            except zincir.ZincirError:
                pass
            rounds += 1
            await asyncio.sleep(random.uniform(0, 0.01))
    finally:
        await store.close()
    print(f"rounds {rounds}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
