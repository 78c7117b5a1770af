"""A serving process for the queue tests: ``python queue_worker.py DB STOP_FILE``.

Serves the ``queued`` agent (``runner.serve``, ``$ZINCIR_QUEUE_SLOTS`` runs at a time,
default 10) until STOP_FILE exists. Each run's ``work`` tool appends ``start LABEL KEY PID
TIME`` and ``end LABEL KEY PID TIME`` to ``$ZINCIR_QUEUE_LOG`` around a sleep of
``$ZINCIR_QUEUE_SLEEP`` seconds (default 0.3); a run whose label is ``$ZINCIR_QUEUE_HANG``
prints ``inside`` and sleeps until killed.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.agent.reference import append, call, request_number  # noqa: E402
from zincir.agent import Agent, FunctionModel, Runner, tool  # noqa: E402
from zincir.payloads import ModelRequest, ModelResponse, TextPart  # noqa: E402

LOG_ENV = "ZINCIR_QUEUE_LOG"
SLEEP_ENV = "ZINCIR_QUEUE_SLEEP"
HANG_ENV = "ZINCIR_QUEUE_HANG"
SLOTS_ENV = "ZINCIR_QUEUE_SLOTS"
LEASE_TTL = timedelta(seconds=60)


def _note(what: str, label: str, key: str) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        append(Path(path), f"{what} {label} {key} {os.getpid()} {time.time():.6f}")


@tool
async def work(label: str, key: str) -> str:
    """Do one queued run's work."""
    _note("start", label, key)
    if os.environ.get(HANG_ENV) == label:
        sys.stdout.write("inside\n")
        sys.stdout.flush()
        await asyncio.sleep(3600)
    await asyncio.sleep(float(os.environ.get(SLEEP_ENV, "0.3")))
    _note("end", label, key)
    return "done"


def _prompt(request: ModelRequest) -> str:
    for message in request.messages:
        if message.role == "user":
            return "".join(getattr(part, "text", "") for part in message.parts)
    return ""


async def _model(request: ModelRequest) -> ModelResponse:
    """The prompt is ``LABEL KEY``: one call of ``work``, then the answer."""
    if request_number(request) == 0:
        label, key = _prompt(request).split()
        return ModelResponse(parts=[call("call-work", "work", label=label, key=key)])
    return ModelResponse(parts=[TextPart(text=f"done {_prompt(request)}")])


agent = Agent(FunctionModel(_model), name="queued", tools=[work])


async def _stopped(stop: Path) -> None:
    while not stop.exists():
        await asyncio.sleep(0.05)


async def main(db: str, stop: str) -> None:
    async with Runner(db, [agent], lease_ttl=LEASE_TTL) as runner:
        sys.stdout.write("serving\n")
        sys.stdout.flush()
        slots = int(os.environ.get(SLOTS_ENV, "10"))
        await runner.serve(_stopped(Path(stop)), max_concurrency=slots, poll_interval=0.05)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
