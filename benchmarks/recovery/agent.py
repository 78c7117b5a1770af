"""The long-horizon agent on zincir (or on no store at all), run as one process of a run.

    python -m benchmarks.recovery.agent CONFIG_JSON

CONFIG_JSON names the run's files (``db``, ``ledger``, ``meter``, ``artifacts``), the task
(``subtasks``, ``every``, ``liar``) and the cell: ``durability`` (``none``: no store, a
restart starts from scratch; ``normal`` / ``full``: zincir's ``synchronous`` setting),
``context`` (``replay``: the whole log is the context; ``fresh``: the latest accepted
checkpoint plus the events after it, ``ctx.state()``) and ``verify`` (whether a claimed
checkpoint is checked against the artifacts). ``RECOVERY_KILL_AT=subtask:phase`` kills the
process there.

The loop is driven by the context alone: an unanswered tool call is executed, an unanswered
claim is checkpointed, a final answer completes the run, anything else asks the model. A
restarted process rebuilds the same context from the store, so the same loop resumes it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import zincir
from zincir import AgentContext, CheckpointCandidate, ToolCall, Verification
from zincir.store import Event

from .world import (
    Artifacts,
    KillSwitch,
    Ledger,
    Meter,
    ScriptedModel,
    Task,
    audit_claim,
    do_subtask,
    last_tool_index,
    remaining,
    system_message,
)

RUN_ID = "recovery-run"


@dataclass
class World:
    """The run's outside world and its settings, shared by the loop and the journals."""

    task: Task
    context: str
    verify: bool
    ledger: Ledger
    artifacts: Artifacts
    meter: Meter
    kill: KillSwitch

    def verifier(self, last_index: int) -> Any:
        """The checkpoint verifier of this cell, with the ground-truth audit beside it."""

        def verify(candidate: CheckpointCandidate) -> Verification:
            claimed = [int(index) for index in candidate.completed]
            if self.verify:
                passed, evidence = self.artifacts.verify(claimed)
            else:
                passed, evidence = True, {"checked": 0}
            false = audit_claim(self.ledger, claimed)
            self.meter.write("audit", claimed=len(claimed), false=false, accepted=passed)
            self.kill.point(last_index, "verified")
            return Verification(passed=passed, evidence=evidence)

        return verify


def checkpoint_message(accepted: bool, completed: Sequence[int], evidence: Any) -> dict[str, Any]:
    return {
        "role": "checkpoint",
        "accepted": accepted,
        "completed": list(completed),
        "evidence": evidence,
    }


def messages_from_events(events: Sequence[Event]) -> list[dict[str, Any]]:
    """The context a log holds: responses, tool results and checkpoint decisions."""
    messages: list[dict[str, Any]] = []
    proposed: dict[int, list[int]] = {}
    for event in events:
        payload = event.payload
        if event.type == "llm_call":
            messages.append({"role": "assistant", **payload["content"]})
        elif event.type == "tool_result":
            result = payload["result"]
            messages.append(
                {"role": "tool", "id": payload["id"], "index": result["index"], "result": result}
            )
        elif event.type == "checkpoint_proposed":
            proposed[payload["checkpoint_id"]] = list(payload["candidate"]["completed"])
        elif event.type in ("checkpoint_accepted", "checkpoint_rejected"):
            messages.append(
                checkpoint_message(
                    event.type == "checkpoint_accepted",
                    proposed.get(payload["checkpoint_id"], []),
                    payload["evidence"],
                )
            )
    return messages


class MemoryJournal:
    """No store: the context lives in memory and a restart starts from the task alone."""

    def __init__(self, world: World) -> None:
        self.world = world

    async def load(self) -> list[dict[str, Any]]:
        return [system_message(self.world.task)]

    async def record(self, response: dict[str, Any]) -> None:
        return None

    async def tool_result(self, call_id: str, result: dict[str, Any]) -> None:
        return None

    async def checkpoint(self, claim: list[int], last_index: int) -> tuple[bool, Any]:
        candidate = CheckpointCandidate(
            completed=claim, remaining=remaining(self.world.task, claim)
        )
        verdict = self.world.verifier(last_index)(candidate)
        return verdict.passed, verdict.evidence

    async def complete(self) -> None:
        return None

    async def close(self) -> None:
        return None


