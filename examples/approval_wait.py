"""Human approval wait: a workflow pauses on recv() until another process approves.

The workflow drafts a refund in a durable step, then waits on its ``approval`` topic with a
stored deadline. This script starts a second process that plays the human approver: it sends
the decision with ``zincir.send_message`` under a key, so a retried click stores nothing
new. The waiting run receives the decision, issues the refund in another step and completes.
Had this process died while waiting, a new one opening the run would wait for the same
message until the same deadline.

Database: $ZINCIR_DATABASE_PATH, else a temporary file.
Run it with: python examples/approval_wait.py
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import uuid
from datetime import timedelta
from typing import Any

import zincir


async def approve(db_path: str, run_id: str) -> None:
    """The approver's process: look at the request, then send the decision (twice, keyed)."""
    await asyncio.sleep(0.3)  # a human reading the request
    store = zincir.open_store(db_path)
    try:
        decision = {"approved": True, "by": "alice@example.com"}
        first = await zincir.send_message(store, run_id, "approval", decision, key="ticket-7")
        again = await zincir.send_message(store, run_id, "approval", decision, key="ticket-7")
        print(
            f"[approver] sent the approval as message {first}; a retried click returned "
            f"message {again}",
            flush=True,
        )
    finally:
        await store.close()


def draft_refund() -> dict[str, Any]:
    return {"order": "A-1042", "amount": 49.90, "currency": "EUR"}


async def run_workflow(db_path: str) -> None:
    run_id = f"refund-{uuid.uuid4().hex[:8]}"
    store = zincir.open_store(db_path)
    try:
        wf = await zincir.WorkflowContext.open(store, run_id, name="refund-agent")
        async with wf:
            draft = await wf.step("draft-refund", draft_refund)
            print(f"[agent] run {run_id} drafted a refund {draft}; waiting for approval")
            approver = subprocess.Popen([sys.executable, __file__, "--approve", db_path, run_id])
            decision = await wf.recv("approval", timeout=timedelta(seconds=30))
            await asyncio.to_thread(approver.wait, 30)
            if not isinstance(decision, dict) or not decision.get("approved"):
                print(f"[agent] no approval ({decision!r}); failing the run")
                await wf.fail("refund not approved")
                raise SystemExit(1)
            print(f"[agent] approved by {decision['by']}")
            receipt = await wf.step("issue-refund", lambda: {"refund_id": "R-" + draft["order"]})
            await wf.complete({"receipt": receipt, "approved_by": decision["by"]})
            print(f"[agent] issued {receipt['refund_id']}; run completed")
        for event in await store.list_events(run_id):
            print(f"  {event.seq:>2} {event.type:<17} {json.dumps(event.payload)}")
    finally:
        await store.close()


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--approve":
        asyncio.run(approve(sys.argv[2], sys.argv[3]))
        return
    db_path = os.environ.get("ZINCIR_DATABASE_PATH") or os.path.join(
        tempfile.mkdtemp(prefix="zincir-approval-"), "zincir.db"
    )
    print(f"database: {db_path}")
    asyncio.run(run_workflow(db_path))


if __name__ == "__main__":
    main()
