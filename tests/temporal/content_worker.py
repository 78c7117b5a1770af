"""Serves the reader agent's handlers in a ``zincir.temporal.Worker`` whose content store is
STORE (a SQLite path or PostgreSQL URL), for the kill-and-restart test.

    python content_worker.py ADDRESS NAMESPACE TASK_QUEUE STORE

Prints ``ready`` once polling; SIGTERM stops it. ``$ZINCIR_READER_HANG`` makes the model hang
(see ``content_agents``).
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
from tests.temporal.content_agents import reader  # noqa: E402
from zincir.agent import Runner  # noqa: E402


async def main(args: argparse.Namespace) -> None:
    from temporalio.client import Client

    from zincir.temporal import Worker

    store = zincir.open_store(args.store)
    runner = Runner(store, [reader])
    client = await Client.connect(args.address, namespace=args.namespace)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with Worker(
        client,
        runner.registry,
        args.task_queue,
        content_store=store,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
    ):
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await stop.wait()
    await store.close()


if __name__ == "__main__":
    from zincir.temporal._cli import exit_now

    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("namespace")
    parser.add_argument("task_queue")
    parser.add_argument("store")
    asyncio.run(main(parser.parse_args()))
    exit_now(0)
