"""A server that answers wrongly, hangs or dies gives a typed failure record, never a hang;
the record replays without a server."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

import zincir
from tests.conftest import REPO
from tests.durable_mcp.conftest import Counting, HttpServer, ledger_lines, server_env, worker
from tests.helpers import rows
from zincir.agent import DurableOperationFailed
from zincir.mcp import Connect, DurableMCPClient, DurableRequest, stdio, streamable_http


async def failure_of(client: DurableMCPClient, tool: str, step: str) -> DurableOperationFailed:
    with pytest.raises(DurableOperationFailed) as caught:
        await client.call_tool(tool, {}, durable=DurableRequest(step, 0))
    return caught.value


def stored_failure(db: Path) -> tuple[str, str]:
    return rows(db, "SELECT status, record FROM operations")[0]


async def test_a_result_breaking_its_schema_is_an_invalid_result_record(
    store: zincir.SQLiteStore, db_path: Path, http_server: HttpServer
) -> None:
    counting = Counting(streamable_http(http_server.url))
    client = DurableMCPClient(None, worker(store, db_path, counting).binding())
    error = await failure_of(client, "bad_structure", "bad")
    assert (error.error, error.retryable) == ("McpInvalidResult", False)
    assert "[run mcp-run]" in str(error) and "structured content" in str(error)
    status, record = stored_failure(db_path)
    assert status == "completed" and '"McpInvalidResult"' in record
    # the failure is the record: a replay raises it again without connecting
    replaying = Counting(streamable_http(http_server.url))
    again = DurableMCPClient(None, worker(store, db_path, replaying).binding())
    assert (await failure_of(again, "bad_structure", "bad")).error == "McpInvalidResult"
    assert replaying.opened == []


async def test_a_server_hanging_past_the_timeout_is_a_retryable_timeout_record(
    store: zincir.SQLiteStore, db_path: Path, http_server: HttpServer
) -> None:
    client = DurableMCPClient(
        None, worker(store, db_path, streamable_http(http_server.url), timeout=1).binding()
    )
    started = time.monotonic()
    error = await failure_of(client, "hang", "hang")
    assert time.monotonic() - started < 10
    assert (error.error, error.retryable) == ("McpTimeout", True)
    assert "no answer within 1 s" in str(error)
    assert '"McpTimeout"' in stored_failure(db_path)[1]


async def test_a_server_dying_mid_request_is_a_connection_lost_record(
    store: zincir.SQLiteStore, db_path: Path, ledger: Path
) -> None:
    connect = stdio(
        sys.executable, ["-m", "tests.durable_mcp.server"], env=server_env(ledger), cwd=REPO
    )
    client = DurableMCPClient(None, worker(store, db_path, connect).binding())
    started = time.monotonic()
    error = await failure_of(client, "die", "die")
    assert time.monotonic() - started < 10
    assert (error.error, error.retryable) == ("McpConnectionLost", True)
    assert ledger_lines(ledger) == ["call die {}"]


async def test_retryable_failures_are_retried_in_place_before_one_is_stored(
    store: zincir.SQLiteStore, db_path: Path, ledger: Path
) -> None:
    connect = stdio(
        sys.executable, ["-m", "tests.durable_mcp.server"], env=server_env(ledger), cwd=REPO
    )
    policy = zincir.RetryPolicy(max_attempts=2, initial_interval=0.01)
    client = DurableMCPClient(None, worker(store, db_path, connect, retry=policy).binding())
    assert (await failure_of(client, "die", "die")).error == "McpConnectionLost"
    assert ledger_lines(ledger) == ["call die {}", "call die {}"]
    assert rows(db_path, "SELECT attempts FROM operations") == [(2,)]


async def test_an_unreachable_server_is_a_connection_failure(
    store: zincir.SQLiteStore, db_path: Path, http_server: HttpServer
) -> None:
    url = http_server.url
    http_server.stop()
    client = DurableMCPClient(None, worker(store, db_path, streamable_http(url)).binding())
    error = await failure_of(client, "add", "gone")
    assert (error.error, error.retryable) == ("McpConnectionLost", True)


def test_connect_helpers_refuse_bad_targets() -> None:
    with pytest.raises(zincir.InvalidInput, match="http"):
        streamable_http("ftp://example")
    with pytest.raises(zincir.InvalidInput, match="command"):
        stdio("")


async def test_a_missing_mcp_handler_stores_nothing(
    store: zincir.SQLiteStore, db_path: Path, stdio_connect: Connect
) -> None:
    binding = worker(store, db_path, stdio_connect).binding()
    client = DurableMCPClient(None, binding, handler_id="not-served")
    with pytest.raises(zincir.MissingDurableHandler, match=r"\[run mcp-run\].*not-served"):
        await client.call_tool("add", {"a": 1, "b": 2}, durable=DurableRequest("add", 0))
    assert rows(db_path, "SELECT COUNT(*) FROM operations") == [(0,)]
