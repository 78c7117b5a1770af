"""A writer process for the concurrency tests: one run, N appended responses."""

from __future__ import annotations

import asyncio
import sys

import zincir


async def main(db_path: str, run_id: str, count: int) -> None:
    store = zincir.open_store(db_path)
    try:
        ctx = await zincir.AgentContext.create(store, name="appender", run_id=run_id)
        for i in range(count):
            await ctx.record_response(f"response {i}", [zincir.ToolCall(f"{run_id}-{i}", "t")])
        await ctx.complete()
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
