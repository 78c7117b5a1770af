"""MCP on ZincirDurability: a stdio server on the official SDK; discovery and calls are
journaled, and a replay never reaches the server."""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai-slim is in the dev extra")
pytest.importorskip("fastmcp", reason="pydantic-ai-slim[mcp] is in the dev extra")

from fastmcp.client.transports import StdioTransport  # noqa: E402
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.mcp import MCPToolset  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

import zincir  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.helpers import rows  # noqa: E402
from zincir.integrations.pydantic_ai import ZincirDurability  # noqa: E402


def inventory(ledger: Path) -> MCPToolset[None]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "ZINCIR_MCP_LEDGER": str(ledger)}
    transport = StdioTransport(
        command=sys.executable, args=["-m", "tests.durable_mcp.server"], env=env, cwd=str(REPO)
    )
    return MCPToolset(transport, id="inventory")


async def test_discovery_and_calls_are_journaled_and_replay_needs_no_server(
    db_path: Path, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    calls: Counter[str] = Counter()

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] += 1
        if sum(isinstance(m, ModelResponse) for m in messages) == 0:
            assert "add" in {tool.name for tool in info.function_tools}
            return ModelResponse(parts=[ToolCallPart("add", {"a": 2, "b": 3}, "m1")])
        return ModelResponse(parts=[TextPart(f"sum: {messages[-1].parts[0].content}")])

    async with zincir.open_store(db_path) as store:

        def agent() -> Agent[None, str]:
            return Agent(
                FunctionModel(model),
                name="stock",
                toolsets=[inventory(ledger)],
                capabilities=[ZincirDurability(store)],
            )

        first = await agent().run("add", run_id="mcp-1")
        reached = ledger.read_text("utf-8").splitlines()
        ledger.unlink()
        again = await agent().run("add", run_id="mcp-1")
    assert again.output == first.output and "5" in first.output
    assert [line.split()[:2] for line in reached] == [["call", "add"]]
    assert not ledger.exists()  # the replay started no server and called nothing
    assert calls["model"] == 2
    steps = rows(
        db_path, "SELECT step_id, kind FROM operations WHERE step_id LIKE '%mcp%' ORDER BY rowid"
    )
    assert ("pydantic_ai.stock.mcp.discover", "mcp_request") in steps
    assert steps[-1] == ("pydantic_ai.stock.mcp.request", "mcp_request")
