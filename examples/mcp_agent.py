"""A durable agent with an MCP server's tools: killed mid-run, rerun, nothing called twice.

    python examples/mcp_agent.py

Needs the ``mcp`` extra (``pip install "zincir[mcp]"``). The weather MCP server is this same
file (``--phase server``), built with the official SDK's ``MCPServer`` and run over stdio by
the worker side (``serve_mcp``) for each request. The story runs in two processes on one
SQLite file (``$ZINCIR_DATABASE_PATH``, else a temporary folder):

1. The agent discovers the server's tools (journaled), asks for the Oslo forecast over MCP
   and writes a note with an application tool; then its process is SIGKILLed while the model
   is thinking.
2. A new process reruns the same run id: the discovery, the Oslo forecast and the note come
   back from their records (no server is started for them), the Bergen forecast runs, and the
   run completes.

The server and the note tool append a line to a ledger each time they really run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import zincir
from zincir.agent import Agent, DurableBinding, FunctionModel, Handlers, serve, tool
from zincir.mcp import DurableMCPClient, MCPToolset, serve_mcp, stdio
from zincir.payloads import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart

RUN_ID = "weather-1"
MCP_HANDLER = "weather-mcp"
HANDLERS = Handlers(model_request="weather-model", tool_call="weather-tools")


def ledger_line(ledger: Path, line: str) -> None:
    """Record that something really ran (fsynced, so a kill right after cannot lose it)."""
    with open(ledger, "a", encoding="utf-8") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def run_server(ledger: Path) -> None:
    """The MCP server: one tool, on the SDK's high-level server API, over stdio."""
    from mcp.server import MCPServer

    server = MCPServer("weather", log_level="WARNING")

    @server.tool(structured_output=False)
    def forecast(city: str) -> str:
        """Tomorrow's weather for a city."""
        ledger_line(ledger, f"mcp forecast {city}")
        return f"{city}: sunny, 21 C"

    server.run("stdio")


def build_agent(ledger: Path, client: DurableMCPClient, *, hang: bool = False) -> Agent:
    """The same agent in every process: a scripted model, a note tool, the server's tools."""

    @tool
    async def note(text: str) -> str:
        """Keep a note."""
        ledger_line(ledger, f"tool note {text}")
        return "noted"

    async def model(request: ModelRequest) -> ModelResponse:
        turn = sum(1 for message in request.messages if message.role == "assistant")
        if turn == 0:
            return ModelResponse(
                parts=[
                    ToolCallPart(
                        tool_call_id="oslo", tool_name="forecast", arguments={"city": "Oslo"}
                    ),
                    ToolCallPart(tool_call_id="note", tool_name="note", arguments={"text": "trip"}),
                ]
            )
        if turn == 1:
            if hang:
                print("thinking", flush=True)
                await asyncio.sleep(3600)  # killed here
            call = ToolCallPart(
                tool_call_id="bergen", tool_name="forecast", arguments={"city": "Bergen"}
            )
            return ModelResponse(parts=[call])
        forecasts = [r for r in _returns(request) if r != "noted"]
        return ModelResponse(parts=[TextPart(text="; ".join(forecasts))])

    return Agent(
        FunctionModel(model),
        name="weather",
        instructions="Plan a trip.",
        tools=[note],
        toolsets=[MCPToolset(client, id="weather")],
    )


def _returns(request: ModelRequest) -> list[Any]:
    return [
        part.content
        for message in request.messages
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


async def run_agent(db: str, ledger: Path, *, hang: bool) -> None:
    """One process: the agent, its runtime and the workers that serve it."""
    store = zincir.open_store(db)
    try:
        registry = zincir.HandlerRegistry()
        runtime = zincir.LocalRuntime(store, registry, claim_ttl=1)
        binding = DurableBinding(runtime, RUN_ID, HANDLERS, lease_ttl=timedelta(seconds=1))
        client = DurableMCPClient(None, binding, handler_id=MCP_HANDLER)
        agent = build_agent(ledger, client, hang=hang)
        serve(registry, agent, HANDLERS)
        server = [__file__, "--phase", "server", "--ledger", str(ledger)]
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "HOME")}
        serve_mcp(registry, MCP_HANDLER, stdio(sys.executable, server, env=env))
        deadline = time.monotonic() + 30
        while True:
            try:
                result = await agent.run("Weather for my trip?", durable=binding)
                break
            except zincir.LeaseHeld:  # the killed process's lease has not expired yet
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        print(f"output: {result.output}")
    finally:
        await store.close()


def _phase(db: str, ledger: Path, phase: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, "--phase", phase, "--db", db, "--ledger", str(ledger)],
        stdout=subprocess.PIPE,
        text=True,
    )


def story(db: str, ledger: Path) -> None:
    """Run the two processes and show the ledger."""
    print("[1] the agent discovers the tools, calls them, then dies while the model thinks")
    first = _phase(db, ledger, "hang")
    assert first.stdout is not None
    while (line := first.stdout.readline()) and line.strip() != "thinking":
        print("    " + line.rstrip())
    first.send_signal(signal.SIGKILL)
    first.wait()
    first.stdout.close()
    print("    SIGKILL")
    print("[2] a new process reruns the same run id")
    second = _phase(db, ledger, "rerun")
    out, _ = second.communicate(timeout=120)
    for line in out.splitlines():
        print("    " + line)
    if second.returncode != 0:
        raise SystemExit(f"the rerun failed with exit code {second.returncode}")
    print("ledger (what really ran):")
    for line in ledger.read_text("utf-8").splitlines():
        print("    " + line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=["story", "hang", "rerun", "server"], default="story")
    parser.add_argument("--db", default=os.environ.get("ZINCIR_DATABASE_PATH"))
    parser.add_argument("--ledger")
    args = parser.parse_args()
    if args.phase == "story":
        folder = Path(tempfile.mkdtemp(prefix="zincir-mcp-"))
        db = args.db or str(folder / "weather.db")
        story(db, Path(args.ledger) if args.ledger else folder / "ledger.txt")
    elif args.phase == "server":
        run_server(Path(args.ledger))
    else:
        asyncio.run(run_agent(args.db, Path(args.ledger), hang=args.phase == "hang"))


if __name__ == "__main__":
    main()
