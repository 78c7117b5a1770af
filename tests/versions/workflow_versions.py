"""One deployed version of a four-step workflow, run in its own process by test_deploy.py.

    workflow_versions.py DB RUN VERSION LEDGER [hold:K]

VERSION is ``v1`` (fetch, price, notify, archive) or a v2 that changes it: ``rename``
(price → quote), ``insert`` (audit before price), ``reorder`` (price before fetch),
``remove`` (no price) or ``patched`` (quote instead of price, behind ``patched("new-path")``).
Every step body appends "RUN NAME" to LEDGER first: the external effect the tests count.
``hold:K`` reports "holding" after the K-th step and waits to be killed. Reports, one a
line: "completed RESULTS", "unreplayed ITEMS", or "divergence DETAILS" (exit status 3).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import zincir
from zincir.store import Store
from zincir.workflow import WorkflowContext

LEASE = timedelta(milliseconds=300)
PLANS = {
    "v1": ["fetch", "price", "notify", "archive"],
    "rename": ["fetch", "quote", "notify", "archive"],
    "insert": ["fetch", "audit", "price", "notify", "archive"],
    "reorder": ["price", "fetch", "notify", "archive"],
    "remove": ["fetch", "notify", "archive"],
}


def report(*parts: Any) -> None:
    print(*parts, flush=True)


async def open_when_free(store: Store, run_id: str) -> WorkflowContext:
    """Open the run, waiting for a killed owner's lease to expire."""
    for _ in range(200):
        try:
            return await WorkflowContext.open(store, run_id, lease_ttl=LEASE)
        except zincir.LeaseHeld:
            await asyncio.sleep(0.05)
    raise SystemExit("the lease never expired")


def effect(ledger: str, run_id: str, name: str) -> Callable[[], Awaitable[str]]:
    async def body() -> str:
        with open(ledger, "a") as side:
            side.write(f"{run_id} {name}\n")
            side.flush()
            os.fsync(side.fileno())
        return name.upper()

    return body


async def main(db: str, run_id: str, version: str, ledger: str, hold: int | None) -> int:
    store = zincir.open_store(db)
    wf = await open_when_free(store, run_id)
    results: list[str] = []
    done = 0

    async def step(name: str) -> None:
        nonlocal done
        results.append(await wf.step(name, effect(ledger, run_id, name)))
        done += 1
        if done == hold:
            report("holding", name)
            await asyncio.Event().wait()

    try:
        if version == "patched":
            await step("fetch")
            await step("quote" if await wf.patched("new-path") else "price")
            await step("notify")
            await step("archive")
        else:
            for name in PLANS[version]:
                await step(name)
    except zincir.VersionDivergence as error:
        details = [error.position, error.recorded, error.attempted]
        report("divergence", json.dumps(details))
        await wf.close()
        await store.close()
        return 3
    report("unreplayed", json.dumps(await wf.unreplayed()))
    await wf.complete(results)
    report("completed", json.dumps(results))
    await store.close()
    return 0


if __name__ == "__main__":
    db, run_id, version, ledger, *rest = sys.argv[1:]
    hold = int(rest[0].removeprefix("hold:")) if rest else None
    sys.exit(asyncio.run(main(db, run_id, version, ledger, hold)))
