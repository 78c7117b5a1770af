"""A process that runs one MCP task through ``DurableMCPClient.run_task``, for the crash test.

    python -m tests.durable_mcp.task_worker STORE URL SECONDS

It creates a task of the input server's ``long`` tool at identity ``job #0`` and polls it;
the test SIGKILLs it while it polls, then runs it again and reads ``result: <text>``.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import mcp_types

import zincir
from tests.durable_mcp.conftest import worker
from zincir.mcp import DurableMCPClient, DurableRequest, streamable_http


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("url")
    parser.add_argument("seconds", type=float)
    args = parser.parse_args()
    store = zincir.open_store(args.store)
    try:
        served = worker(store, None, streamable_http(args.url), claim_ttl=0.5)  # type: ignore[arg-type]
        client = DurableMCPClient(None, served.binding("task-run"))
        deadline = time.monotonic() + 30
        while True:
            try:
                result = await client.run_task(
                    "long",
                    {"seconds": args.seconds},
                    durable=DurableRequest("job", 0),
                    poll_interval=0.05,
                )
                break
            except zincir.LeaseHeld:  # the killed process's poll, until its lease runs out
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        content = result.content[0]
        assert isinstance(content, mcp_types.TextContent)
        print(f"result: {content.text}", flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
