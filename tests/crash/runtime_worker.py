"""A LocalRuntime process for the multi-process and crash tests.

    python runtime_worker.py DB SIDE_FILE MODE [--claim-ttl S] [--sleep S] [--go FILE]

DB is what ``zincir.open_store`` opens: a SQLite path or a postgresql:// URL.

Executes one fixed invocation. The handler appends one JSON line (pid, stable key, digest,
input) to SIDE_FILE, then per MODE: ``ok`` returns after ``--sleep`` seconds; ``hang`` prints
``inside`` and sleeps until killed; ``fail-then-hang`` raises a retryable failure on its first
attempt (the runtime then sleeps its 60 s retry delay) after printing ``failing``.
After execute returns it prints ``record <canonical record>``; with ``--hold`` it then prints
``held`` and sleeps until killed. ``--go FILE`` prints ``ready`` and waits for FILE first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from datetime import timedelta
from typing import Any

import zincir
from zincir.contract import Invocation, OperationKind, encode_record
from zincir.durable import HandlerRegistry, LocalRuntime, RetryPolicy

INVOCATION = Invocation(
    run_id="crash-run",
    step_id="tool.call",
    sequence=0,
    kind=OperationKind.TOOL_CALL,
    handler_id="crash-tools",
    input_json='{"order":"A1","amount":12}',
)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(args: argparse.Namespace) -> None:
    attempts = 0

    async def handler(invocation: Invocation, request: Any) -> Any:
        nonlocal attempts
        attempts += 1
        with open(args.side_file, "a", encoding="utf-8") as side:
            side.write(
                json.dumps(
                    {
                        "pid": os.getpid(),
                        "key": invocation.stable_key(),
                        "digest": invocation.input_digest(),
                        "input": invocation.input_json,
                    }
                )
                + "\n"
            )
        if args.mode == "hang":
            say("inside")
            await asyncio.sleep(3600)
        if args.mode == "fail-then-hang" and attempts == 1:
            say("failing")
            raise zincir.OperationFailed("Flaky", retryable=True)
        await asyncio.sleep(args.sleep)
        return {"charged": request["amount"], "by": os.getpid()}

    registry = HandlerRegistry()
    registry.register(OperationKind.TOOL_CALL, "crash-tools", handler)
    store = zincir.open_store(args.db)
    try:
        runtime = LocalRuntime(
            store,
            registry,
            RetryPolicy(max_attempts=3, initial_interval=timedelta(seconds=60)),
            claim_ttl=args.claim_ttl,
            poll_interval=0.02,
        )
        if args.go:
            say("ready")
            while not os.path.exists(args.go):
                await asyncio.sleep(0.005)
        record = await runtime.execute(INVOCATION)
        say("record " + encode_record(record))
        if args.hold:
            say("held")
            await asyncio.sleep(3600)
    finally:
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("side_file")
    parser.add_argument("mode", choices=["ok", "hang", "fail-then-hang"])
    parser.add_argument("--claim-ttl", type=float, default=1.0)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--go")
    parser.add_argument("--hold", action="store_true")
    asyncio.run(main(parser.parse_args()))
