"""A durable support agent: a scripted model, two tools, an approval, a kill and a resume.

    python examples/durable_support_agent.py

The story runs in three real processes on one SQLite file (``$ZINCIR_DATABASE_PATH``, else a
temporary folder):

1. The agent looks order A-17 up, then its process is SIGKILLed while the model is thinking.
2. A new process reruns the same run id: the lookup's stored record is replayed (the tool
   does not run again), the model asks for a refund, which requires approval: the run pauses.
3. A third process approves the refund (bound to the digest of its arguments); the refund
   runs once and the run completes.

Each tool appends a line to a ledger when it really runs, so the output shows that nothing
ran twice.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import zincir
from zincir.agent import Agent, Approve, DurableBinding, FunctionModel, Handlers, serve, tool
from zincir.payloads import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart

RUN_ID = "support-A17"
PROMPT = "Order A-17 arrived broken. Refund it."
HANDLERS = Handlers(
    model_request="support-model", tool_call="support-tools", approval_resume="support-approvals"
)


def ledger_line(ledger: Path, line: str) -> None:
    """Record that something really ran (fsynced, so a kill right after cannot lose it)."""
    with open(ledger, "a", encoding="utf-8") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def build_agent(ledger: Path, *, hang_when_thinking: bool = False) -> Agent:
    """The same agent in every process: a scripted model and two tools."""

    @tool
    async def lookup_order(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        ledger_line(ledger, f"tool lookup_order {order_id}")
        return {"order_id": order_id, "status": "delivered", "paid_cents": 4200}

    @tool(requires_approval=True)
    async def refund(order_id: str, amount_cents: int) -> dict[str, Any]:
        """Refund an order (a person approves it first)."""
        ledger_line(ledger, f"tool refund {order_id} {amount_cents}")
        return {"refunded_cents": amount_cents}

    async def model(request: ModelRequest) -> ModelResponse:
        turn = sum(1 for message in request.messages if message.role == "assistant")
        ledger_line(ledger, f"model request {turn}")
        if turn == 0:
            call = ToolCallPart(
                tool_call_id="call-lookup", tool_name="lookup_order", arguments={"order_id": "A-17"}
            )
            return ModelResponse(parts=[TextPart(text="Let me find the order."), call])
        if turn == 1:
            if hang_when_thinking:
                print("thinking", flush=True)
                await asyncio.sleep(3600)  # killed here
            found = _returns(request)[0]
            call = ToolCallPart(
                tool_call_id="call-refund",
                tool_name="refund",
                arguments={"order_id": "A-17", "amount_cents": found["paid_cents"]},
            )
            return ModelResponse(parts=[TextPart(text="I will refund it."), call])
        refunded = _returns(request)[-1]["refunded_cents"]
        return ModelResponse(parts=[TextPart(text=f"Refunded {refunded} cents for A-17.")])

    return Agent(
        FunctionModel(model),
        name="support",
        instructions="Help with orders.",
        tools=[lookup_order, refund],
    )


def _returns(request: ModelRequest) -> list[Any]:
    return [
        part.content
        for message in request.messages
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


def binding_for(agent: Agent, store: zincir.SQLiteStore) -> DurableBinding:
    """This process's side of the durable run: handlers served by a LocalRuntime."""
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    runtime = zincir.LocalRuntime(store, registry)
    return DurableBinding(runtime, RUN_ID, HANDLERS, lease_ttl=timedelta(seconds=1))


async def run_until_paused(db: str, ledger: Path, *, hang: bool) -> None:
    """Phases 1 and 2: run (or rerun) the agent; it pauses at the refund."""
    store = zincir.open_store(db)
    agent = build_agent(ledger, hang_when_thinking=hang)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                result = await agent.run(PROMPT, durable=binding_for(agent, store))
                break
            except zincir.LeaseHeld:  # the killed process's lease has not expired yet
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        assert result.paused is not None
        for call in result.paused.calls:
            print(f"paused: {call.tool}({call.arguments}) sha256={call.args_sha256[:12]}…")
    finally:
        await store.close()


async def approve(db: str, ledger: Path) -> None:
    """Phase 3: a person approves the refund from another process; the run completes."""
    store = zincir.open_store(db)
    agent = build_agent(ledger)
    try:
        binding = binding_for(agent, store)
        paused = await agent.paused_run(durable=binding)
        assert paused is not None, "the run is not paused"
        decisions = {call.call_id: Approve() for call in paused.calls}
        result = await agent.resume(paused, decisions, durable=binding)
        print(f"output: {result.output}")
        run = await store.get_run(RUN_ID)
        assert run is not None
        print(f"run {RUN_ID} is {run['status']} after {run['last_seq']} events")
    finally:
        await store.close()


def _phase(db: str, ledger: Path, phase: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, "--phase", phase, "--db", db, "--ledger", str(ledger)],
        stdout=subprocess.PIPE,
        text=True,
    )


def story(db: str, ledger: Path) -> None:
    """Run the three processes and show the ledger."""
    print("[1] the agent looks the order up, then dies while the model thinks")
    first = _phase(db, ledger, "hang")
    assert first.stdout is not None
    while (line := first.stdout.readline()) and line.strip() != "thinking":
        print("    " + line.rstrip())
    first.send_signal(signal.SIGKILL)
    first.wait()
    print("    SIGKILL")
    for label, phase in (
        ("[2] a new process reruns the same run id", "rerun"),
        ("[3] a person approves the refund from a third process", "approve"),
    ):
        print(label)
        done = _phase(db, ledger, phase)
        out, _ = done.communicate(timeout=120)
        for line in out.splitlines():
            print("    " + line)
        if done.returncode != 0:
            raise SystemExit(f"{phase} failed with exit code {done.returncode}")
    print("ledger (what really ran):")
    for line in ledger.read_text("utf-8").splitlines():
        print("    " + line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=["story", "hang", "rerun", "approve"], default="story")
    parser.add_argument("--db", default=os.environ.get("ZINCIR_DATABASE_PATH"))
    parser.add_argument("--ledger")
    args = parser.parse_args()
    if args.phase == "story":
        folder = Path(tempfile.mkdtemp(prefix="zincir-support-"))
        db = args.db or str(folder / "support.db")
        story(db, Path(args.ledger) if args.ledger else folder / "ledger.txt")
    elif args.phase == "approve":
        asyncio.run(approve(args.db, Path(args.ledger)))
    else:
        asyncio.run(run_until_paused(args.db, Path(args.ledger), hang=args.phase == "hang"))


if __name__ == "__main__":
    main()
