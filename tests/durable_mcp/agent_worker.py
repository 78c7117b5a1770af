"""An agent with an MCP server's tools and an application tool, for the tests (and the crash
test's subprocess).

    python -m tests.durable_mcp.agent_worker DB LEDGER TOOLS_LOG [--hang]

The scripted model asks for ``forecast(Oslo)`` (MCP) and ``note(Oslo)`` (application), then
``forecast(Bergen)``, then answers. With ``--hang`` it prints ``thinking`` and waits before
its second answer, to be killed there. The MCP server runs over stdio and writes each call
to LEDGER; ``note`` writes to TOOLS_LOG.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import timedelta
from pathlib import Path

import zincir
from tests.agent.reference import append, call, request_number, returns
from tests.conftest import REPO
from tests.durable_mcp.conftest import HANDLER, server_env
from zincir.agent import Agent, AgentRunResult, DurableBinding, FunctionModel, Handlers, serve, tool
from zincir.mcp import Connect, DurableMCPClient, MCPToolset, serve_mcp, stdio
from zincir.payloads import ModelRequest, ModelResponse, TextPart

RUN_ID = "mcp-agent"
AGENT_HANDLERS = Handlers(model_request="agent-model", tool_call="agent-tools")


def build(
    tools_log: Path, client: DurableMCPClient, *, hang: bool = False, model_log: Path | None = None
) -> Agent:
    """The agent: a scripted model, ``note`` and the MCP server's tools."""

    @tool
    async def note(text: str) -> str:
        """Write a note."""
        append(tools_log, f"note {text}")
        return f"noted {text}"

    async def model(request: ModelRequest) -> ModelResponse:
        turn = request_number(request)
        if model_log is not None:
            append(model_log, f"model {turn}")
        if turn == 0:
            return ModelResponse(
                parts=[call("c-oslo", "forecast", city="Oslo"), call("c-note", "note", text="Oslo")]
            )
        if turn == 1:
            if hang:
                print("thinking", flush=True)
                await asyncio.sleep(3600)  # killed here
            return ModelResponse(parts=[call("c-bergen", "forecast", city="Bergen")])
        return ModelResponse(parts=[TextPart(text=" | ".join(str(r) for r in returns(request)))])

    return Agent(
        FunctionModel(model),
        name="weather",
        tools=[note],
        toolsets=[MCPToolset(client, id="weather")],
    )


def durable_agent(
    store: zincir.SQLiteStore,
    connect: Connect,
    tools_log: Path,
    *,
    hang: bool = False,
    run_id: str = RUN_ID,
    registered: bool = True,
) -> tuple[Agent, DurableBinding]:
    """The agent and its binding: one registry serves the model, ``note`` and the MCP server."""
    registry = zincir.HandlerRegistry()
    runtime = zincir.LocalRuntime(store, registry, claim_ttl=1)
    binding = DurableBinding(runtime, run_id, AGENT_HANDLERS, lease_ttl=timedelta(seconds=1))
    client = DurableMCPClient(None, binding, handler_id=HANDLER)
    agent = build(tools_log, client, hang=hang)
    serve(registry, agent, AGENT_HANDLERS)
    if registered:
        serve_mcp(registry, HANDLER, connect, timeout=20)
    return agent, binding


async def run_until_done(agent: Agent, binding: DurableBinding) -> AgentRunResult:
    """Run, waiting out a killed owner's lease."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return await agent.run("Weather in Oslo and Bergen?", durable=binding)
        except zincir.LeaseHeld:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("ledger")
    parser.add_argument("tools_log")
    parser.add_argument("--hang", action="store_true")
    args = parser.parse_args()
    connect = stdio(
        sys.executable,
        ["-m", "tests.durable_mcp.server"],
        env=server_env(Path(args.ledger)),
        cwd=REPO,
    )
    store = zincir.open_store(args.db)
    try:
        agent, binding = durable_agent(store, connect, Path(args.tools_log), hang=args.hang)
        result = await run_until_done(agent, binding)
        print(f"output: {result.output}", flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
