"""A worker process on "another machine": a ResumeWorker over TCP on a PostgreSQL store.

Each claimed run is a workflow of ``--steps`` durable steps. A step's body appends
``effect RUN STEP WORKER`` to the effects file (its external side effect); once ``wf.step``
returns (the result committed) the worker appends ``ack RUN STEP WORKER`` and fsyncs: an
acknowledged write. The worker exits once every run in the schema is terminal. Every error
a handler meets is printed as ``error RUN NAME`` so tests can see what fenced it.

usage: worker.py URL NAME EFFECTS ACKS [--steps N] [--delay S] [--lease S] [--concurrency N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from datetime import timedelta

import zincir
from zincir import AgentContext, WorkflowContext


def append_line(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


async def all_terminal(store: zincir.Store) -> bool:
    try:
        runs = await store.list_runs(limit=10_000)
    except zincir.StoreError:
        return False  # the server is away: not done
    return bool(runs) and all(run["status"] in ("completed", "failed") for run in runs)


def open_when_up(url: str) -> zincir.Store:
    """Open the store, waiting out a server that is restarting (the tests restart it)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return zincir.open_store(url)
        except zincir.StoreUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


async def main(args: argparse.Namespace) -> None:
    store = open_when_up(args.url)

    async def handler(ctx: AgentContext) -> None:
        print(f"claim {ctx.run_id} {ctx.lease_token} {args.name}", flush=True)
        wf = WorkflowContext.from_agent(ctx)
        try:
            await wf.recover()  # the worker claimed it after its lease expired: the owner is gone
            for number in range(args.steps):
                step = f"s{number}"

                async def body(step: str = step) -> dict[str, str]:
                    append_line(args.effects, f"effect {ctx.run_id} {step} {args.name}")
                    await asyncio.sleep(args.delay)
                    return {"by": args.name}

                await wf.step(step, body)
                append_line(args.acks, f"ack {ctx.run_id} {step} {args.name}")
            await wf.complete({"by": args.name})
        except zincir.ZincirError as error:
            print(f"error {ctx.run_id} {type(error).__name__}", flush=True)
            raise

    async def done() -> None:
        while not await all_terminal(store):
            await asyncio.sleep(0.1)

    worker = (
        zincir.ResumeWorker(store, lease_ttl=timedelta(seconds=args.lease))
        .poll_interval(timedelta(milliseconds=50))
        .max_concurrency(args.concurrency)
        .backoff(timedelta(milliseconds=50), factor=1.5, maximum=timedelta(milliseconds=500))
    )
    try:
        await worker.run(handler, done())
    finally:
        await store.close()
    print(f"exit {args.name}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("name")
    parser.add_argument("effects")
    parser.add_argument("acks")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--lease", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=4)
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
