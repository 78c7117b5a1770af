"""A workflow stepping until it is stopped: each step appends its name to a ledger (fsynced)
before its result is stored. argv: database target, run id, ledger path."""

from __future__ import annotations

import asyncio
import os
import sys

import zincir
from zincir import WorkflowContext


async def main(target: str, run_id: str, ledger: str) -> None:
    store = zincir.open_store(target)
    wf = await WorkflowContext.open(store, run_id, lease_ttl=3)

    def effect(name: str) -> str:
        with open(ledger, "a") as file:
            file.write(name + "\n")
            file.flush()
            os.fsync(file.fileno())
        return name

    try:
        for i in range(10_000):
            await wf.step(f"s{i}", lambda i=i: effect(f"s{i}"))
            await asyncio.sleep(0.02)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
