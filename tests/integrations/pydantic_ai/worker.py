"""A pydantic-ai agent on ZincirDurability, run in a child process by the crash tests.

    python worker.py DB LOG RUN_ID MODE

MODE ``kill``: the model SIGKILLs its own process on its third call (the second tool call's
record has committed by then); ``run``: runs to the end and prints the output; ``hold``: the
first tool call writes LOG.started and waits until LOG.release exists. Every model and tool
call appends a line to LOG and fsyncs it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import zincir
from zincir.integrations.pydantic_ai import ZincirDurability

PROMPT = "Refund order A-17."
LEASE_TTL = 2.0
"""Seconds: short for the tests that wait it out, long enough that a worker starved of CPU
by the rest of the suite still renews it (its heartbeat runs every third of it)."""


def append(log: Path, line: str) -> None:
    with log.open("a", encoding="utf-8") as file:
        file.write(line + "\n")
        file.flush()
        os.fsync(file.fileno())


def build(store: zincir.SQLiteStore, log: Path, mode: str) -> Agent[None, str]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        number = sum(isinstance(message, ModelResponse) for message in messages)
        append(log, f"model {number}")
        if number == 2 and mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if number == 0:
            return ModelResponse(parts=[ToolCallPart("lookup", {"order": "A-17"}, "c1")])
        if number == 1:
            return ModelResponse(parts=[ToolCallPart("refund", {"order": "A-17"}, "c2")])
        return ModelResponse(parts=[TextPart("Refunded 4200 cents for A-17.")])

    agent: Agent[None, str] = Agent(
        FunctionModel(model),
        name="support",
        capabilities=[ZincirDurability(store, lease_ttl=LEASE_TTL)],
    )

    @agent.tool_plain
    def lookup(order: str) -> dict[str, object]:
        """Look an order up."""
        append(log, f"tool lookup {order}")
        if mode == "hold":
            Path(f"{log}.started").touch()
            while not Path(f"{log}.release").exists():
                time.sleep(0.02)
        return {"order": order, "paid_cents": 4200}

    @agent.tool_plain
    def refund(order: str) -> dict[str, object]:
        """Refund an order."""
        append(log, f"tool refund {order}")
        return {"refunded_cents": 4200}

    return agent


async def main(db: str, log: str, run_id: str, mode: str) -> None:
    async with zincir.open_store(db) as store:
        result = await build(store, Path(log), mode).run(PROMPT, run_id=run_id)
        print(f"output: {result.output}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
