"""Runs an agent whose tool asks to be retried, for the crash test of a tool's retry wait.

    python retry_tool_worker.py DB LOG

The tool logs ``tool <city>`` and raises ``RetryTool`` on its first call; the timer prints
``waiting <RetryDelay JSON>`` and sleeps until the process is killed.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import zincir  # noqa: E402
from tests.agent.reference import append, lines  # noqa: E402
from zincir.agent import Agent, DurableBinding, FunctionModel, Handlers, RetryTool, serve, tool  # noqa: E402
from zincir.payloads import (  # noqa: E402
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)

LEASE_TTL = timedelta(milliseconds=500)
HANDLERS = Handlers(model_request="rt-model", tool_call="rt-tools", retry_delay="rt-timer")
RUN_ID = "retry-tool-crash"
PROMPT = "Weather in Oslo?"


def build(log: Path) -> Agent:
    @tool
    async def get_weather(city: str) -> str:
        """The weather in a city."""
        first = "tool Oslo" not in lines(log)
        append(log, f"tool {city}")
        if first:
            raise RetryTool("the upstream is busy", delay=2)
        return f"sunny in {city}"

    def model(request: ModelRequest) -> ModelResponse:
        number = sum(message.role == "assistant" for message in request.messages)
        append(log, f"model {number}")
        if number == 0:
            call = ToolCallPart(
                tool_call_id="c1", tool_name="get_weather", arguments={"city": "Oslo"}
            )
            return ModelResponse(parts=[call])
        result = request.messages[-1].parts[0]
        assert isinstance(result, ToolReturnPart)
        return ModelResponse(parts=[TextPart(text=f"Oslo: {result.content}")])

    return Agent(FunctionModel(model), name="retry-tool", tools=[get_weather])


async def main(db: str, log: Path) -> None:
    agent = build(log)
    registry = zincir.HandlerRegistry()

    async def timer(invocation: zincir.Invocation, request: Any) -> Any:
        sys.stdout.write(f"waiting {invocation.input_json}\n")
        sys.stdout.flush()
        await asyncio.sleep(3600)

    registry.register(zincir.OperationKind.RETRY_DELAY, "rt-timer", timer)
    serve(registry, agent, HANDLERS)
    store = zincir.open_store(db)
    try:
        runtime = zincir.LocalRuntime(store, registry, poll_interval=0.02)
        binding = DurableBinding(runtime, RUN_ID, HANDLERS, lease_ttl=LEASE_TTL)
        await agent.run(PROMPT, durable=binding)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
