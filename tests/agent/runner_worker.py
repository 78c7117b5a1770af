"""Runs the weather agent through a Runner, for the Runner's crash tests.

    python runner_worker.py DB RUN_ID PROMPT

With ``$ZINCIR_RUNNER_HANG`` set the tool prints ``inside`` and sleeps until the process is
killed; otherwise the process prints ``output <text>`` and exits. The run's lease is 60 s,
so a restart that finishes sooner did not wait for it.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.agent.runner_agents import agent  # noqa: E402
from zincir.agent import Runner  # noqa: E402

LEASE_TTL = timedelta(seconds=60)


async def main(db: str, run_id: str, prompt: str) -> None:
    async with Runner(db, [agent], lease_ttl=LEASE_TTL) as runner:
        result = await runner.run(agent, prompt, run_id=run_id)
        sys.stdout.write(f"output {result.output}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
