"""``MCPToolset``: an MCP server's tools in the durable agent loop (origin ``mcp``, routed
through ``mcp.request`` to ``serve_mcp``), preflighted, and surviving a SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import zincir
from tests.agent.reference import call, lines, request_number, returns
from tests.conftest import REPO
from tests.durable_mcp.agent_worker import RUN_ID, build, durable_agent
from tests.durable_mcp.conftest import HANDLER, ledger_lines
from tests.helpers import rows
from zincir.agent import Agent, FunctionModel, ToolOrigin
from zincir.mcp import Connect, DurableMCPClient, MCPTool, MCPToolset
from zincir.payloads import ModelRequest, ModelResponse, TextPart


async def test_an_agent_calls_mcp_tools_through_mcp_request(
    store: zincir.SQLiteStore, db_path: Path, http_connect: Connect, ledger: Path, tmp_path: Path
) -> None:
    agent, binding = durable_agent(store, http_connect, tmp_path / "tools.txt")
    result = await agent.run("Weather?", durable=binding)
    assert result.output == "Sunny in Oslo, 21 C | noted Oslo | Sunny in Bergen, 21 C"
    assert ledger_lines(ledger) == [
        'call forecast {"city": "Oslo"}',
        'call forecast {"city": "Bergen"}',
    ]
    operations = rows(
        db_path, "SELECT step_id, sequence, kind, handler_id FROM operations ORDER BY rowid"
    )
    assert operations[:3] == [  # the discovery, page by page, before the first model request
        ("mcp.toolset.weather", page, "mcp_request", HANDLER) for page in range(3)
    ]
    assert sorted(operations[3:]) == [
        ("mcp.request", 0, "mcp_request", HANDLER),  # forecast(Oslo): position 0
        ("mcp.request", 1000, "mcp_request", HANDLER),  # forecast(Bergen)
        ("model.request", 0, "model_request", "agent-model"),
        ("model.request", 1, "model_request", "agent-model"),
        ("model.request", 2, "model_request", "agent-model"),
        ("tool.call", 1, "tool_call", "agent-tools"),  # note(Oslo): position 1
    ]
    assert (await agent.run("Weather?", durable=binding)).output == result.output
    assert len(ledger_lines(ledger)) == 2
    tools = await agent.resolve_toolsets(zincir.payloads.RunContext(run_id=RUN_ID))
    offered = [t for toolset, found in tools if isinstance(toolset, MCPToolset) for t in found]
    assert all(isinstance(t, MCPTool) and t.origin is ToolOrigin.MCP for t in offered)


async def test_preflight_needs_the_toolsets_mcp_handler_registered(
    store: zincir.SQLiteStore, db_path: Path, stdio_connect: Connect, ledger: Path, tmp_path: Path
) -> None:
    agent, binding = durable_agent(store, stdio_connect, tmp_path / "t.txt", registered=False)
    with pytest.raises(zincir.MissingDurableHandler, match=rf"\[run {RUN_ID}\].*'{HANDLER}'"):
        await agent.run("Weather?", durable=binding)
    assert rows(db_path, "SELECT COUNT(*) FROM operations") == [(0,)]
    assert rows(db_path, "SELECT COUNT(*) FROM agent_runs") == [(0,)]
    assert ledger_lines(ledger) == []


async def test_arguments_that_break_the_servers_schema_go_back_to_the_model(
    http_connect: Connect, ledger: Path
) -> None:
    def model(request: ModelRequest) -> ModelResponse:
        number = request_number(request)
        if number == 0:
            return ModelResponse(parts=[call("c0", "add", a="one", b=2)])
        if number == 1:
            return ModelResponse(parts=[call("c1", "add", a=1, b=2)])
        return ModelResponse(parts=[TextPart(text=str(returns(request)))])

    client = DurableMCPClient(http_connect)  # no binding: a direct run calls the server itself
    agent = Agent(FunctionModel(model), toolsets=[MCPToolset(client, id="math")])
    result = await agent.run("1 + 2?")
    first, second = returns(result_request(result))
    assert "invalid arguments: a:" in first and "Fix the arguments" in first
    assert second == {"sum": 3}
    assert ledger_lines(ledger) == ['call add {"a": 1, "b": 2}']


def result_request(result: zincir.agent.AgentRunResult) -> ModelRequest:
    return ModelRequest(messages=list(result.messages))


@pytest.mark.crash
def test_a_killed_agent_reruns_without_calling_an_mcp_tool_twice(tmp_path: Path) -> None:
    db, ledger, tools = tmp_path / "x.db", tmp_path / "ledger.txt", tmp_path / "tools.txt"
    command = [
        sys.executable,
        "-m",
        "tests.durable_mcp.agent_worker",
        str(db),
        str(ledger),
        str(tools),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    first = subprocess.Popen(
        [*command, "--hang"], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert first.stdout is not None
        assert first.stdout.readline().strip() == "thinking"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        if first.stdout is not None:
            first.stdout.close()
    assert lines(ledger) == ['call forecast {"city": "Oslo"}']
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "output: Sunny in Oslo, 21 C | noted Oslo | Sunny in Bergen, 21 C" in done.stdout
    assert lines(ledger) == [  # each MCP call reached the server once
        'call forecast {"city": "Oslo"}',
        'call forecast {"city": "Bergen"}',
    ]
    assert lines(tools) == ["note Oslo"]
    assert rows(db, "SELECT status FROM agent_runs") == [("completed",)]


def test_an_unbound_toolset_needs_no_run(stdio_connect: Connect, tmp_path: Path) -> None:
    toolset = MCPToolset(DurableMCPClient(stdio_connect), id="direct")
    assert toolset.durable_origins == frozenset({ToolOrigin.MCP})
    assert dict(toolset.durable_handlers) == {}
    agent = build(tmp_path / "t.txt", DurableMCPClient(stdio_connect, handler_id="x"))
    assert any(isinstance(t, MCPToolset) for t in agent.toolsets)
    with pytest.raises(zincir.InvalidInput, match="DurableMCPClient"):
        MCPToolset("not a client")  # type: ignore[arg-type]
