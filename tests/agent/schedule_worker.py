"""Serves the weather agent, and so its schedules, for the schedule tests.

    python schedule_worker.py DB SECONDS

Prints ``serving`` once the runner is built, serves for SECONDS (polling every 50 ms),
then prints ``done`` and exits. With ``$ZINCIR_RUNNER_KEYS`` set each run of the
``lookup`` tool appends its run id to that file (see ``runner_agents``).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.agent.runner_agents import agent  # noqa: E402
from zincir.agent import Runner  # noqa: E402


async def main(db: str, seconds: str) -> None:
    async with Runner(db, [agent], lease_ttl=10.0) as runner:
        sys.stdout.write("serving\n")
        sys.stdout.flush()
        await runner.serve(asyncio.sleep(float(seconds)), poll_interval=0.05)
        sys.stdout.write("done\n")
        sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:3]))
