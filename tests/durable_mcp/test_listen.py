"""Durable subscriptions: the notifications a request received come back in a bounded batch
with its result, and each is delivered once through its own ``event_delivery`` operation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp.server import MCPServer
from mcp.server.mcpserver import Context

import zincir
from tests.agent.reference import lines
from tests.conftest import REPO
from tests.durable_mcp.conftest import HANDLER, HANDLERS, Counting, Worker, ledger_lines, worker
from tests.helpers import WHOLE_RECORD, rows, whole_record
from zincir.agent import DurableOperationFailed, Handlers
from zincir.mcp import Connect, DurableMCPClient, DurableRequest, McpReply
from zincir.mcp._reply import notification_events
from zincir.payloads import EventDelivery

SLOW = {"name": "slow", "arguments": {"n": 4}}


def events_handler(served: Worker, seen: list[EventDelivery], fail: dict[int, str]) -> None:
    """Register the event handler: it records each delivery; ``fail[i]`` makes event ``i``
    fail once ("retryable") or for good ("fatal")."""

    async def deliver(invocation: zincir.Invocation, request: Any) -> dict[str, Any]:
        event = EventDelivery.from_json(invocation.input_json)
        assert event.index is not None
        how = fail.pop(event.index, None)
        if how is not None:
            raise zincir.OperationFailed("SinkDown", how == "retryable", f"event {event.index}")
        seen.append(event)
        return {"delivered": event.index}

    served.registry.register(zincir.OperationKind.EVENT_DELIVERY, "test-events", deliver)


async def test_each_notification_is_delivered_once_through_event_delivery(
    store: zincir.SQLiteStore, db_path: Path, http_connect: Connect, ledger: Path
) -> None:
    policy = zincir.RetryPolicy(max_attempts=3, initial_interval=0.01)
    served = worker(store, db_path, http_connect, retry=policy)
    seen: list[EventDelivery] = []
    events_handler(served, seen, {1: "retryable"})  # event 2 fails once, then is retried
    client = DurableMCPClient(None, served.binding())
    result = await client.listen_durable("tools/call", SLOW, durable=DurableRequest("watch", 3))
    assert isinstance(result, mcp_types.CallToolResult)
    assert result.content[0] == mcp_types.TextContent(text="done after 4 steps")
    assert [(e.name, e.source, e.parent_sequence, e.index) for e in seen] == [
        ("notifications/progress", "mcp", 3, i) for i in range(4)
    ]
    assert [e.data for e in seen] == [
        {"progressToken": "watch#3", "progress": float(i), "total": 4.0, "message": f"step {i}"}
        for i in range(1, 5)
    ]
    assert rows(db_path, "SELECT step_id, sequence, kind, attempts FROM operations ORDER BY 2") == [
        ("watch", 3, "mcp_request", 1),
        ("watch.event", 3000, "event_delivery", 1),
        ("watch.event", 3001, "event_delivery", 2),
        ("watch.event", 3002, "event_delivery", 1),
        ("watch.event", 3003, "event_delivery", 1),
    ]
    # a rerun of the whole subscription replays everything: no server, no delivery
    replaying = Counting(http_connect)
    again = worker(store, db_path, replaying)
    events_handler(again, seen, {})
    rerun = DurableMCPClient(None, again.binding())
    raw = await rerun.listen_json_durable("tools/call", SLOW, durable=DurableRequest("watch", 3))
    assert raw["content"] == [{"type": "text", "text": "done after 4 steps"}]
    assert replaying.opened == [] and len(seen) == 4
    assert ledger_lines(ledger) == ['call slow {"n": 4}']


async def test_a_persisted_delivery_failure_replays_without_redelivering(
    store: zincir.SQLiteStore, db_path: Path, http_connect: Connect, ledger: Path
) -> None:
    served = worker(store, db_path, http_connect)
    seen: list[EventDelivery] = []
    events_handler(served, seen, {1: "fatal"})
    client = DurableMCPClient(None, served.binding())
    with pytest.raises(DurableOperationFailed, match=r"SinkDown.*watch\.event #5001"):
        await client.listen_durable("tools/call", SLOW, durable=DurableRequest("watch", 5))
    assert [e.index for e in seen] == [0]
    with pytest.raises(DurableOperationFailed, match="SinkDown"):
        await client.listen_durable("tools/call", SLOW, durable=DurableRequest("watch", 5))
    assert [e.index for e in seen] == [0]  # event 1 was not delivered again
    assert ledger_lines(ledger) == ['call slow {"n": 4}']


@pytest.mark.crash
def test_a_killed_delivery_is_retried_and_no_event_is_delivered_twice(tmp_path: Path) -> None:
    db, ledger, deliveries = tmp_path / "x.db", tmp_path / "ledger.txt", tmp_path / "events.txt"
    command = [sys.executable, "-m", "tests.durable_mcp.listen_worker", str(db), str(ledger)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    killed = subprocess.run(
        [*command, str(deliveries), "--die-at", "1"], cwd=REPO, env=env, timeout=60, check=False
    )
    assert killed.returncode == -9
    done = subprocess.run(
        [*command, str(deliveries)],
        cwd=REPO,
        env=env,
        timeout=60,
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "result: done after 4 steps" in done.stdout
    assert lines(deliveries) == [
        "attempt 0",
        "deliver 0 1.0",
        "attempt 1",  # killed here: no record, so the rerun delivers it
        "attempt 1",
        "deliver 1 2.0",
        "attempt 2",
        "deliver 2 3.0",
        "attempt 3",
        "deliver 3 4.0",
    ]
    assert lines(ledger) == ['call slow {"n": 4}']  # the request itself replayed from its record


async def test_the_event_handler_is_preflighted_before_the_request(
    store: zincir.SQLiteStore, db_path: Path, stdio_connect: Connect, ledger: Path
) -> None:
    served = worker(store, db_path, stdio_connect)
    unconfigured = served.binding(handlers=Handlers(mcp_request=HANDLER))
    client = DurableMCPClient(None, unconfigured)
    with pytest.raises(zincir.MissingDurableHandler, match=r"\[run mcp-run\].*event_delivery"):
        await client.listen_durable("tools/call", SLOW, durable=DurableRequest("watch", 0))
    unregistered = DurableMCPClient(None, served.binding(handlers=HANDLERS))
    with pytest.raises(zincir.MissingDurableHandler, match="'test-events' is not registered"):
        await unregistered.listen_durable("tools/call", SLOW, durable=DurableRequest("watch", 0))
    with pytest.raises(zincir.InvalidInput, match="max_events"):
        await unregistered.listen_durable(
            "tools/call", SLOW, durable=DurableRequest("watch", 0), max_events=1001
        )
    assert rows(db_path, "SELECT COUNT(*) FROM operations") == [(0,)]
    assert ledger_lines(ledger) == []


async def test_a_bounded_batch_counts_what_it_dropped(
    store: zincir.SQLiteStore, db_path: Path, http_connect: Connect
) -> None:
    served = worker(store, db_path, http_connect)
    seen: list[EventDelivery] = []
    events_handler(served, seen, {})
    client = DurableMCPClient(None, served.binding())
    await client.listen_durable(
        "tools/call", SLOW, durable=DurableRequest("watch", 0), max_events=2
    )
    assert [e.index for e in seen] == [0, 1]
    stored = rows(db_path, f"SELECT {WHOLE_RECORD} FROM operations WHERE kind = 'mcp_request'")[0]
    outcome = zincir.decode_record(whole_record(*stored)).outcome
    assert isinstance(outcome, zincir.Success)
    reply = McpReply.from_json(outcome.output_json)
    assert (len(reply.notifications), reply.dropped) == (2, 2)


def test_a_notification_the_sdk_rejects_is_refused() -> None:
    reply = McpReply(
        protocol_version="2026-07-28",
        result={"content": [], "resultType": "complete"},
        notifications=[{"method": "notifications/progress", "params": {"progress": "half"}}],
    )
    with pytest.raises(zincir.InvalidDocument, match=r"\[run r\] notification #0 .*not a valid"):
        notification_events(reply, 0, "watch #0", "r")


async def test_an_in_process_server_feeds_a_durable_subscription(
    store: zincir.SQLiteStore, db_path: Path
) -> None:
    server = MCPServer("in-process", log_level="WARNING")

    @server.tool()
    async def count(n: int, ctx: Context) -> str:
        for step in range(1, n + 1):
            await ctx.report_progress(step, n)
        return "counted"

    served = worker(store, db_path, lambda request: server)
    seen: list[EventDelivery] = []
    events_handler(served, seen, {})
    client = DurableMCPClient(None, served.binding())
    raw = await client.listen_json_durable(
        "tools/call", {"name": "count", "arguments": {"n": 2}}, durable=DurableRequest("c", 0)
    )
    assert raw["structuredContent"] == {"result": "counted"}
    assert [e.data for e in seen] == [
        {"progressToken": "c#0", "progress": 1.0, "total": 2.0},
        {"progressToken": "c#0", "progress": 2.0, "total": 2.0},
    ]
