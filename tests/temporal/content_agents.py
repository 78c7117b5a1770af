"""A reader agent whose conversation grows past several MiB: each tool call returns a page of
:data:`PAGE_CHARS` characters that do not compress (hex of seeded random bytes).

Each model request and each tool run appends a line to the file named by ``$ZINCIR_READER_LOG``
when set. With ``$ZINCIR_READER_HANG=N`` the model request that has seen N pages prints
``inside`` and sleeps until the process is killed.

``echo_registry`` serves ``tool_call/echo`` (the size of its request's text), for
``zincir temporal-worker tests.temporal.content_agents:echo_registry``.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from pathlib import Path
from typing import Any

from tests.agent.reference import append
from zincir.agent import Agent, FunctionModel, tool
from zincir.contract import Invocation, OperationKind
from zincir.durable import HandlerRegistry
from zincir.payloads import ModelRequest, ModelResponse, TextPart, ToolCallPart

PAGE_CHARS = 600_000
PAGES = 6
LOG_ENV = "ZINCIR_READER_LOG"
HANG_ENV = "ZINCIR_READER_HANG"


def page(number: int) -> str:
    """Page ``number``'s text: the same in every process."""
    return random.Random(number).randbytes(PAGE_CHARS // 2).hex()


def _log(line: str) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        append(Path(path), line)


@tool
async def read_page(number: int) -> str:
    """Read one page of the document."""
    _log(f"tool {number}")
    return f"page {number}: {page(number)}"


async def _model(request: ModelRequest) -> ModelResponse:
    done = sum(message.role == "tool" for message in request.messages)
    _log(f"model {done}")
    hang = os.environ.get(HANG_ENV)
    if hang is not None and done == int(hang):
        sys.stdout.write("inside\n")
        sys.stdout.flush()
        await asyncio.sleep(3600)
    if done < PAGES:
        call = ToolCallPart(
            tool_call_id=f"c{done}", tool_name="read_page", arguments={"number": done}
        )
        return ModelResponse(parts=[call])
    return ModelResponse(parts=[TextPart(text=f"read {done} pages")])


reader = Agent(FunctionModel(_model), name="reader", tools=[read_page])

echo_registry = HandlerRegistry()


@echo_registry.handler(OperationKind.TOOL_CALL, "echo")
async def echo(invocation: Invocation, request: Any) -> Any:
    """The length of the request's text (the input it was given, whole)."""
    return {"chars": len(request["text"])}
