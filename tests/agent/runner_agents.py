"""Agents for the Runner tests and for ``zincir worker --agent tests.agent.runner_agents:...``.

Each model request and each real tool run appends a line to the file named by
``$ZINCIR_RUNNER_LOG`` (fsynced). With ``$ZINCIR_RUNNER_HANG`` set, the ``lookup`` tool
prints ``inside`` and sleeps until the process is killed. No prompt lives in this module:
the weather agent's answer repeats the prompt it was given.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.agent.reference import append, call, request_number, returns
from zincir.agent import Agent, FunctionModel, current_tool_call, tool
from zincir.payloads import (
    ModelRequest,
    ModelResponse,
    PartDelta,
    PartEnd,
    PartStart,
    StreamPart,
    StreamUsage,
    TextPart,
    Usage,
)

LOG_ENV = "ZINCIR_RUNNER_LOG"
HANG_ENV = "ZINCIR_RUNNER_HANG"
KEYS_ENV = "ZINCIR_RUNNER_KEYS"
"""A file each run of the ``lookup`` tool appends its ``current_tool_call()`` to."""


def _log(line: str) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        append(Path(path), line)


def prompt_of(request: ModelRequest) -> str:
    """The user's prompt in a model request."""
    for message in request.messages:
        if message.role == "user":
            return "".join(getattr(part, "text", "") for part in message.parts)
    return ""


@tool
async def lookup(city: str) -> dict[str, Any]:
    """Look up the weather of a city."""
    _log(f"tool lookup {city}")
    keys = os.environ.get(KEYS_ENV)
    if keys:
        info = current_tool_call()
        assert info is not None
        append(Path(keys), f"{info.run_id} {info.tool_call_id} {info.idempotency_key}")
    if os.environ.get(HANG_ENV):
        sys.stdout.write("inside\n")
        sys.stdout.flush()
        await asyncio.sleep(3600)
    return {"city": city, "sky": "clear"}


async def _weather_model(request: ModelRequest) -> ModelResponse:
    number = request_number(request)
    _log(f"model {number}")
    usage = Usage(input_tokens=5, output_tokens=1)
    if number == 0:
        return ModelResponse(parts=[call("call-lookup", "lookup", city="Oslo")], usage=usage)
    sky = ", ".join(f"{item['city']} {item['sky']}" for item in returns(request))
    return ModelResponse(parts=[TextPart(text=f"{prompt_of(request)} -> {sky}")], usage=usage)


async def _weather_stream(request: ModelRequest) -> AsyncIterator[StreamPart]:
    """The weather model's answer, streamed one part at a time."""
    response = await _weather_model(request)
    for index, part in enumerate(response.parts):
        if isinstance(part, TextPart):
            yield PartStart(index=index, part_kind="text")
            yield PartDelta(index=index, delta=part.text)
        else:
            yield PartStart(
                index=index,
                part_kind="tool_call",
                tool_call_id=part.tool_call_id,
                tool_name=part.tool_name,
            )
            yield PartDelta(index=index, delta=json.dumps(part.arguments))
        yield PartEnd(index=index)
    yield StreamUsage(usage=response.usage)


agent = Agent(
    FunctionModel(_weather_model, _weather_stream),
    name="weather",
    instructions="Report the weather.",
    tools=[lookup],
)


@tool(requires_approval=True)
async def refund(order_id: str) -> str:
    """Refund an order (a person approves it first)."""
    _log(f"tool refund {order_id}")
    return f"refunded {order_id}"


async def _refund_model(request: ModelRequest) -> ModelResponse:
    number = request_number(request)
    _log(f"model {number}")
    if number == 0:
        return ModelResponse(parts=[call("call-refund", "refund", order_id="A-17")])
    return ModelResponse(parts=[TextPart(text=f"done: {returns(request)}")])


refunds = Agent(FunctionModel(_refund_model), name="refunds", tools=[refund])

both = [agent, refunds]
not_an_agent = 42
