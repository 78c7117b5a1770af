"""The weather agent of the agent-faults scenario, and a process that runs one of its runs.

    python -m reliability._procs.fault_agent DB RUN_ID BASE_URL CITY run|resume [--hang]
        [--crash-at POINT:NTH]

Builds the agent on ``OpenAIChatModel`` (the real ``openai`` SDK, ``max_retries=0`` so only
zincir retries) and a ``Runner`` with a 60-s lease on DB, then ``runner.run`` (same prompt,
same run id) or ``runner.resume``. With ``--hang`` its ``write_report`` tool prints
``in-tool`` and hangs, for the scenario to SIGKILL it there; ``--crash-at`` kills it at a
named crash point instead. Prints ``completed OUTPUT``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import timedelta
from typing import Any

from reliability._chat_server import CITY_THAT_RAISES, prompt_for
from reliability._procs import say

LEASE_TTL = timedelta(seconds=60)
"""Long on purpose: a restart that waited for a dead owner's lease would show."""
_HANG = {"on": False}


def build_agent(name: str, base_url: str) -> Any:
    """The agent: two tools (a lookup that raises for one city, a report that may hang),
    on defaults everywhere except the SDK's own retries."""
    from openai import AsyncOpenAI

    from zincir.agent import Agent, OpenAIChatModel, tool

    @tool
    async def lookup_weather(city: str) -> dict[str, Any]:
        """Look up today's weather in a city."""
        if city == CITY_THAT_RAISES:
            raise ValueError(f"weather service down for {city}")
        return {"city": city, "temperature_c": 7, "sky": "overcast"}

    @tool
    async def write_report(city: str, summary: str) -> str:
        """File the weather report for a city."""
        if _HANG["on"]:
            say("in-tool")
            await asyncio.sleep(3600)  # SIGKILLed here
        return f"filed {city}"

    client = AsyncOpenAI(base_url=base_url, api_key="sk-reliability", max_retries=0, timeout=180)
    return Agent(
        OpenAIChatModel("scripted", client=client),
        name=name,
        instructions="Look the weather up, then file the report.",
        tools=[lookup_weather, write_report],
    )


async def main(db: str, run_id: str, base_url: str, city: str, mode: str) -> None:
    import zincir
    from zincir.agent import Runner

    store = zincir.open_store(db)
    agent = build_agent("weather", base_url)
    runner = Runner(store, [agent], lease_ttl=LEASE_TTL)
    say("started")
    deadline = time.monotonic() + LEASE_TTL.total_seconds() + 30
    try:
        while True:
            try:
                if mode == "resume":
                    result = await runner.resume(run_id)
                else:
                    result = await runner.run(agent, prompt_for(run_id, city), run_id=run_id)
                break
            except zincir.LeaseHeld:  # only if the dead owner was not recognised as dead
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        say(f"completed {result.output}")
    finally:
        await store.close()


if __name__ == "__main__":
    db, run_id, base_url, city, mode = sys.argv[1:6]
    options = sys.argv[6:]
    _HANG["on"] = "--hang" in options
    if "--crash-at" in options:
        from zincir.testing import arm_crash_point

        point, _, nth = options[options.index("--crash-at") + 1].partition(":")
        arm_crash_point(point, int(nth or 1))
    asyncio.run(main(db, run_id, base_url, city, mode))
