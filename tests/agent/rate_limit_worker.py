"""Runs one-request agent runs against the scripted chat server for a while, sharing a
``zincir.RateLimit`` through the store with every other process running it.

    python rate_limit_worker.py DB BASE_URL SECONDS RPM TPM NAME

``RPM``/``TPM`` are the limits ("-": none); ``NAME`` prefixes this process's run ids. Two
runs at a time; each run's one model request is rate limited. Prints ``ready`` once the
Runner is open and ``runs N`` at the end.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import openai  # noqa: E402

from tests.agent.openai_server import API_KEY  # noqa: E402
from zincir import RateLimit  # noqa: E402
from zincir.agent import Agent, OpenAIChatModel, Runner  # noqa: E402

KEY = "shared-key"
CONCURRENCY = 2


def _limit(value: str) -> float | None:
    return None if value == "-" else float(value)


async def main(db: str, base_url: str, seconds: str, rpm: str, tpm: str, name: str) -> None:
    client = openai.AsyncOpenAI(base_url=base_url, api_key=API_KEY, max_retries=0)
    limit = RateLimit(KEY, requests_per_minute=_limit(rpm), tokens_per_minute=_limit(tpm))
    model = OpenAIChatModel("gpt-test", client, rate_limit=limit)
    agent = Agent(model, name="limited", instructions="Answer briefly.")
    counter = itertools.count()
    done = 0
    async with Runner(db, [agent]) as runner:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        deadline = time.monotonic() + float(seconds)

        async def loop() -> None:
            nonlocal done
            while time.monotonic() < deadline:
                number = next(counter)
                await runner.run(agent, f"question {number}", run_id=f"{name}-{number}")
                done += 1

        await asyncio.gather(*(loop() for _ in range(CONCURRENCY)))
    await client.close()
    sys.stdout.write(f"runs {done}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
