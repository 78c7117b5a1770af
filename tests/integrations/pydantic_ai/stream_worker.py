"""A streaming pydantic-ai agent whose event handler is checkpointed in a FileRestartStore.

    python stream_worker.py DB CHECKPOINTS LOG MODE

Every event the handler receives is appended to LOG (fsynced). MODE ``kill``: the handler
SIGKILLs its process on the third event; ``run``: runs to the end and prints the output.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterable, AsyncIterator
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import AgentStreamEvent, ModelMessage, PartDeltaEvent, PartStartEvent
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import RunContext

import zincir
from zincir.integrations.pydantic_ai import ZincirDurability
from zincir.restart import FileRestartStore

CHUNKS = ("Refunded ", "4200 ", "cents ", "for ", "A-17.")


async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    for chunk in CHUNKS:
        yield chunk


def shown(event: AgentStreamEvent) -> str:
    if isinstance(event, PartStartEvent):
        return f"start {getattr(event.part, 'content', '')!r}"
    if isinstance(event, PartDeltaEvent):
        return f"delta {getattr(event.delta, 'content_delta', '')!r}"
    return event.event_kind


async def main(db: str, checkpoints: str, log: str, mode: str) -> None:
    received = 0

    async def handler(ctx: RunContext[None], events: AsyncIterable[AgentStreamEvent]) -> None:
        nonlocal received
        async for event in events:
            with open(log, "a", encoding="utf-8") as out:
                out.write(shown(event) + "\n")
                out.flush()
                os.fsync(out.fileno())
            received += 1
            if mode == "kill" and received == 3:
                os.kill(os.getpid(), signal.SIGKILL)

    async with zincir.open_store(db) as store:
        durability = ZincirDurability[None](
            store,
            lease_ttl=1.0,
            event_stream_handler=handler,
            restart_store=FileRestartStore(Path(checkpoints)),
        )
        model = FunctionModel(stream_function=stream)
        agent = Agent(model, name="teller", capabilities=[durability])
        deadline = time.monotonic() + 20
        while True:
            try:
                result = await agent.run("refund", run_id="tell-1")
                break
            except zincir.LeaseHeld:  # the killed process's lease has not expired yet
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        print(f"output: {result.output}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
