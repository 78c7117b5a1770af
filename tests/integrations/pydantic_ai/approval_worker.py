"""A pydantic-ai agent whose refund needs approval, run in child processes by the tests.

    python approval_worker.py DB LEDGER pause
    python approval_worker.py DB LEDGER resume DECISION_JSON

``pause`` runs ``desk-1`` until it asks for approval and keeps its messages in DB.messages.json.
``resume`` continues it as ``desk-1.resume`` with the decision ``{"approve": true,
"override": {...}}`` or ``{"deny": "why"}``; ``"args"`` first changes the call's arguments in
the history, ``"crash": true`` makes the refund SIGKILL its process before it does anything.
An ApprovalMismatch prints ``refused: ...`` and exits with 3.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, ToolApproved, ToolDenied
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults

import zincir
from zincir.integrations.pydantic_ai import ZincirDurability


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returned = [
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    if not returned:
        call = ToolCallPart("refund", {"order": "A-17", "cents": 4200}, "c1")
        return ModelResponse(parts=[call])
    return ModelResponse(parts=[TextPart(f"Done: {returned[-1]}")])


def build(store: zincir.SQLiteStore, ledger: Path, crash: bool) -> Agent[None, Any]:
    agent: Agent[None, Any] = Agent(
        FunctionModel(model),
        name="desk",
        output_type=[str, DeferredToolRequests],
        capabilities=[ZincirDurability(store, lease_ttl=1.0)],
    )

    @agent.tool_plain(requires_approval=True)
    def refund(order: str, cents: int) -> str:
        """Refund an order (a person approves it first)."""
        if crash:
            os.kill(os.getpid(), signal.SIGKILL)
        with ledger.open("a", encoding="utf-8") as out:
            out.write(f"refund {order} {cents}\n")
        return f"refunded {cents}"

    return agent


async def main(db: str, ledger: str, mode: str, decision_json: str = "{}") -> int:
    saved = Path(f"{db}.messages.json")
    decision = json.loads(decision_json)
    async with zincir.open_store(db) as store:
        agent = build(store, Path(ledger), bool(decision.get("crash")))
        if mode == "pause":
            result = await agent.run("Refund order A-17.", run_id="desk-1")
            saved.write_bytes(ModelMessagesTypeAdapter.dump_json(result.all_messages()))
            for call in result.output.approvals:
                print(f"paused: {call.tool_name} {call.args_as_dict()}", flush=True)
            return 0
        history = ModelMessagesTypeAdapter.validate_json(saved.read_bytes())
        if "args" in decision:
            for message in history:
                for part in message.parts:
                    if isinstance(part, ToolCallPart):
                        part.args = decision["args"]
        approval: Any = (
            ToolDenied(decision["deny"])
            if "deny" in decision
            else ToolApproved(override_args=decision.get("override"))
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                result = await agent.run(
                    message_history=history,
                    deferred_tool_results=DeferredToolResults(approvals={"c1": approval}),
                    run_id="desk-1.resume",
                )
                break
            except zincir.LeaseHeld:  # a killed process's lease has not expired yet
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
            except zincir.ApprovalMismatch as error:
                print(f"refused: {type(error).__name__}: {error}", flush=True)
                return 3
        print(f"output: {result.output}", flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:5])))
