"""Writes from many concurrent runs and reports each acknowledged write on stdout.

Used by the group-commit crash test: the parent SIGKILLs this process mid-stream and then
checks that every write reported here is in the database.
"""

from __future__ import annotations

import asyncio
import sys

import zincir


async def main(db_path: str, runs: int) -> None:
    store = zincir.open_store(db_path)
    contexts = [
        await zincir.AgentContext.create(store, name="acker", run_id=f"ack-{r}")
        for r in range(runs)
    ]
    print("ready", flush=True)

    async def write_forever(ctx: zincir.AgentContext) -> None:
        n = 0
        while True:
            seq = await ctx.record_response({"n": n})
            print(f"ack {ctx.run_id} {seq} {n}", flush=True)
            n += 1

    await asyncio.gather(*(write_forever(ctx) for ctx in contexts))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
