"""A reference agent for the agent tests and the crash subprocess: a scripted model and two
tools that append a line to a log file (fsynced) each time they really run."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zincir.agent import Agent, FunctionModel, Handlers, tool
from zincir.payloads import (
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    Usage,
)

HANDLERS = Handlers(model_request="ref-model", tool_call="ref-tools")


def append(path: Path, line: str) -> None:
    """Append one line and fsync it, so a SIGKILL right after cannot lose it."""
    with open(path, "a", encoding="utf-8") as log:
        log.write(line + "\n")
        log.flush()
        os.fsync(log.fileno())


def lines(path: Path) -> list[str]:
    return path.read_text("utf-8").splitlines() if path.exists() else []


def request_number(request: ModelRequest) -> int:
    """Which model request this is: one more than the assistant messages so far."""
    return sum(1 for message in request.messages if message.role == "assistant")


def returns(request: ModelRequest) -> list[Any]:
    return [
        part.content
        for message in request.messages
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


def call(call_id: str, name: str, **arguments: Any) -> ToolCallPart:
    return ToolCallPart(tool_call_id=call_id, tool_name=name, arguments=arguments)


def build(
    log: Path,
    *,
    script: Callable[[int, ModelRequest], ModelResponse] | None = None,
    hang_at: int | None = None,
    name: str = "reference",
    **options: Any,
) -> Agent:
    """An agent whose model follows ``script`` (default: first, then second, then text);
    ``options`` are more ``Agent`` settings."""

    @tool
    async def first(n: int) -> dict[str, Any]:
        """The first tool."""
        append(log, f"tool first {n}")
        return {"tool": "first", "n": n}

    @tool
    async def second(n: int) -> dict[str, Any]:
        """The second tool."""
        append(log, f"tool second {n}")
        return {"tool": "second", "n": n}

    async def model(request: ModelRequest) -> ModelResponse:
        number = request_number(request)
        append(log, f"model {number}")
        if number == hang_at:
            sys.stdout.write("inside\n")
            sys.stdout.flush()
            await asyncio.sleep(3600)
        return (script or sequential)(number, request)

    return Agent(
        FunctionModel(model),
        name=name,
        instructions="Use the tools, then answer.",
        tools=[first, second],
        **options,
    )


def sequential(number: int, request: ModelRequest) -> ModelResponse:
    """first(n=1), then second(n=2), then a text answer naming what came back."""
    usage = Usage(input_tokens=10, output_tokens=2)
    if number == 0:
        return ModelResponse(parts=[call("call-a", "first", n=1)], usage=usage)
    if number == 1:
        return ModelResponse(parts=[call("call-b", "second", n=2)], usage=usage)
    text = " + ".join(f"{item['tool']}={item['n']}" for item in returns(request))
    return ModelResponse(parts=[TextPart(text=f"done: {text}")], usage=usage)


def parallel(number: int, request: ModelRequest) -> ModelResponse:
    """Both tools in one response, then a text answer."""
    if number == 0:
        return ModelResponse(parts=[call("call-a", "first", n=1), call("call-b", "second", n=2)])
    text = " + ".join(f"{item['tool']}={item['n']}" for item in returns(request))
    return ModelResponse(parts=[TextPart(text=f"done: {text}")])
