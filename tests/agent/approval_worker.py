"""An agent whose first response pauses: a refund that requires approval, a lookup that runs,
and a shipment whose tool defers to an external result. Run as a script it pauses the run
durably and exits, for the restart tests:

    python approval_worker.py DB LOG RUN_ID      → prints ``paused <call ids>``

With STORE (``sql`` for SQLRestartStore on the run's database, or a folder for
FileRestartStore) it also keeps the pause there, and prints ``saved <revision>``:

    python approval_worker.py DB LOG RUN_ID STORE [APPROVAL_TIMEOUT_S]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import zincir  # noqa: E402
from tests.agent.reference import append, call, returns  # noqa: E402
from zincir.agent import Agent, DurableBinding, FunctionModel, Handlers, serve, tool  # noqa: E402
from zincir.payloads import (  # noqa: E402
    ModelRequest,
    ModelResponse,
    StreamPart,
    TextPart,
    stream_parts,
)
from zincir.restart import FileRestartStore, RestartStore, SQLRestartStore  # noqa: E402

HANDLERS = Handlers(
    model_request="appr-model", tool_call="appr-tools", approval_resume="appr-approvals"
)
PROMPT = "Refund order A-17."


def build(log: Path, *, approval_timeout: float | None = None) -> Agent:
    @tool(requires_approval=True)
    async def refund(order_id: str, amount_cents: int) -> dict[str, Any]:
        """Refund an order."""
        append(log, f"refund {order_id} {amount_cents}")
        return {"refunded": amount_cents}

    @tool
    async def lookup(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        append(log, f"lookup {order_id}")
        return {"order": order_id, "status": "delivered"}

    @tool
    async def ship(order_id: str) -> dict[str, Any]:
        """Ship a replacement (done by a person outside the agent)."""
        append(log, f"ship {order_id} deferred")
        raise zincir.CallDeferred("a person ships it")

    def model(request: ModelRequest) -> ModelResponse:
        number = sum(1 for m in request.messages if m.role == "assistant")
        append(log, f"model {number}")
        if number == 0:
            return ModelResponse(
                parts=[
                    call("c-refund", "refund", order_id="A-17", amount_cents=500),
                    call("c-lookup", "lookup", order_id="A-17"),
                    call("c-ship", "ship", order_id="A-17"),
                ]
            )
        return ModelResponse(parts=[TextPart(text=f"results: {returns(request)}")])

    async def stream(request: ModelRequest) -> AsyncIterator[StreamPart]:
        for part in stream_parts(model(request)):
            yield part

    return Agent(
        FunctionModel(model, stream),
        name="approvals",
        tools=[refund, lookup, ship],
        approval_timeout=approval_timeout,
    )


def binding(agent: Agent, store: zincir.SQLiteStore, run_id: str) -> DurableBinding:
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    return DurableBinding(zincir.LocalRuntime(store, registry), run_id, HANDLERS)


async def main(args: argparse.Namespace) -> None:
    agent = build(Path(args.log), approval_timeout=args.timeout)
    store = zincir.open_store(args.db)
    try:
        result = await agent.run(PROMPT, durable=binding(agent, store, args.run_id))
        assert result.paused is not None
        if args.store is None:
            sys.stdout.write(f"paused {' '.join(c.call_id for c in result.paused.calls)}\n")
            return
        kept: RestartStore = (
            SQLRestartStore(store) if args.store == "sql" else FileRestartStore(args.store)
        )
        saved = await result.paused.save_checkpoint(kept)
        sys.stdout.write(f"saved {saved.revision}\n")
    finally:
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("log")
    parser.add_argument("run_id")
    parser.add_argument("store", nargs="?", default=None, help="sql, or a folder")
    parser.add_argument("timeout", nargs="?", type=float, default=None)
    asyncio.run(main(parser.parse_args()))
