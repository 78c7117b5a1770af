"""Several workers on one PostgreSQL: the work is shared, and a killed worker's runs finish.

1. This process queues twelve report jobs (runs with no owner) in a PostgreSQL schema.
2. It starts three worker processes, as if on three machines: each connects over TCP and
   runs a ResumeWorker whose handler makes three durable steps per report.
3. Once the first worker has finished a step or two, this process SIGKILLs it. Its runs keep
   their leases until those expire (two seconds here); then the other workers claim them with
   a newer fencing token, replay the steps it had finished and run only the rest.
4. It prints which worker finished each report and checks that no finished step ran twice.

Database: $ZINCIR_POSTGRES_URL (for example postgresql://me@db.internal/app?schema=reports);
the schema is created if it is missing.
Run it with: ZINCIR_POSTGRES_URL=postgresql://... python examples/postgres_workers.py
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import zincir
from zincir import AgentContext, WorkflowContext
from zincir.store.postgres import split_schema

JOBS = 12
STEPS = ("fetch", "summarise", "publish")
LEASE = timedelta(seconds=2)


async def queue_jobs(url: str) -> None:
    """Create the report runs and let go of them, so that any worker may claim each."""
    store = zincir.open_store(url)
    try:
        for number in range(JOBS):
            ctx = await AgentContext.create(
                store, name="report", run_id=f"report-{number:02d}", config={"page": number}
            )
            await ctx.close()
    finally:
        await store.close()


async def work(url: str, name: str, effects: Path) -> None:
    """One worker process: claim reports and step through them until none is left."""
    store = zincir.open_store(url)

    async def handler(ctx: AgentContext) -> None:
        wf = WorkflowContext.from_agent(ctx)
        await wf.recover()  # claimed after the lease expired: its last owner is gone
        for step in STEPS:

            async def body(step: str = step) -> str:
                with effects.open("a") as log:  # the step's side effect, seen by the parent
                    log.write(f"{ctx.run_id} {step} {name}\n")
                await asyncio.sleep(0.2)
                return f"{step} done by {name}"

            await wf.step(step, body)
        await wf.complete({"finished_by": name})

    async def all_done() -> None:
        while True:
            try:
                runs = await store.list_runs(limit=1000)
                if runs and all(run["status"] == "completed" for run in runs):
                    return
            except zincir.StoreError:
                pass  # the server is briefly away: look again
            await asyncio.sleep(0.2)

    worker = (
        zincir.ResumeWorker(store, lease_ttl=LEASE)
        .poll_interval(timedelta(seconds=1))  # LISTEN/NOTIFY wakes it sooner
        .max_concurrency(2)
    )
    try:
        await worker.run(handler, all_done())
    finally:
        await store.close()


def main() -> None:
    url = os.environ.get("ZINCIR_POSTGRES_URL")
    if not url:
        sys.exit("set ZINCIR_POSTGRES_URL to a postgresql:// URL (see the module docstring)")
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        asyncio.run(work(url, sys.argv[2], Path(sys.argv[3])))
        return
    effects = Path(tempfile.mkdtemp(prefix="zincir-workers-")) / "effects.txt"
    asyncio.run(queue_jobs(url))
    print(f"queued {JOBS} reports in {split_schema(url)[2]}")
    workers = {
        name: subprocess.Popen([sys.executable, __file__, "--worker", name, str(effects)])
        for name in ("worker-a", "worker-b", "worker-c")
    }
    while not effects.exists() or "worker-a" not in effects.read_text():
        time.sleep(0.05)
    time.sleep(0.3)
    workers["worker-a"].send_signal(signal.SIGKILL)
    workers["worker-a"].wait()
    print("SIGKILLed worker-a in the middle of its reports")
    for name, process in workers.items():
        if name != "worker-a" and process.wait(timeout=120) != 0:
            sys.exit(f"{name} failed")
    asyncio.run(report(url, effects))


async def report(url: str, effects: Path) -> None:
    store = zincir.open_store(url)
    try:
        runs = await store.list_runs(limit=1000)
    finally:
        await store.close()
    for run in sorted(runs, key=lambda run: run["id"]):
        print(f"  {run['id']}: {run['status']}, {run['result']}, lease token {run['lease_token']}")
    counts = Counter(tuple(line.split()[:2]) for line in effects.read_text().splitlines())
    again = sorted(" ".join(key) for key, count in counts.items() if count > 1)
    print(f"{len(counts)} steps ran; run again after the kill (in flight when it came): {again}")
    if len(runs) != JOBS or any(run["status"] != "completed" for run in runs):
        sys.exit("not every report completed")
    if len(counts) != JOBS * len(STEPS):
        sys.exit("a step is missing")


if __name__ == "__main__":
    main()
