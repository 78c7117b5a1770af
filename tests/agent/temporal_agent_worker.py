"""Serves the reference agent's handlers in a ``zincir.temporal.Worker``, for the Temporal
kill-and-replay test.

    python temporal_agent_worker.py ADDRESS NAMESPACE TASK_QUEUE LOG [--hang-at N]

Prints ``ready`` once polling. With ``--hang-at N`` the model prints ``inside`` at request N
and sleeps until the process is killed. SIGTERM stops the worker.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import zincir  # noqa: E402
from tests.agent.reference import HANDLERS, build  # noqa: E402
from zincir.agent import serve  # noqa: E402


async def main(args: argparse.Namespace) -> None:
    from temporalio.client import Client

    from zincir.temporal import Worker

    agent = build(Path(args.log), hang_at=args.hang_at)
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    client = await Client.connect(args.address, namespace=args.namespace)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    # A short sticky-queue timeout, so a killed worker's cached workflows move on quickly.
    async with Worker(
        client,
        registry,
        args.task_queue,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
    ):
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await stop.wait()


if __name__ == "__main__":
    from zincir.temporal._cli import exit_now

    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("namespace")
    parser.add_argument("task_queue")
    parser.add_argument("log")
    parser.add_argument("--hang-at", type=int)
    asyncio.run(main(parser.parse_args()))
    exit_now(0)  # skips the interpreter teardown that temporalio's threads can abort
