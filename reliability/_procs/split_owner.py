"""The owner a split-brain round pauses: it creates one run and writes to it until fenced.

    python -m reliability._procs.split_owner DB RUN_ID TTL PHASE_FILE SEED

Writes in a loop, in turn: a workflow step, a model response with one tool intent and its
result, and an operation through a LocalRuntime (a durable tool call). Before each part it
stores where it is in the one-byte PHASE_FILE (shared through mmap, read by the parent
while this process is stopped). Prints ``ready``, then ``ok KIND I`` after every
acknowledged write; on the first lease error it prints ``fenced ERROR PHASE`` and exits 0
without another write. Any other error prints ``error …`` and exits 1.
"""

from __future__ import annotations

import asyncio
import json
import mmap
import random
import sys
from datetime import timedelta
from typing import Any

import zincir
from reliability._procs import say
from zincir import AgentContext, ToolCall, WorkflowContext
from zincir.contract import Invocation, OperationKind
from zincir.durable import HandlerRegistry, LocalRuntime, RetryPolicy

PHASES = (
    "between writes",
    "claiming a step",
    "in a step body",
    "storing a step result",
    "appending events",
    "running a tool call",
)
"""Where the owner can be when it is stopped; the phase file holds an index into this."""

HANDLER_ID = "split-brain-tools"
NOTE = "new_owner_note"
"""The only event type the new owner appends (the old owner never writes it)."""


class Phase:
    """The owner's current phase, in a shared one-byte file."""

    def __init__(self, path: str) -> None:
        with open(path, "r+b") as file:
            self._map = mmap.mmap(file.fileno(), 1)

    def set(self, name: str) -> None:
        self._map[0] = PHASES.index(name)

    def name(self) -> str:
        return PHASES[self._map[0]]


async def main(db: str, run_id: str, ttl: float, phase_file: str, seed: int) -> int:
    chance = random.Random(seed)
    phase = Phase(phase_file)
    store = zincir.open_store(db)
    try:
        ctx = await AgentContext.create(
            store, "split-brain", run_id=run_id, lease_ttl=timedelta(seconds=ttl)
        )
        wf = WorkflowContext.from_agent(ctx)
        token = ctx.lease_token

        async def tool(invocation: Invocation, request: Any) -> Any:
            await asyncio.sleep(chance.uniform(0, 0.002))
            return {"token": token, "sequence": invocation.sequence}

        registry = HandlerRegistry()
        registry.register(OperationKind.TOOL_CALL, HANDLER_ID, tool)
        runtime = LocalRuntime(
            store, registry, RetryPolicy.no_retry(), claim_ttl=ttl, poll_interval=0.02
        )
        say("ready")
        index = 0
        try:
            while True:
                await write_one(index, wf, ctx, runtime, phase, chance, token)
                phase.set("between writes")
                await asyncio.sleep(chance.uniform(0, 0.003))
                index += 1
        except zincir.LeaseError as error:
            say(f"fenced {type(error).__name__} {phase.name()}")
            return 0
    except Exception as error:  # anything but a lease error is a failure of the round
        say(f"error {type(error).__name__}: {error}")
        return 1
    finally:
        await store.close()


async def write_one(
    index: int,
    wf: WorkflowContext,
    ctx: AgentContext,
    runtime: LocalRuntime,
    phase: Phase,
    chance: random.Random,
    token: int,
) -> None:
    """One of the three kinds of write, by ``index``; ``ok KIND I`` once acknowledged."""
    kind = index % 3
    if kind == 0:

        async def body() -> dict[str, int]:
            phase.set("in a step body")
            await asyncio.sleep(chance.uniform(0, 0.002))
            phase.set("storing a step result")
            return {"token": token, "index": index}

        phase.set("claiming a step")
        await wf.step(f"step-{index}", body)
        say(f"ok step {index}")
    elif kind == 1:
        phase.set("appending events")
        call = ToolCall(f"call-{index}", "probe", {"index": index})
        await ctx.record_response({"token": token, "index": index}, [call], "tool_use")
        say(f"ok response {index}")
        await ctx.record_tool_result(call.id, {"token": token, "index": index})
        say(f"ok result {index}")
    else:
        phase.set("running a tool call")
        payload = json.dumps({"token": token, "index": index})
        await runtime.execute(
            Invocation(ctx.run_id, "probe", index, OperationKind.TOOL_CALL, HANDLER_ID, payload)
        )
        say(f"ok operation {index}")


if __name__ == "__main__":
    db, run_id, ttl, phase_file, seed = sys.argv[1:6]
    sys.exit(asyncio.run(main(db, run_id, float(ttl), phase_file, int(seed))))
