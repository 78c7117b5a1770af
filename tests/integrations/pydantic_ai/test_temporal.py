"""ZincirDurability with ``runtime=`` a TemporalRuntime on a real Temporal dev server.

The units run through Temporal (a workflow and an activity per operation) in a
``zincir.temporal.Worker`` of this process, which ``serve`` hands the unit bodies; the
records are kept in the store beside the run. A second run under the same run id, with no
worker polling the queue any more, replays every record and calls no model or tool.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai-slim is in the dev extra")

import zincir  # noqa: E402
from tests.helpers import rows  # noqa: E402
from tests.integration.temporal_server import TemporalServer  # noqa: E402
from tests.integrations.pydantic_ai.test_durability import support_agent  # noqa: E402
from zincir import OperationKind, RetryPolicy  # noqa: E402
from zincir.integrations.pydantic_ai import serve  # noqa: E402

try:
    from temporalio.client import Client

    from zincir.temporal import ActivityTimeouts, TemporalRuntime, Worker
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip('needs the temporal extra: pip install "zincir[temporal]"', allow_module_level=True)

OUTPUT = "Refunded 4200 cents for A-17."


def runtime_for(client: Client, queue: str, store: zincir.SQLiteStore) -> TemporalRuntime:
    return TemporalRuntime(
        client,
        task_queue=queue,
        registrations=[(kind, "pydantic-ai.support") for kind in OperationKind],
        record_store=store,
        timeouts=ActivityTimeouts(start_to_close=30),
        retry=RetryPolicy(max_attempts=1),
    )


async def test_units_run_through_temporal_and_replay_without_a_worker(
    temporal_server: TemporalServer, tmp_path: Path
) -> None:
    db = tmp_path / "agent.db"
    queue = f"pydantic-ai-{uuid.uuid4().hex}"
    client = await Client.connect(temporal_server.address, namespace=temporal_server.namespace)
    registry = zincir.HandlerRegistry()
    serve(registry, "support")
    calls: Counter[str] = Counter()
    async with zincir.open_store(db) as store:
        agent = support_agent(store, calls, runtime=runtime_for(client, queue, store))
        async with Worker(
            client, registry, queue, sticky_queue_schedule_to_start_timeout=timedelta(seconds=1)
        ):
            first = await agent.run("Refund order A-17.", run_id="temporal-1")
        assert first.output == OUTPUT
        assert calls == Counter(model=3, lookup=1, refund=1)

        # No worker polls the queue now: the records alone answer the replay.
        again = await agent.run("Refund order A-17.", run_id="temporal-1")
        assert again.output == OUTPUT
        assert calls == Counter(model=3, lookup=1, refund=1)

    operations = rows(
        db,
        "SELECT step_id, sequence, status FROM operations WHERE run_id = ? ORDER BY rowid",
        ("temporal-1",),
    )
    assert operations == [
        ("pydantic_ai.support.model.request", 0, "completed"),
        ("pydantic_ai.support.tool.call", 0, "completed"),
        ("pydantic_ai.support.model.request", 1, "completed"),
        ("pydantic_ai.support.tool.call", 1, "completed"),
        ("pydantic_ai.support.model.request", 2, "completed"),
    ]
    assert rows(db, "SELECT status FROM agent_runs WHERE id = ?", ("temporal-1",)) == [
        ("completed",)
    ]
    assert await workflows_on(client, queue) == 5  # one per operation


async def workflows_on(client: Client, queue: str, expected: int = 5) -> int:
    """How many workflows ran on ``queue`` (visibility may lag the runs by a moment)."""
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        found = [w async for w in client.list_workflows(f'TaskQueue = "{queue}"')]
        if len(found) >= expected or asyncio.get_running_loop().time() > deadline:
            return len(found)
        await asyncio.sleep(0.2)
