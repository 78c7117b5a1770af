"""An agent process that holds its run and is killed inside an operation's handler.

    python leased_runtime_worker.py DB SIDE_FILE RUN_ID [--claim-ttl S] [--lease-ttl S]

DB is what ``zincir.open_store`` opens: a SQLite path or a postgresql:// URL.

Creates run RUN_ID with an AgentContext (so this process holds its lease, heartbeated
every lease-ttl/3), then executes one fixed invocation of that run with a LocalRuntime:
the claim is made under the run's lease. The handler appends one JSON line (pid, stable
key) to SIDE_FILE, prints ``inside`` and sleeps until the process is killed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

import zincir
from zincir.contract import Invocation, OperationKind
from zincir.durable import HandlerRegistry, LocalRuntime, RetryPolicy

HANDLER_ID = "leased-tools"


def invocation(run_id: str) -> Invocation:
    """The invocation the worker runs; the test process executes the same one."""
    return Invocation(run_id, "tool.call", 0, OperationKind.TOOL_CALL, HANDLER_ID, '{"order":"A1"}')


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(args: argparse.Namespace) -> None:
    async def handler(invocation: Invocation, request: Any) -> Any:
        with open(args.side_file, "a", encoding="utf-8") as side:
            side.write(json.dumps({"pid": os.getpid(), "key": invocation.stable_key()}) + "\n")
        say("inside")
        await asyncio.sleep(3600)

    registry = HandlerRegistry()
    registry.register(OperationKind.TOOL_CALL, HANDLER_ID, handler)
    store = zincir.open_store(args.db)
    try:
        await zincir.AgentContext.create(
            store, "leased", run_id=args.run_id, lease_ttl=args.lease_ttl
        )
        runtime = LocalRuntime(
            store, registry, RetryPolicy.no_retry(), claim_ttl=args.claim_ttl, poll_interval=0.02
        )
        await runtime.execute(invocation(args.run_id))
    finally:
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("side_file")
    parser.add_argument("run_id")
    parser.add_argument("--claim-ttl", type=float, default=30.0)
    parser.add_argument("--lease-ttl", type=float, default=30.0)
    asyncio.run(main(parser.parse_args()))
