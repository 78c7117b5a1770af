"""TemporalRuntime passes the DurableRuntime conformance suite on a real Temporal server.

Each runtime the factory makes gets its own Worker (its registry) on its own task queue, so
a replaying runtime can only answer from Temporal's stored workflows; all share the
session's server and namespace. The suite runs twice: plain, and with a record store.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path

import pytest

import zincir
from tests.integration.temporal_server import TemporalServer
from tests.runtime_conformance import MakeRuntime, RuntimeConformance
from zincir.durable import DurableRuntime, HandlerRegistry, RetryPolicy

try:
    from temporalio.client import Client

    from zincir.temporal import TemporalRuntime, Worker
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip('needs the temporal extra: pip install "zincir[temporal]"', allow_module_level=True)

pytestmark = pytest.mark.integration

FAST_RETRY = RetryPolicy(
    max_attempts=3,
    initial_interval=timedelta(milliseconds=50),
    backoff=1.0,
    max_interval=timedelta(milliseconds=50),
)


async def _factory(
    server: TemporalServer, stack: AsyncExitStack, store: zincir.SQLiteStore | None
) -> MakeRuntime:
    client = await Client.connect(server.address, namespace=server.namespace)

    async def make(registry: HandlerRegistry) -> DurableRuntime:
        queue = f"conformance-{uuid.uuid4().hex}"
        await stack.enter_async_context(Worker(client, registry, queue))
        return TemporalRuntime(
            client,
            task_queue=queue,
            registrations=registry,
            retry=FAST_RETRY,
            record_store=store,
            # the suite's contract: a kept record replays where no handler is registered
            # (TemporalRuntime refuses an unregistered pair before any I/O by default)
            find_unregistered=True,
        )

    return make


class TestTemporalConformance(RuntimeConformance):
    @pytest.fixture
    async def make_runtime(self, temporal_server: TemporalServer) -> AsyncIterator[MakeRuntime]:
        async with AsyncExitStack() as stack:
            yield await _factory(temporal_server, stack, None)


class TestTemporalConformanceWithRecordStore(RuntimeConformance):
    @pytest.fixture
    async def make_runtime(
        self, temporal_server: TemporalServer, tmp_path: Path
    ) -> AsyncIterator[MakeRuntime]:
        store = zincir.open_store(tmp_path / "records.db")
        try:
            async with AsyncExitStack() as stack:
                yield await _factory(temporal_server, stack, store)
        finally:
            await store.close()
