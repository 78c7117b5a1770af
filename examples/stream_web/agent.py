"""A streamed durable agent for the page in this folder to follow.

    python examples/stream_web/agent.py zincir.db             # a new run, streamed
    python examples/stream_web/agent.py zincir.db RUN_ID      # finish RUN_ID after a crash

It prints the page's address before the answer starts, so open it in a browser (with
``server.py`` serving the same database) and watch the answer arrive; kill this process
(``kill -9``) mid-answer and run it again with the run's id: the page drops the cut-off
partial answer and shows the new one, ending with exactly the final answer.

The model is ``OpenAIChatModel`` at ``$OPENAI_BASE_URL`` (any OpenAI-compatible server;
``$OPENAI_MODEL``, ``$OPENAI_API_KEY`` as in ``examples/first_agent.py``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

from openai import AsyncOpenAI

from zincir.agent import Agent, OpenAIChatModel, Runner, tool


@tool
async def get_weather(city: str) -> dict[str, object]:
    """Today's weather in a city."""
    return {"city": city, "sky": "light rain", "high_c": 14}


agent = Agent(
    OpenAIChatModel(
        os.environ.get("OPENAI_MODEL", "gpt-4.1-mini"),
        client=AsyncOpenAI(
            base_url=os.environ.get("OPENAI_BASE_URL"),
            api_key=os.environ.get("OPENAI_API_KEY", "not-needed-locally"),
        ),
    ),
    name="story",
    instructions="Look the weather up with get_weather, then write a long forecast story.",
    tools=[get_weather],
)


async def main(database: str, run_id: str | None) -> None:
    async with Runner(database, [agent]) as runner:
        if run_id is not None:  # after a crash: the run continues, its stream with it
            result = await runner.resume(run_id)
        else:
            run_id = f"story-{uuid.uuid4().hex[:12]}"
            print(f"run {run_id}: http://127.0.0.1:8000/?run={run_id}", flush=True)
            stream = runner.run_stream(agent, "Tell me about the weather in Oslo.", run_id=run_id)
            async for _ in stream:  # the page reads the run's durable stream, not this one
                pass
            result = stream.result
        print(result.run_id, result.output)


if __name__ == "__main__":
    asyncio.run(
        main(sys.argv[1] if len(sys.argv) > 1 else "zincir.db", (sys.argv[2:3] or [None])[0])
    )
