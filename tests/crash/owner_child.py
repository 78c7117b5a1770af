"""A process that takes a run's lease (60 s) and waits to be SIGKILLed.

    owner_child.py agent DB RUN      AgentContext.create, one event appended
    owner_child.py recover DB RUN    AgentContext.recover of an existing run
    owner_child.py workflow DB RUN   WorkflowContext.open, step "s1" done

DB is what ``zincir.open_store`` opens: a SQLite path or a postgresql:// URL. Once it holds
the lease it prints ``ready OWNER TOKEN`` and blocks.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

import zincir
from zincir.store import NewEvent
from zincir.workflow import WorkflowContext

LEASE = timedelta(seconds=60)


async def main(mode: str, db: str, run_id: str) -> None:
    store = zincir.open_store(db)
    if mode == "workflow":
        wf = await WorkflowContext.open(store, run_id, lease_ttl=LEASE)

        async def body() -> str:
            return "one"

        await wf.step("s1", body)
        lease = wf.agent.lease
    else:
        if mode == "agent":
            ctx = await zincir.AgentContext.create(store, "job", run_id=run_id, lease_ttl=LEASE)
        else:
            ctx = await zincir.AgentContext.recover(store, run_id, lease_ttl=LEASE)
        await store.append_events(ctx.lease, [NewEvent("note", '{"by":"victim"}')])
        lease = ctx.lease
    print("ready", lease.owner, lease.token, flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
