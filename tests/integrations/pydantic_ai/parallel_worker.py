"""A pydantic-ai agent whose tool calls run side by side, run in a child process by the
parallel crash test.

    python parallel_worker.py DB LOG RUN_ID MODE

The model asks for three calls at once (``fast`` twice, then ``slow``). MODE ``kill``: the
``slow`` call waits until both ``fast`` records are stored, then SIGKILLs its own process;
``run``: ``slow`` returns at once and the ``fast`` calls finish in the other order; the
output is printed. Every model and tool call appends a line to LOG and fsyncs it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from worker import LEASE_TTL, append  # the folder of this script is on sys.path

import zincir
from zincir.integrations.pydantic_ai import ZincirDurability
from zincir.store import OperationKey


def build(store: zincir.Store, log: Path, mode: str) -> Agent[None, str]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        number = sum(isinstance(message, ModelResponse) for message in messages)
        append(log, f"model {number}")
        if number == 0:
            return ModelResponse(
                parts=[
                    ToolCallPart("fast", {"item": "a"}, "c-a"),
                    ToolCallPart("fast", {"item": "b"}, "c-b"),
                    ToolCallPart("slow", {"item": "c"}, "c-c"),
                ]
            )
        return ModelResponse(parts=[TextPart("checked a, b and c")])

    agent: Agent[None, str] = Agent(
        FunctionModel(model),
        name="checker",
        capabilities=[ZincirDurability(store, lease_ttl=LEASE_TTL)],
    )

    @agent.tool_plain
    async def fast(item: str) -> str:
        """Check an item quickly."""
        if mode == "run":  # the other order this time: b before a
            await asyncio.sleep(0.05 if item == "a" else 0.0)
        append(log, f"tool fast {item}")
        return f"{item} ok"

    @agent.tool_plain
    async def slow(item: str) -> str:
        """Check an item slowly."""
        append(log, f"tool slow {item}")
        if mode == "kill":
            while not await _both_fast(store):
                await asyncio.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)
        return f"{item} ok"

    return agent


RUN_ID: list[str] = [""]


async def _both_fast(store: zincir.Store) -> bool:
    """Whether the records of c-a and c-b (positions 0 and 1) are stored."""
    for position in (0, 1):
        key = OperationKey(RUN_ID[0], "pydantic_ai.checker.tool.call", position)
        row = await store.get_operation(key)
        if row is None or row.status != "completed":
            return False
    return True


async def main(db: str, log: str, run_id: str, mode: str) -> None:
    RUN_ID[0] = run_id
    async with zincir.open_store(db) as store:
        result = await build(store, Path(log), mode).run("Check a, b and c.", run_id=run_id)
        print(f"output: {result.output}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
