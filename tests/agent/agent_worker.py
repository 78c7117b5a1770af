"""Runs the reference agent durably on a LocalRuntime, for the crash test.

    python agent_worker.py DB LOG RUN_ID [--hang-at N]

DB is what ``zincir.open_store`` opens: a SQLite path or a postgresql:// URL.
With ``--hang-at N`` the model prints ``inside`` at request N and sleeps until killed;
otherwise the process prints ``output <text>`` and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import zincir  # noqa: E402
from tests.agent.reference import HANDLERS, build  # noqa: E402
from zincir.agent import DurableBinding, serve  # noqa: E402

LEASE_TTL = timedelta(milliseconds=500)
CLAIM_TTL = timedelta(milliseconds=500)


async def main(args: argparse.Namespace) -> None:
    agent = build(Path(args.log), hang_at=args.hang_at)
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    store = zincir.open_store(args.db)
    try:
        runtime = zincir.LocalRuntime(store, registry, claim_ttl=CLAIM_TTL, poll_interval=0.02)
        binding = DurableBinding(runtime, args.run_id, HANDLERS, lease_ttl=LEASE_TTL)
        result = await agent.run("Use both tools.", durable=binding)
        sys.stdout.write(f"output {result.output}\n")
        sys.stdout.flush()
    finally:
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("log")
    parser.add_argument("run_id")
    parser.add_argument("--hang-at", type=int)
    asyncio.run(main(parser.parse_args()))
