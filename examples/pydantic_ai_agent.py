"""A pydantic-ai agent made durable by ZincirDurability: killed mid-run, resumed by its run id.

    python examples/pydantic_ai_agent.py            # the story, in a temporary folder
    python examples/pydantic_ai_agent.py --db D --ledger L [--crash]

The agent (an offline FunctionModel) looks order A-17 up, refunds it, then answers. With
``--crash`` its process SIGKILLs itself while the model writes the answer, after both tools
ran. Running the same command again (same run id) replays the stored model responses and
tool results, so each tool appends to the ledger once and only the interrupted request reruns.
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
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import zincir
from zincir.integrations.pydantic_ai import ZincirDurability

RUN_ID = "refund-A17"
PROMPT = "Order A-17 arrived broken. Refund it."


def write(ledger: Path, line: str) -> None:
    """Record that something really ran (fsynced, so a kill right after cannot lose it)."""
    with ledger.open("a", encoding="utf-8") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def build_agent(store: zincir.SQLiteStore, ledger: Path, *, crash: bool) -> Agent[None, str]:
    """The same agent in every process: same name, tools and store, so the run can resume."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(message, ModelResponse) for message in messages)
        write(ledger, f"model request {turn}")
        if turn == 0:
            return ModelResponse(parts=[ToolCallPart("lookup", {"order": "A-17"}, "call-1")])
        if turn == 1:
            return ModelResponse(parts=[ToolCallPart("refund", {"order": "A-17"}, "call-2")])
        if crash:
            os.kill(os.getpid(), signal.SIGKILL)  # both tool results are committed by now
        return ModelResponse(parts=[TextPart("Refunded 4200 cents for A-17.")])

    agent: Agent[None, str] = Agent(
        FunctionModel(model),
        name="support",
        capabilities=[ZincirDurability(store=store, lease_ttl=1.0)],
    )

    @agent.tool_plain
    def lookup(order: str) -> dict[str, object]:
        """Look an order up."""
        write(ledger, f"tool lookup {order}")
        return {"order": order, "paid_cents": 4200}

    @agent.tool_plain
    def refund(order: str) -> dict[str, object]:
        """Refund an order (a side effect that must not happen twice)."""
        write(ledger, f"tool refund {order}")
        return {"refunded_cents": 4200}

    return agent


async def run(db: str, ledger: Path, *, crash: bool) -> None:
    """Run (or resume) the run; a killed process's lease is taken over once it expires."""
    async with zincir.open_store(db) as store:
        agent = build_agent(store, ledger, crash=crash)
        deadline = time.monotonic() + 30
        while True:
            try:
                result = await agent.run(PROMPT, run_id=RUN_ID)
                break
            except zincir.LeaseHeld:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        row = await store.get_run(RUN_ID)
    print(f"output: {result.output}")
    print(f"run {RUN_ID}: {row['status'] if row else 'missing'}")


def story(db: str, ledger: Path) -> None:
    """Two processes on one database: the first is killed, the second resumes it."""
    command = [sys.executable, __file__, "--db", db, "--ledger", str(ledger)]
    first = subprocess.run([*command, "--crash"], capture_output=True, text=True, check=False)
    killed = "killed by SIGKILL" if first.returncode == -signal.SIGKILL else first.returncode
    print(f"[1] first process: {killed} while the model wrote its answer")
    second = subprocess.run(command, capture_output=True, text=True, check=True)
    print("[2] same run id, new process:")
    for line in second.stdout.splitlines():
        print("    " + line)
    print("ledger (what really ran):")
    for line in ledger.read_text("utf-8").splitlines():
        print("    " + line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db")
    parser.add_argument("--ledger")
    parser.add_argument("--crash", action="store_true", help="SIGKILL before the final answer")
    args = parser.parse_args()
    if args.db is None:
        folder = Path(tempfile.mkdtemp(prefix="zincir-pydantic-ai-"))
        story(str(folder / "agent.db"), folder / "ledger.txt")
    else:
        asyncio.run(run(args.db, Path(args.ledger or f"{args.db}.ledger"), crash=args.crash))


if __name__ == "__main__":
    main()
