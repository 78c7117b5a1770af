"""Long MCP requests against a real MCP server (streamable HTTP): each request's input is stored
once, as a description of content pieces, so a run of many large requests grows the store
linearly; a request whose arguments carry a growing conversation is not cut yet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import zincir
from tests.durable_mcp.conftest import worker
from tests.helpers import rows
from tests.store.growth import Growth
from zincir.contract import decode_record
from zincir.mcp import Connect, DurableMCPClient, DurableRequestSequence
from zincir.store import OperationKey

TURNS = 40
SECTION = "lorem ipsum dolor sit amet " * 74  # about 2 KB of new text a request


def client_on(store: zincir.SQLiteStore, db_path: Path, connect: Connect) -> DurableMCPClient:
    binding = worker(store, db_path, connect).binding()
    return DurableMCPClient(None, binding, durable_requests=DurableRequestSequence(binding))


async def test_large_requests_are_stored_once_each(
    store: zincir.SQLiteStore, db_path: Path, http_connect: Connect
) -> None:
    client = client_on(store, db_path, http_connect)
    growth = Growth(db_path)
    for turn in range(TURNS):
        text = f"section {turn}: {SECTION}"
        result = await client.call_tool("echo", {"text": text})
        assert result.content[0].text == text  # type: ignore[union-attr]
        growth.sample()
    early, late = growth.assert_linear()
    assert late < 8_000  # the 2 KB argument once, the 2 KB echo in the record, the row
    stored = rows(
        db_path,
        "SELECT sequence, input_json, input_parts, LENGTH(record) FROM operations ORDER BY 1",
    )
    assert len(stored) == TURNS
    for _, text, parts, record in stored:
        assert text == "" and parts is not None and len(parts) < 1_000 and record < 3_000
    row = await store.get_operation(OperationKey("mcp-run", "mcp.client", TURNS - 1))
    assert row is not None and row.record is not None
    request = json.loads(decode_record(row.record).invocation.input_json)
    assert request["params"]["arguments"]["text"] == f"section {TURNS - 1}: {SECTION}"


async def test_a_growing_conversation_in_a_tools_arguments_is_stored_at_linear_cost(
    store: zincir.SQLiteStore, db_path: Path, http_connect: Connect
) -> None:
    client = client_on(store, db_path, http_connect)
    growth = Growth(db_path)
    messages: list[dict[str, Any]] = []
    for turn in range(TURNS):
        messages.append({"role": "user", "content": f"section {turn}: {SECTION}"})
        await client.call_tool("echo", {"messages": messages, "text": f"turn {turn}"})
        growth.sample()
    growth.assert_linear()
