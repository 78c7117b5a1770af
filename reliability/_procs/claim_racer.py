"""One of the processes of the claim race: claims the same expired runs, round after round.

    python -m reliability._procs.claim_racer DB HOLDER ROUNDS PERIOD TTL RUNS SEED

Prints ``ready`` and reads START from stdin, so that every racer starts together. Round R
starts at START + R * PERIOD (epoch seconds) plus up to 2 ms of jitter; there it
claims up to a random 1..RUNS runs as a ResumeWorker does (no backoff, no attempt limit),
holding each lease for TTL seconds without renewing or releasing it. Prints one line per
grant: ``grant RUN TOKEN HOLDER BEFORE AFTER`` (epoch seconds around the claim), then
``done ATTEMPTS EMPTY`` (claims made, and those that got nothing).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from datetime import timedelta

import zincir
from reliability._procs import say


def no_backoff(attempt: int) -> timedelta:
    """Every run is claimable again as soon as its lease expires."""
    return timedelta(0)


async def main(
    db: str, holder: str, rounds: int, period: float, ttl: float, runs: int, seed: int
) -> None:
    chance = random.Random(seed)
    store = zincir.open_store(db)
    empty = 0
    try:
        say("ready")
        start = float(sys.stdin.readline())
        for round_no in range(rounds):
            due = start + round_no * period + chance.uniform(0, 0.002)
            wait = due - time.time()
            if wait > 0:
                await asyncio.sleep(wait)
            before = time.time()
            leases = await store.claim_runs(
                holder,
                timedelta(seconds=ttl),
                chance.randint(1, runs),
                max_attempts=None,
                backoff=no_backoff,
            )
            after = time.time()
            empty += not leases
            for lease in leases:
                say(f"grant {lease.run_id} {lease.token} {lease.owner} {before:.6f} {after:.6f}")
        say(f"done {rounds} {empty}")
    finally:
        await store.close()


if __name__ == "__main__":
    db, holder, rounds, period, ttl, runs, seed = sys.argv[1:8]
    asyncio.run(main(db, holder, int(rounds), float(period), float(ttl), int(runs), int(seed)))
