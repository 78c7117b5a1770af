"""The long run of ``long_resume_agent`` run (or continued) until it pauses for an approval,
then held there until the test kills it (SIGKILL):

    python paused_agent.py TARGET RUN_ID TURNS LOG --approve K [--approve K ...]

prints ``paused <call ids> <digest>``, the digest being :func:`digest` of the paused
conversation as this process holds it, and sleeps.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.agent.long_resume_agent import LEASE_TTL, PROMPT, build  # noqa: E402
from zincir.agent import Runner  # noqa: E402
from zincir.contract.payloads import Message  # noqa: E402


def digest(messages: Sequence[Message]) -> str:
    """SHA-256 of a conversation's canonical JSON: what two processes compare."""
    text = json.dumps([m.to_dict() for m in messages], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


async def main(args: argparse.Namespace) -> None:
    agent = build(args.turns, Path(args.log), approve=args.approve)
    async with Runner(args.target, [agent], lease_ttl=LEASE_TTL) as runner:
        result = await runner.run(agent, PROMPT, run_id=args.run_id)
        assert result.paused is not None, result.output
        ids = " ".join(call.call_id for call in result.paused.calls)
        sys.stdout.write(f"paused {ids} {digest(result.paused.messages)}\n")
        sys.stdout.flush()
        time.sleep(3600)  # held paused, the store open, until the test kills the process


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    parser.add_argument("run_id")
    parser.add_argument("turns", type=int)
    parser.add_argument("log")
    parser.add_argument("--approve", type=int, action="append", default=[])
    asyncio.run(main(parser.parse_args()))
