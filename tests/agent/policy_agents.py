"""The agent of the tool-policy tests, and a worker that runs it durably until killed.

    python policy_agents.py DB LOG RUN_ID BASE_URL [--cap N] [--keep N]

The model is ``OpenAIChatModel`` on the real ``openai`` SDK, against the scripted server at
BASE_URL. The ``search`` tool appends ``search <query> <limit>`` to LOG on each call. The
test arms ``ZINCIR_CRASH_AT`` so the process dies where it wants.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import openai  # noqa: E402

import zincir  # noqa: E402
from tests.agent.openai_server import API_KEY  # noqa: E402
from tests.agent.reference import HANDLERS, append  # noqa: E402
from zincir.agent import Agent, DurableBinding, OpenAIChatModel, serve, tool  # noqa: E402
from zincir.payloads import ToolCallPart  # noqa: E402

LEASE_TTL = timedelta(milliseconds=500)
CLAIM_TTL = timedelta(milliseconds=500)
PROMPT = "Search for zincir."


def clamp(cap: int) -> zincir.ToolPolicy:
    """Caps ``limit`` at ``cap``."""

    def arguments(call: ToolCallPart) -> dict[str, Any]:
        return {**call.arguments, "limit": min(call.arguments["limit"], cap)}

    return zincir.ToolPolicy(arguments=arguments, name="clamp")


def truncate(keep: int) -> zincir.ToolPolicy:
    """Keeps the first ``keep`` characters of a text result."""

    def returns(call: ToolCallPart, result: Any) -> Any:
        if isinstance(result, str) and len(result) > keep:
            return result[:keep] + f"… [{len(result) - keep} more characters]"
        return result

    return zincir.ToolPolicy(returns=returns, name="truncate")


def build(
    base_url: str,
    log: Path,
    *,
    cap: int = 50,
    keep: int = 40,
    client: openai.AsyncOpenAI | None = None,
) -> Agent:
    if client is None:
        client = openai.AsyncOpenAI(base_url=base_url, api_key=API_KEY, max_retries=0)

    @tool(policies=[clamp(cap)])
    def search(query: str, limit: int = 10) -> str:
        """Search the index."""
        append(log, f"search {query} {limit}")
        return f"{limit} hits for {query}: " + "x" * 5000

    return Agent(
        OpenAIChatModel("gpt-test", client),
        tools=[search],
        tool_policies=[truncate(keep)],
        retry=zincir.RetryPolicy.no_retry(),  # a script run out fails the test at once
    )


def binding(agent: Agent, store: zincir.Store, run_id: str) -> DurableBinding:
    registry = zincir.HandlerRegistry()
    serve(registry, agent, HANDLERS)
    runtime = zincir.LocalRuntime(store, registry, claim_ttl=CLAIM_TTL, poll_interval=0.02)
    return DurableBinding(runtime, run_id, HANDLERS, lease_ttl=LEASE_TTL)


async def main(args: argparse.Namespace) -> None:
    agent = build(args.base_url, Path(args.log), cap=args.cap, keep=args.keep)
    store = zincir.open_store(args.db)
    try:
        result = await agent.run(PROMPT, durable=binding(agent, store, args.run_id))
        sys.stdout.write(f"output {result.output}\n")
        sys.stdout.flush()
    finally:
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("log")
    parser.add_argument("run_id")
    parser.add_argument("base_url")
    parser.add_argument("--cap", type=int, default=50)
    parser.add_argument("--keep", type=int, default=40)
    asyncio.run(main(parser.parse_args()))
