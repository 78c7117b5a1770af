"""A process that writes workflow steps through the durable-image VFS until it is killed.

    python -m reliability._children.power_loss_child DB SYNCHRONOUS RUN_PREFIX SEED

Opens the store (``synchronous`` full or normal) and drives two workflows, ``PREFIX-a``
and ``PREFIX-b``, concurrently, so their writes share group commits. Prints ``open`` once
the store is open and ``ack RUN N`` after the await of step N of RUN returned. After about
one step in eight (seeded) a connection of its own runs a passive checkpoint, as another
process may at any time, so the durable WAL and database move on mid-run.
"""

from __future__ import annotations

import asyncio
import random
import sys

import apsw

import zincir
from reliability._fault_vfs import FaultVFS
from zincir.workflow import WorkflowContext

STEPS_PER_RUN = 100_000
CHECKPOINT_CHANCE = 1 / 8


def step_name(number: int) -> str:
    """The name of a run's step ``number`` (sortable)."""
    return f"s{number:06d}"


async def drive(store: zincir.Store, run_id: str, after_step: asyncio.Queue[str]) -> None:
    """Run steps 1, 2, … of ``run_id`` one after another, reporting each acknowledged one."""
    wf = await WorkflowContext.open(store, run_id, lease_ttl=60)
    for number in range(1, STEPS_PER_RUN + 1):
        await wf.step(step_name(number), lambda number=number: number)
        print("ack", run_id, number, flush=True)
        await after_step.put(run_id)
    await asyncio.Event().wait()


async def checkpoint_now_and_then(
    database: str, after_step: asyncio.Queue[str], rng: random.Random
) -> None:
    """Checkpoint from a second connection after a random share of the steps."""
    conn = apsw.Connection(database)
    while True:
        await after_step.get()
        if rng.random() < CHECKPOINT_CHANCE:
            try:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except apsw.BusyError:
                pass


async def main(database: str, synchronous: str, prefix: str, seed: int) -> None:
    """Open the store on the faulty disk and write until killed."""
    vfs = FaultVFS(track_durability=True)
    assert synchronous in ("full", "normal")
    store = zincir.open_store(database, synchronous="full" if synchronous == "full" else "normal")
    print("open", flush=True)
    after_step: asyncio.Queue[str] = asyncio.Queue()
    await asyncio.gather(
        drive(store, f"{prefix}-a", after_step),
        drive(store, f"{prefix}-b", after_step),
        checkpoint_now_and_then(database, after_step, random.Random(seed)),
    )
    del vfs


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
