"""A support agent whose refund needs approval, in the builds a deploy may swap: the schema
the model sees stays the same, but the refund's signature changes between them, so the same
model call validates to other arguments.

``build(log, currency=None)`` has ``refund(order_id, amount_cents)``; with ``currency`` the
refund takes ``currency: str = <currency>`` as well (a parameter with a default: validation
adds the key). ``model_currency`` makes the model pass the currency itself. Run as a script
it runs (or resumes) the run once on a LocalRuntime with short leases:

    python reapproval_worker.py DB LOG RUN_ID [--currency C] [--model-currency C] [--hang]

and prints ``output <text>``, ``paused <call ids>`` or ``mismatch <message>``; with
``--hang`` the refund prints ``inside refund`` and sleeps until the process is killed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import zincir  # noqa: E402
from tests.agent.reference import append, returns  # noqa: E402
from zincir.agent import Agent, DurableBinding, FunctionModel, Handlers, Tool, serve  # noqa: E402
from zincir.payloads import ModelRequest, ModelResponse, TextPart, ToolCallPart  # noqa: E402

HANDLERS = Handlers(model_request="re-model", tool_call="re-tools", approval_resume="re-approve")
PROMPT = "Refund order A-17."
SCHEMA = {  # published by every build: the model requests replay unchanged
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "amount_cents": {"type": "integer"},
        "currency": {"type": "string"},
    },
    "required": ["order_id", "amount_cents"],
}
LEASE_TTL = timedelta(milliseconds=500)
CLAIM_TTL = timedelta(milliseconds=500)


def build(
    log: Path,
    *,
    currency: str | None = None,
    model_currency: str | None = None,
    hang: bool = False,
    orders: tuple[str, ...] = ("A-17",),
) -> Agent:
    """The agent of one build; its refund appends ``refund ORDER CENTS [CURRENCY]`` to
    ``log`` each time it really runs. The model refunds ``orders`` one response each (calls
    ``c1``, ``c2``, …), then answers with what came back."""

    async def refunded(order_id: str, amount_cents: int, currency: str | None) -> dict[str, Any]:
        if hang:
            sys.stdout.write("inside refund\n")
            sys.stdout.flush()
            await asyncio.sleep(3600)
        append(log, " ".join(["refund", order_id, str(amount_cents), *filter(None, [currency])]))
        return {"refunded": amount_cents, "currency": currency}

    async def without_currency(order_id: str, amount_cents: int) -> dict[str, Any]:
        """Refund an order."""
        return await refunded(order_id, amount_cents, None)

    async def with_currency(
        order_id: str, amount_cents: int, currency: str = currency or "EUR"
    ) -> dict[str, Any]:
        """Refund an order."""
        return await refunded(order_id, amount_cents, currency)

    refund = Tool(
        without_currency if currency is None else with_currency,
        name="refund",
        schema=SCHEMA,
        requires_approval=True,
    )

    def model(request: ModelRequest) -> ModelResponse:
        number = sum(1 for message in request.messages if message.role == "assistant")
        if number < len(orders):
            arguments: dict[str, Any] = {"order_id": orders[number], "amount_cents": 500}
            if model_currency is not None:
                arguments["currency"] = model_currency
            part = ToolCallPart(
                tool_call_id=f"c{number + 1}", tool_name="refund", arguments=arguments
            )
            return ModelResponse(parts=[part])
        return ModelResponse(parts=[TextPart(text=f"done: {returns(request)}")])

    return Agent(FunctionModel(model), name="refunds", tools=[refund])


def binding(agent: Agent, store: zincir.SQLiteStore, run_id: str) -> DurableBinding:
    """The run on a LocalRuntime whose leases and claims a killed process loses quickly."""
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    runtime = zincir.LocalRuntime(store, registry, claim_ttl=CLAIM_TTL, poll_interval=0.02)
    return DurableBinding(runtime, run_id, HANDLERS, lease_ttl=LEASE_TTL)


async def main(args: argparse.Namespace) -> None:
    agent = build(
        Path(args.log), currency=args.currency, model_currency=args.model_currency, hang=args.hang
    )
    store = zincir.open_store(args.db)
    try:
        while True:
            try:
                result = await agent.run(PROMPT, durable=binding(agent, store, args.run_id))
                break
            except zincir.LeaseHeld:  # a killed process's lease has not expired yet
                await asyncio.sleep(0.05)
            except zincir.ApprovalMismatch as error:
                sys.stdout.write(f"mismatch {error}\n")
                return
        if result.paused is not None:
            sys.stdout.write(f"paused {' '.join(c.call_id for c in result.paused.calls)}\n")
        else:
            sys.stdout.write(f"output {result.output}\n")
    finally:
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("log")
    parser.add_argument("run_id")
    parser.add_argument("--currency")
    parser.add_argument("--model-currency")
    parser.add_argument("--hang", action="store_true")
    asyncio.run(main(parser.parse_args()))
