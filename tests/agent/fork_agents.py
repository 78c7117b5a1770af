"""Agents for the fork tests: six turns, a tool run in each of the first five.

Each model request and tool run appends a line to ``$ZINCIR_FORK_LOG``. With
``$ZINCIR_FORK_HANG`` set, the tool of turn 4 prints ``inside`` and sleeps until killed.

    python fork_agents.py DB RUN_ID   runs the counting agent to its end (or its kill)
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.agent.reference import append, call, request_number  # noqa: E402
from zincir.agent import Agent, FunctionModel, Runner, tool  # noqa: E402
from zincir.payloads import ModelRequest, ModelResponse, TextPart, Usage  # noqa: E402

LOG_ENV = "ZINCIR_FORK_LOG"
HANG_ENV = "ZINCIR_FORK_HANG"
PROMPT = "Count to five."
TURNS = 6


def _log(line: str) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        append(Path(path), line)


@tool
async def step(n: int) -> str:
    """Take step ``n``."""
    _log(f"tool {n}")
    if n == 4 and os.environ.get(HANG_ENV):
        sys.stdout.write("inside\n")
        sys.stdout.flush()
        await asyncio.sleep(3600)
    return f"did {n}"


def _model(label: str) -> FunctionModel:
    async def answer(request: ModelRequest) -> ModelResponse:
        number = request_number(request)
        _log(f"{label} {number}")
        usage = Usage(input_tokens=10, output_tokens=2)
        if number < TURNS - 1:
            return ModelResponse(parts=[call(f"call-{number}", "step", n=number)], usage=usage)
        return ModelResponse(parts=[TextPart(text=f"{label} counted {number}")], usage=usage)

    return FunctionModel(answer)


counter = Agent(_model("model"), name="counter", instructions="Count.", tools=[step])
critic = Agent(_model("other"), name="critic", instructions="Count, critically.", tools=[step])
toolless = Agent(_model("bare"), name="toolless", instructions="Count.")


async def main(db: str, run_id: str) -> None:
    async with Runner(db, [counter], lease_ttl=timedelta(seconds=60)) as runner:
        result = await runner.run(counter, PROMPT, run_id=run_id)
        sys.stdout.write(f"output {result.output}\n")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:3]))
