"""Recovery latency: from the SIGKILL of an owner to its run resumed by a ResumeWorker.

One ResumeWorker process (``_procs/resume_worker.py``) polls a SQLite file. Owner
processes (``_procs/latency_owner.py``) each create a run and store steps until this
process SIGKILLs them at a random moment, after writing down ``time.time()``. The worker's
handler writes ``time.time()`` as it starts on the run. The owners run on the worker's
machine, so the worker sees at its next poll that a dead owner's process is gone and takes
its run over without waiting for the lease (a few seconds): the latency should stay within
the poll interval plus a little for the claim itself, far below the lease TTL.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import tempfile
import time
from pathlib import Path

import zincir
from reliability._harness import Report, at_most, equal
from reliability._procs import Child, percentile, query

ORDER = 8
TITLE = "Recovery latency: SIGKILL to resumed by a ResumeWorker"

TTL = 2.0
"""The owners' lease TTL (and the worker's), in seconds: long enough that a resumption
which waited for the dead owner's lease would stand out."""
POLL = 0.1
"""The worker's poll interval, in seconds."""
SLACK = 0.1
"""What the target allows beyond the poll interval: the claim, the handler's start."""
KILLS = {True: 10, False: 100}
LANES = {True: 2, False: 2}
"""Owners alive at once (each killed on its own schedule); more would measure this machine's
two CPUs starting owner processes rather than zincir."""


def run(short: bool) -> Report:
    """Kill owners, time their runs' resumption, and hold p50 and p99 to the target."""
    kills, lanes = KILLS[short], LANES[short]
    with tempfile.TemporaryDirectory(prefix="zincir-recovery-") as folder:
        killed_at, resumed, completed = asyncio.run(_measure(Path(folder), kills, lanes))
    latencies = [
        resumed[run_id][0][0] - killed_at[run_id] for run_id in killed_at if resumed.get(run_id)
    ]
    resumed_twice = sum(len(times) > 1 for times in resumed.values())
    limit = POLL + SLACK
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    figures = [
        equal("owners killed", len(killed_at), kills),
        equal("runs resumed", len(latencies), kills),
        equal("runs resumed more than once", resumed_twice, 0),
        equal("runs completed by the worker", completed, kills),
        at_most("p50 latency (s)", round(p50, 3), limit),
        at_most("p99 latency (s)", round(p99, 3), limit),
    ]
    notes = [
        f"Lease TTL {TTL * 1000:.0f} ms (heartbeat every TTL/3, a step every ~10 ms), poll "
        f"interval {POLL * 1000:.0f} ms, target poll + {SLACK * 1000:.0f} ms; {lanes} "
        f"owners alive at once; latency min {min(latencies, default=0) * 1000:.0f} ms, max "
        f"{max(latencies, default=0) * 1000:.0f} ms. Timestamps are time.time() in the "
        "killing process and in the worker's handler.",
        "The owners run on the worker's machine: the worker takes a dead owner's run over "
        "at its next poll (same-machine takeover), without waiting for the lease to expire; "
        "an owner on another machine is waited out (TTL + poll interval).",
    ]
    return Report("recovery_latency", TITLE, figures, notes, short=short)


async def _measure(
    folder: Path, kills: int, lanes: int
) -> tuple[dict[str, float], dict[str, list[tuple[float, int]]], int]:
    """Kill ``kills`` owners, ``lanes`` at a time; return each run's kill time and the
    worker's (start time, token) per resumption, and how many runs ended completed."""
    db = folder / "recovery.db"
    store = zincir.open_store(db)  # migrated before any child opens it
    await store.close()
    worker = await Child.start("resume_worker", str(db), str(TTL), str(POLL), stdin=True)
    killed_at: dict[str, float] = {}
    resumed: dict[str, list[tuple[float, int]]] = {}
    arrived: dict[str, asyncio.Event] = {}
    try:
        await worker.expect("ready")
        reader = asyncio.ensure_future(_read_resumptions(worker, resumed, arrived))
        indexes = iter(range(kills))

        async def lane() -> None:
            for index in indexes:
                run_id = f"latency-{index}"
                arrived[run_id] = asyncio.Event()
                killed_at[run_id] = await _kill_one(db, run_id, random.Random(index))
                await asyncio.wait_for(arrived[run_id].wait(), timeout=30 * TTL)

        await asyncio.gather(*(lane() for _ in range(lanes)))
        await asyncio.sleep(2 * TTL + 2 * POLL)  # time for a second, wrong resumption
        assert worker.process.stdin is not None
        worker.process.stdin.close()
        await worker.process.wait()
        await reader
    finally:
        await worker.close()
    [(completed,)] = query(db, "SELECT COUNT(*) FROM agent_runs WHERE status = 'completed'")
    return killed_at, resumed, int(completed)


async def _kill_one(db: Path, run_id: str, chance: random.Random) -> float:
    """Start an owner of ``run_id``, let it work a random while, SIGKILL it; the kill time."""
    owner = await Child.start("latency_owner", str(db), run_id, str(TTL))
    try:
        await owner.expect("ready")
        await asyncio.sleep(chance.uniform(0.05, 2 * TTL))
        killed = time.time()
        os.kill(owner.pid, signal.SIGKILL)
        await owner.process.wait()
        return killed
    finally:
        await owner.close()


async def _read_resumptions(
    worker: Child, resumed: dict[str, list[tuple[float, int]]], arrived: dict[str, asyncio.Event]
) -> None:
    """Collect the worker's ``resumed RUN EPOCH TOKEN`` lines until it exits."""
    assert worker.process.stdout is not None
    while raw := await worker.process.stdout.readline():
        words = raw.decode().split()
        if words[:1] == ["resumed"]:
            run_id, at, token = words[1], float(words[2]), int(words[3])
            resumed.setdefault(run_id, []).append((at, token))
            if run_id in arrived:
                arrived[run_id].set()