class ZincirJournal:
    """The run's log in zincir: responses with their intents, results, checkpoints."""

    def __init__(self, world: World, path: str, synchronous: str) -> None:
        self.world = world
        self.store = zincir.open_store(path, synchronous=synchronous)  # type: ignore[arg-type]
        self.ctx: AgentContext | None = None

    async def load(self) -> list[dict[str, Any]]:
        system = system_message(self.world.task)
        if await self.store.get_run(RUN_ID) is None:
            self.ctx = await AgentContext.create(self.store, name="recovery", run_id=RUN_ID)
            return [system]
        # The harness reaped the previous process: it is dead, so its lease can be taken.
        self.ctx = await AgentContext.force_recover(self.store, RUN_ID)
        if self.world.context == "fresh":
            state = await self.ctx.state()
            messages = messages_from_events(state.events)
            if state.checkpoint is None:
                return [system, *messages]
            summary = {"role": "summary", "completed": list(state.checkpoint.completed)}
            return [system, summary, *messages]
        return [system, *messages_from_events(await self.store.list_events(RUN_ID))]

    async def record(self, response: dict[str, Any]) -> None:
        assert self.ctx is not None
        call = response.get("tool_call")
        calls = [ToolCall(call["id"], call["name"], {"index": call["index"]})] if call else []
        await self.ctx.record_response(response, calls, "tool_use" if call else "end_turn")

    async def tool_result(self, call_id: str, result: dict[str, Any]) -> None:
        assert self.ctx is not None
        await self.ctx.record_tool_result(call_id, result)

    async def checkpoint(self, claim: list[int], last_index: int) -> tuple[bool, Any]:
        assert self.ctx is not None
        candidate = {"completed": claim, "remaining": remaining(self.world.task, claim)}
        outcome = await self.ctx.checkpoint(candidate, self.world.verifier(last_index))
        return outcome.accepted, outcome.evidence

    async def complete(self) -> None:
        assert self.ctx is not None
        await self.ctx.complete()

    async def close(self) -> None:
        await self.store.close()


async def run_agent(world: World, journal: MemoryJournal | ZincirJournal) -> None:
    """Drive the run from its context until the model answers ``done``."""
    model = ScriptedModel(world.task, world.meter)
    messages = await journal.load()
    last_index = last_tool_index(messages)
    while True:
        last = messages[-1]
        if last["role"] == "assistant" and "tool_call" in last:
            call = last["tool_call"]
            result = do_subtask(
                world.ledger, world.artifacts, world.kill, call["id"], call["index"]
            )
            await journal.tool_result(call["id"], result)
            world.kill.point(call["index"], "recorded")
            last_index = call["index"]
            messages.append(
                {"role": "tool", "id": call["id"], "index": call["index"], "result": result}
            )
        elif last["role"] == "assistant" and "claim" in last:
            claim = list(last["claim"])
            accepted, evidence = await journal.checkpoint(claim, last_index)
            if accepted and world.context == "fresh":
                messages = [system_message(world.task), {"role": "summary", "completed": claim}]
            else:
                messages.append(checkpoint_message(accepted, claim, evidence))
        elif last["role"] == "assistant" and "final" in last:
            await journal.complete()
            world.meter.write("final")
            return
        else:
            response = model.respond(messages)
            if "tool_call" in response:
                world.kill.point(response["tool_call"]["index"], "responded")
            await journal.record(response)
            messages.append({"role": "assistant", **response})


async def main(config: dict[str, Any]) -> None:
    task = Task(config["subtasks"], config["every"], config["liar"])
    meter = Meter(config["meter"])
    meter.write("ready")  # imports done: the rest of the restart is the store's and ours
    world = World(
        task=task,
        context=config["context"],
        verify=config["verify"],
        ledger=Ledger(config["ledger"]),
        artifacts=Artifacts(config["artifacts"]),
        meter=meter,
        kill=KillSwitch(),
    )
    journal: MemoryJournal | ZincirJournal
    if config["durability"] == "none":
        journal = MemoryJournal(world)
    else:
        journal = ZincirJournal(world, config["db"], config["durability"])
    try:
        await run_agent(world, journal)
    finally:
        await journal.close()
        world.ledger.close()
        world.meter.close()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
