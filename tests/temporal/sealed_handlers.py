"""The tool the encryption tests run on Temporal: its input, result and errors carry a canary.

``registry`` serves ``tool_call/canary-tool`` (also through ``zincir temporal-worker
tests.temporal.sealed_handlers:registry``). The request's ``mode`` picks the outcome:
``ok`` echoes the request's text with the canary, ``retryable`` fails retryably (every
attempt) and ``crash`` raises a plain exception, both with the canary in the message.
"""

from __future__ import annotations

from typing import Any, Final

from zincir import OperationFailed
from zincir.contract import Invocation, OperationKind
from zincir.durable import HandlerRegistry

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
