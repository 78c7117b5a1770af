"""``DurableMCPClient`` against real MCP servers over stdio and streamable HTTP: every request
journaled, replayed without a server, identities stable under concurrency, credentials kept
on the worker."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp_types
import pytest

import zincir
import zincir.mcp
from tests.conftest import REPO, dunder_all_order
from tests.durable_mcp.conftest import (
    HANDLER,
    Counting,
    HttpServer,
    ledger_lines,
    server_env,
    start_http_server,
    worker,
)
from tests.helpers import count, rows
from zincir.agent import Handlers
from zincir.mcp import (
    Connect,
    DurableMCPClient,
    DurableRequest,
    DurableRequestSequence,
    McpReply,
    stdio,
    streamable_http,
)
from zincir.payloads import ClientIdentity, EventDelivery

TOOL_NAMES = [
    "add",
    "forecast",
    "bad_structure",
    "echo",
    "slow",
    "hang",
    "die",
    *(f"filler_{i}" for i in range(5)),
]


async def session(client: DurableMCPClient) -> dict[str, Any]:
    """Discovery, a paginated listing, a tool call and a resource read, in that order."""
    discovery = await client.discover()
    tools = await client.list_tools()
    added = await client.call_tool("add", {"a": 2, "b": 3})
    readme = await client.read_resource("memo://readme")
    return {"discovery": discovery, "tools": tools, "added": added, "readme": readme}


def connect_for(transport: str, ledger: Path) -> tuple[Connect, HttpServer | None]:
    if transport == "stdio":
        return stdio(
            sys.executable, ["-m", "tests.durable_mcp.server"], env=server_env(ledger), cwd=REPO
        ), None
    server = start_http_server(ledger)
    return streamable_http(server.url), server


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_requests_are_journaled_and_replay_with_the_server_stopped(
    transport: str, store: zincir.SQLiteStore, db_path: Path, ledger: Path
) -> None:
    connect, server = connect_for(transport, ledger)
    try:
        counting = Counting(connect)
        binding = worker(store, db_path, counting).binding()
        client = DurableMCPClient(None, binding, durable_requests=DurableRequestSequence(binding))
        first = await session(client)
    finally:
        if server is not None:
            server.stop()

    assert isinstance(first["discovery"], mcp_types.DiscoverResult)
    assert first["discovery"].capabilities.tools is not None
    assert [tool.name for tool in first["tools"]] == TOOL_NAMES  # 12 tools, 4 a page
    assert first["added"].structured_content == {"sum": 5}
    assert first["readme"].contents[0].text == "Read me first."
    # one record per request: discovery, three pages, the call, the read
    assert rows(db_path, "SELECT step_id, sequence, kind, status FROM operations ORDER BY 2") == [
        ("mcp.client", n, "mcp_request", "completed") for n in range(6)
    ]
    assert counting.opened == [
        "server/discover",
        *["tools/list"] * 3,
        "tools/call",
        "resources/read",
    ]
    assert ledger_lines(ledger) == ['call add {"a": 2, "b": 3}', "read memo://readme"]
    stored = rows(db_path, "SELECT input_json FROM operations WHERE sequence = 2")[0][0]
    assert json.loads(stored)["params"] == {"cursor": "4"}

    # The server is gone (stdio: nothing is running between requests); a new process's
    # client replays every record and opens no session.
    replaying = Counting(connect)
    again = worker(store, db_path, replaying).binding()
    second = await session(
        DurableMCPClient(None, again, durable_requests=DurableRequestSequence(again))
    )
    assert second == first
    assert replaying.opened == []
    assert ledger_lines(ledger) == ['call add {"a": 2, "b": 3}', "read memo://readme"]


async def test_listings_of_resources_and_prompts_and_a_prompt(
    store: zincir.SQLiteStore, db_path: Path, http_connect: Connect
) -> None:
    binding = worker(store, db_path, http_connect).binding()
    client = DurableMCPClient(None, binding, durable_requests=DurableRequestSequence(binding, 50))
    assert [r.uri for r in await client.list_resources()] == ["memo://readme", "memo://policy"]
    assert [p.name for p in await client.list_prompts()] == ["greet"]
    prompt = await client.get_prompt("greet", {"name": "Ada"})
    assert prompt.messages[0].content == mcp_types.TextContent(text="Hi Ada")
    raw = await client.request("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}})
    assert raw["structuredContent"] == {"sum": 2}
    assert [s for (s,) in rows(db_path, "SELECT sequence FROM operations ORDER BY 1")] == [
        50,
        51,
        52,
        53,
    ]
    assert client.durable_requests is not None and client.durable_requests.claimed == 4


async def test_explicit_identities_under_gather_give_the_same_records_in_any_order(
    tmp_path: Path, ledger: Path
) -> None:
    delays = tmp_path / "delays.json"
    server = start_http_server(ledger, delays)
    words = ["alpha", "beta", "gamma", "delta"]
    try:

        async def run(db: Path, order: list[str]) -> list[tuple[Any, ...]]:
            delays.write_text(json.dumps({w: 0.1 * order.index(w) for w in words}), "utf-8")
            store = zincir.open_store(db)
            try:
                binding = worker(store, db, streamable_http(server.url)).binding()
                client = DurableMCPClient(None, binding)
                results = await asyncio.gather(
                    *(
                        client.call_tool("echo", {"text": w}, durable=DurableRequest("echo", i))
                        for i, w in enumerate(words)
                    )
                )
                assert [r.content[0].text for r in results] == words  # type: ignore[union-attr]
            finally:
                await store.close()
            return rows(
                db, "SELECT step_id, sequence, input_json, record FROM operations ORDER BY 2"
            )

        first = await run(tmp_path / "a.db", words)
        done_first = [line for line in ledger_lines(ledger) if line.startswith("done")]
        second = await run(tmp_path / "b.db", list(reversed(words)))
        done_second = [line for line in ledger_lines(ledger) if line.startswith("done")][4:]
    finally:
        server.stop()
    assert done_first == [f"done {w}" for w in words]
    assert done_second == [f"done {w}" for w in reversed(words)]  # they finished the other way
    assert first == second  # …yet every identity holds the same record
    assert [(step, seq) for step, seq, *_ in first] == [("echo", i) for i in range(4)]


async def test_sensitive_headers_are_refused_and_worker_credentials_stay_on_the_worker(
    store: zincir.SQLiteStore, db_path: Path, http_server: HttpServer
) -> None:
    connect = streamable_http(http_server.url, headers={"Authorization": "Bearer worker-secret"})
    binding = worker(store, db_path, connect).binding()
    with pytest.raises(zincir.SensitiveHeader, match=r"\[run mcp-run\].*Authorization"):
        DurableMCPClient(None, binding, headers={"Authorization": "Bearer leaked"})
    client = DurableMCPClient(None, binding, headers={"X-Trace": "t-1"})
    with pytest.raises(zincir.SensitiveHeader, match=r"\[run mcp-run\].*X-Api-Key"):
        await client.call_tool(
            "add", {"a": 1, "b": 2}, durable=DurableRequest("add", 0), headers={"X-Api-Key": "k"}
        )
    assert count(db_path, "operations") == 0
    added = await client.call_tool("add", {"a": 1, "b": 2}, durable=DurableRequest("add", 0))
    assert added.structured_content == {"sum": 3}
    stored = json.loads(rows(db_path, "SELECT input_json FROM operations")[0][0])
    assert stored["headers"] == {"X-Trace": "t-1"}
    assert "worker-secret" not in json.dumps(stored)


async def test_requests_need_an_identity_and_keep_event_semantics(
    store: zincir.SQLiteStore, db_path: Path, stdio_connect: Connect, ledger: Path
) -> None:
    binding = worker(store, db_path, stdio_connect).binding()
    bound = DurableMCPClient(stdio_connect, binding)
    with pytest.raises(zincir.InvalidInput, match=r"\[run mcp-run\] .*needs an identity"):
        await bound.call_tool("add", {"a": 1, "b": 2})
    with pytest.raises(zincir.InvalidInput, match="ordinary event sink on a durable request"):
        await bound.call_tool(
            "slow", {"n": 1}, durable=DurableRequest("slow", 0), events=lambda e: None
        )
    with pytest.raises(zincir.InvalidInput, match=r"\[run mcp-run\] .*not an MCP operation"):
        await bound.request("resources/subscribe", {"uri": "x"}, durable=DurableRequest("x", 0))
    direct = DurableMCPClient(stdio_connect)
    with pytest.raises(zincir.InvalidInput, match="durable delivery on a direct request"):
        await direct.listen_durable("tools/call", {"name": "slow", "arguments": {"n": 1}})
    with pytest.raises(zincir.InvalidInput, match="needs a client with a binding"):
        await direct.call_tool("add", {"a": 1, "b": 1}, durable=DurableRequest("add", 0))
    assert count(db_path, "operations") == 0
    assert ledger_lines(ledger) == []


async def test_a_direct_request_stores_nothing_and_feeds_an_ordinary_event_sink(
    store: zincir.SQLiteStore, db_path: Path, http_connect: Connect, ledger: Path
) -> None:
    seen: list[EventDelivery] = []
    client = DurableMCPClient(http_connect, client=ClientIdentity(name="direct", version="1"))
    result = await client.call_tool("slow", {"n": 3}, events=seen.append)
    assert result.content[0] == mcp_types.TextContent(text="done after 3 steps")
    assert [(e.name, e.index, e.data["progress"]) for e in seen] == [  # type: ignore[index, call-overload]
        ("notifications/progress", i, float(i + 1)) for i in range(3)
    ]
    assert ledger_lines(ledger) == ['call slow {"n": 3}']
    assert count(db_path, "operations") == 0


def test_a_reply_is_read_back_with_the_sdk() -> None:
    reply = McpReply(protocol_version="2026-07-28", result={"content": "nope"})
    client = DurableMCPClient(lambda request: "http://127.0.0.1:9/mcp")
    with pytest.raises(zincir.InvalidDocument, match="no valid tools/call result"):
        client._typed("tools/call", reply, None, mcp_types.CallToolResult)


def test_handlers_without_an_mcp_handler_need_an_explicit_id(
    store: zincir.SQLiteStore, db_path: Path, stdio_connect: Connect
) -> None:
    runtime = worker(store, db_path, stdio_connect).runtime
    binding = zincir.agent.DurableBinding(runtime, "r", Handlers(model_request="m"))
    with pytest.raises(zincir.InvalidInput, match=r"\[run r\] no mcp_request handler id"):
        DurableMCPClient(None, binding)
    assert DurableMCPClient(None, binding, handler_id=HANDLER).handler_id == HANDLER


def test_the_mcp_exports_are_pinned_and_the_agent_does_not_import_the_sdk() -> None:
    exports = [
        "CLIENT_STEP",
        "DEFAULT_MAX_PAGES",
        "DEFAULT_MAX_POLLS",
        "DEFAULT_TIMEOUT",
        "EVENT_STRIDE",
        "LISTEN_META",
        "MAX_EVENTS",
        "TASKS_EXTENSION",
        "TASK_META",
        "Connect",
        "DurableMCPClient",
        "DurableRequest",
        "DurableRequestSequence",
        "MCPTool",
        "MCPToolset",
        "McpInputRoundsExceeded",
        "McpReply",
        "Target",
        "serve_mcp",
        "stdio",
        "streamable_http",
        "tool_content",
    ]
    assert zincir.mcp.__all__ == dunder_all_order(exports)
    code = "import sys, zincir.agent; print('mcp' in sys.modules)"
    loaded = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(REPO / "src")},
    ).stdout
    assert loaded.strip() == "False"
