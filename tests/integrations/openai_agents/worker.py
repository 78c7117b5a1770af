"""A support run on DurableRunner in a child process (the crash tests kill it).

    python worker.py DB BASE_URL LOG RUN_ID [KILL_IN]

Runs the triage → billing agents of support_agents.py to the end and prints the final output;
with KILL_IN (``lookup`` or ``refund``) that tool SIGKILLs the process when called.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import zincir
from tests.integrations.openai_agents.support_agents import PROMPT, support
from zincir.integrations.openai_agents import DurableRunner


async def main(db: str, base_url: str, log: str, run_id: str, kill_in: str | None) -> None:
    async with zincir.open_store(db) as store:
        runner = DurableRunner(store, lease_ttl=30)
        agent = support(base_url, Path(log), kill_in=kill_in)
        result = await runner.run(agent, PROMPT, run_id=run_id)
        print(f"output: {result.final_output}", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(args[0], args[1], args[2], args[3], args[4] if len(args) > 4 else None))
