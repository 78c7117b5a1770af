"""OpenAI Agents SDK agents on DurableRunner: killed inside a tool, resumed by its run id.

    python examples/openai_agents_agent.py            # the story, in a temporary folder
    python examples/openai_agents_agent.py --db D --ledger L [--crash]

A triage agent hands the customer off to billing, which looks order A-17 up, refunds it and
answers. The model is offline (a scripted ``agents.Model``), everything else is the real SDK:
``agents.Runner`` drives the turns, handoffs and tool calls. With ``--crash`` the process
SIGKILLs itself inside the refund tool. Running the same command again (same run id) takes
the run over at once (its owner died on this machine), replays the model calls and the
lookup from their records, and runs only the refund that was cut short, then the answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, ModelResponse, Usage, function_tool, set_tracing_disabled
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

import zincir
from zincir.integrations.openai_agents import DurableRunner

RUN_ID = "refund-A17"
PROMPT = "Order A-17 arrived broken. Refund it."


def write(ledger: Path, line: str) -> None:
    """Record that something really ran (fsynced, so a kill right after cannot lose it)."""
    with ledger.open("a", encoding="utf-8") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


class ScriptedModel(Model):
    """An offline model: what it answers depends on how many tool results it was sent."""

    def __init__(self, ledger: Path) -> None:
        self.ledger = ledger

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        done = sum(
            1
            for item in input
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        )
        write(self.ledger, f"model request {done}")
        if done == 0:
            return call("call-1", "transfer_to_billing", {})
        if done == 1:
            return call("call-2", "lookup", {"order": "A-17"})
        if done == 2:
            return call("call-3", "refund", {"order": "A-17", "cents": 4200})
        return answer("Refunded 4200 cents for A-17.")

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("this example does not stream")


def call(call_id: str, name: str, arguments: dict[str, Any]) -> ModelResponse:
    item = ResponseFunctionToolCall(
        type="function_call",
        id=f"fc-{call_id}",
        call_id=call_id,
        name=name,
        arguments=json.dumps(arguments),
        status="completed",
    )
    return ModelResponse(output=[item], usage=Usage(requests=1), response_id=None)


def answer(text: str) -> ModelResponse:
    content = ResponseOutputText(type="output_text", text=text, annotations=[])
    item = ResponseOutputMessage(
        type="message", id="msg-1", role="assistant", status="completed", content=[content]
    )
    return ModelResponse(output=[item], usage=Usage(requests=1), response_id=None)


def build_agents(ledger: Path, *, crash: bool) -> Agent[Any]:
    """The same agents in every process, so the run can resume."""

    @function_tool
    def lookup(order: str) -> str:
        """Look an order up."""
        write(ledger, f"tool lookup {order}")
        return f"order {order}: paid 4200 cents"

    @function_tool
    def refund(order: str, cents: int) -> str:
        """Refund an order (a side effect that must not happen twice)."""
        write(ledger, f"tool refund {order} started")
        if crash:
            os.kill(os.getpid(), signal.SIGKILL)  # the lookup's record is committed by now
        write(ledger, f"tool refund {order} done")
        return f"refunded {cents} cents"

    model = ScriptedModel(ledger)
    billing = Agent(name="billing", instructions="Refunds.", model=model, tools=[lookup, refund])
    return Agent(name="triage", instructions="Route.", model=model, handoffs=[billing])


async def run(db: str, ledger: Path, *, crash: bool) -> None:
    """Run (or resume) the run."""
    set_tracing_disabled(True)  # an offline example: no traces sent to OpenAI
    async with zincir.open_store(db) as store:
        runner = DurableRunner(store)
        result = await runner.run(build_agents(ledger, crash=crash), PROMPT, run_id=RUN_ID)
        row = await store.get_run(RUN_ID)
    print(f"output: {result.final_output} (answered by {result.last_agent.name})")
    print(f"run {RUN_ID}: {row['status'] if row else 'missing'}")


def story(db: str, ledger: Path) -> None:
    """Two processes on one database: the first is killed, the second resumes it."""
    command = [sys.executable, __file__, "--db", db, "--ledger", str(ledger)]
    first = subprocess.run([*command, "--crash"], capture_output=True, text=True, check=False)
    killed = "killed by SIGKILL" if first.returncode == -signal.SIGKILL else first.returncode
    print(f"[1] first process: {killed} inside the refund tool")
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
    parser.add_argument("--crash", action="store_true", help="SIGKILL inside the refund tool")
    args = parser.parse_args()
    if args.db is None:
        folder = Path(tempfile.mkdtemp(prefix="zincir-openai-agents-"))
        story(str(folder / "agent.db"), folder / "ledger.txt")
    else:
        asyncio.run(run(args.db, Path(args.ledger or f"{args.db}.ledger"), crash=args.crash))


if __name__ == "__main__":
    main()
