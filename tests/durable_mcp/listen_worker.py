"""A process that runs one durable subscription and delivers its events, for the crash test.

    python -m tests.durable_mcp.listen_worker DB LEDGER DELIVERIES [--die-at INDEX]

The subscription calls the test server's ``slow`` tool (four progress notifications) over
stdio. The event handler writes ``attempt i`` before delivering and ``deliver i`` after;
with ``--die-at i`` the process SIGKILLs itself between the two for event ``i``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import zincir
from tests.agent.reference import append
from tests.conftest import REPO
from tests.durable_mcp.conftest import HANDLERS, server_env, worker
from zincir.mcp import DurableMCPClient, DurableRequest, stdio
from zincir.payloads import EventDelivery


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("ledger")
    parser.add_argument("deliveries")
    parser.add_argument("--die-at", type=int)
    args = parser.parse_args()
    deliveries = Path(args.deliveries)

    async def deliver(invocation: zincir.Invocation, request: Any) -> dict[str, Any]:
        event = EventDelivery.from_json(invocation.input_json)
        append(deliveries, f"attempt {event.index}")
        if event.index == args.die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        append(deliveries, f"deliver {event.index} {event.data['progress']}")  # type: ignore[index, call-overload]
        return {"delivered": event.index}

    store = zincir.open_store(args.db)
    try:
        connect = stdio(
            sys.executable,
            ["-m", "tests.durable_mcp.server"],
            env=server_env(Path(args.ledger)),
            cwd=REPO,
        )
        served = worker(store, Path(args.db), connect, claim_ttl=0.5)
        served.registry.register(zincir.OperationKind.EVENT_DELIVERY, "test-events", deliver)
        client = DurableMCPClient(None, served.binding(handlers=HANDLERS))
        result = await client.listen_durable(
            "tools/call",
            {"name": "slow", "arguments": {"n": 4}},
            durable=DurableRequest("watch", 7),
        )
        print(f"result: {result.content[0].text}", flush=True)  # type: ignore[attr-defined]
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
