"""A Temporal worker in its own process, for tests that kill it (and for the CLI test).

``registry`` serves ``tool_call/blocking-tool``: each call appends its invocation to
``$ZINCIR_TEST_MARKERS/calls.jsonl``; until the file ``release`` exists there, the handler
writes ``blocked`` and waits (the test SIGKILLs the process then).

Run as ``python temporal_worker_proc.py ADDRESS TASK_QUEUE`` (a short sticky-queue timeout,
so a dead worker's cached workflow moves on quickly) or through
``zincir temporal-worker tests.integration.temporal_worker_proc:registry``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from zincir.contract import Invocation, OperationKind
from zincir.durable import HandlerRegistry

registry = HandlerRegistry()


@registry.handler(OperationKind.TOOL_CALL, "blocking-tool")
async def blocking_tool(invocation: Invocation, request: Any) -> Any:
    markers = Path(os.environ["ZINCIR_TEST_MARKERS"])
    with open(markers / "calls.jsonl", "a") as calls:
        calls.write(json.dumps({"pid": os.getpid(), "invocation": invocation.to_dict()}) + "\n")
        calls.flush()
        os.fsync(calls.fileno())
    if not (markers / "release").exists():
        (markers / "blocked").write_text(str(os.getpid()))
        while not (markers / "release").exists():
            await asyncio.sleep(0.02)
    return {"done": request}


async def main(address: str, task_queue: str) -> None:
    from temporalio.client import Client

    from zincir.temporal import Worker

    client = await Client.connect(address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with Worker(
        client, registry, task_queue, sticky_queue_schedule_to_start_timeout=timedelta(seconds=1)
    ):
        print("ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    from zincir.temporal._cli import exit_now

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    exit_now(0)  # skips the interpreter teardown that temporalio's threads can abort
