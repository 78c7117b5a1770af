"""The tool the encryption tests run on Temporal: its input, result and errors carry a canary.

``registry`` serves ``tool_call/canary-tool`` (also through ``zincir temporal-worker
tests.temporal.sealed_handlers:registry``). The request's ``mode`` picks the outcome:
``ok`` echoes the request's text with the canary, ``retryable`` fails retryably (every
attempt) and ``crash`` raises a plain exception, both with the canary in the message.
``finder`` is an agent whose every turn carries the canary.
"""

from __future__ import annotations

from typing import Any, Final

from zincir import OperationFailed
from zincir.agent import Agent, FunctionModel, tool
from zincir.contract import Invocation, OperationKind
from zincir.durable import HandlerRegistry
from zincir.payloads import ModelRequest, ModelResponse, TextPart, ToolCallPart

CANARY: Final = "canary-7f3c1e9b-never-in-clear"
TOOL: Final = "canary-tool"

registry = HandlerRegistry()


@registry.handler(OperationKind.TOOL_CALL, TOOL)
async def canary_tool(invocation: Invocation, request: Any) -> Any:
    mode = request["mode"]
    if mode == "retryable":
        raise OperationFailed("Throttled", retryable=True, message=f"throttled on {CANARY}")
    if mode == "crash":
        raise RuntimeError(f"crashed on {CANARY}")
    return {"echo": request["text"], "seen": CANARY}


@tool
async def look_up(query: str) -> str:
    """Look ``query`` up."""
    return f"found {query} next to {CANARY}"


async def _model(request: ModelRequest) -> ModelResponse:
    if not any(message.role == "tool" for message in request.messages):
        call = ToolCallPart(tool_call_id="c0", tool_name="look_up", arguments={"query": CANARY})
        return ModelResponse(parts=[call])
    return ModelResponse(parts=[TextPart(text=f"the answer is {CANARY}")])


finder = Agent(FunctionModel(_model), name="finder", tools=[look_up])
"""An agent whose prompt, tool call, tool result and output all hold the canary."""
