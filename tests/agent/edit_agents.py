"""An agent whose refund tool needs approval, for the edit-on-approve tests, and a worker.

Each real run of ``refund`` and each model request after the first appends a JSON line to
the file named by ``$ZINCIR_EDIT_LOG`` (fsynced): the tool's arguments, and the calls and
results the model saw.

    python edit_agents.py TARGET RUN_ID ORDER AMOUNT

resumes the paused run with ``Approve(arguments={"order_id": ORDER, "amount_cents": AMOUNT},
decided_by="alice")`` through a Runner and SIGKILLs itself as soon as that decision is
stored (the tool has not run).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.agent.reference import append, call, request_number
from zincir.agent import Agent, Approve, FunctionModel, Runner, tool
from zincir.payloads import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart

LOG_ENV = "ZINCIR_EDIT_LOG"
PROMPT = "Refund order A-17."
CALL = "call-refund"
ASKED = {"order_id": "A-17", "amount_cents": 4200}


def _log(entry: dict[str, Any]) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        append(Path(path), json.dumps(entry, sort_keys=True))


def entries(path: Path) -> list[dict[str, Any]]:
    """The JSON lines logged so far."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


@tool(requires_approval=True)
async def refund(order_id: str, amount_cents: int) -> str:
    """Refund part of an order (a person approves it first)."""
    _log({"tool": "refund", "arguments": {"order_id": order_id, "amount_cents": amount_cents}})
    return f"refunded {amount_cents} on {order_id}"


async def _model(request: ModelRequest) -> ModelResponse:
    if request_number(request) == 0:
        return ModelResponse(parts=[call(CALL, "refund", **ASKED)])
    seen = {
        "calls": [
            {"id": p.tool_call_id, "arguments": p.arguments}
            for m in request.messages
            for p in m.parts
            if isinstance(p, ToolCallPart)
        ],
        "results": [
            p.content for m in request.messages for p in m.parts if isinstance(p, ToolReturnPart)
        ],
    }
    _log({"model": seen})
    return ModelResponse(parts=[TextPart(text="done")])


agent = Agent(FunctionModel(_model), name="edit-refunds", tools=[refund])


async def _killed_after_decision(target: str, run_id: str, order: str, amount: int) -> None:
    async with Runner(target, [agent]) as runner:
        store = runner.store
        settle = store.settle_approval

        async def settle_then_die(*args: Any, **kwargs: Any) -> None:
            await settle(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)  # the decision is stored; the tool not run

        store.settle_approval = settle_then_die  # type: ignore[method-assign]
        edited = {"order_id": order, "amount_cents": amount}
        await runner.resume(run_id, {CALL: Approve(arguments=edited, decided_by="alice")})
    sys.exit("the run was not killed after its decision")


if __name__ == "__main__":
    target, run_id, order, amount = sys.argv[1:5]
    asyncio.run(_killed_after_decision(target, run_id, order, int(amount)))
