"""A durable agent under a token budget, for the budget crash test.

    python budget_worker.py DB LOG RUN_ID TOKENS

Each model request costs 100 tokens and asks for one tool call (both append a line to LOG,
fsynced); the run pauses once its budget is spent. Prints ``budget <usage>`` then, or
``output <text>`` when the model finished first.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import zincir
from zincir import Budget, BudgetExceeded
from zincir.agent import Agent, DurableBinding, FunctionModel, Handlers, serve, tool
from zincir.payloads import ModelRequest, ModelResponse, TextPart, ToolCallPart, Usage

HANDLERS = Handlers(model_request="budget-model", tool_call="budget-tools")
LEASE_TTL = 0.5


def _append(log: Path, line: str) -> None:
    with open(log, "a", encoding="utf-8") as file:
        file.write(line + "\n")
        file.flush()
        os.fsync(file.fileno())


def build(log: Path) -> Agent:
    @tool
    async def lookup(n: int) -> dict[str, Any]:
        """Look something up."""
        _append(log, f"tool {n}")
        return {"n": n}

    def model(request: ModelRequest) -> ModelResponse:
        number = sum(1 for message in request.messages if message.role == "assistant")
        _append(log, f"model {number}")
        usage = Usage(input_tokens=60, output_tokens=40)
        if number >= 20:
            return ModelResponse(parts=[TextPart(text="done")], usage=usage)
        call = ToolCallPart(tool_call_id=f"c{number}", tool_name="lookup", arguments={"n": number})
        return ModelResponse(parts=[call], usage=usage)

    return Agent(FunctionModel(model), name="spender", tools=[lookup])


async def main(db: str, log: str, run_id: str, tokens: int) -> None:
    agent = build(Path(log))
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    store = zincir.open_store(db)
    try:
        runtime = zincir.LocalRuntime(store, registry, claim_ttl=0.5, poll_interval=0.02)
        binding = DurableBinding(
            runtime, run_id, HANDLERS, lease_ttl=LEASE_TTL, budget=Budget(tokens=tokens)
        )
        try:
            result = await agent.run("Spend.", durable=binding)
        except BudgetExceeded as error:
            print("budget", json.dumps(error.usage.to_dict()), flush=True)
            return
        print("output", result.output, flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
