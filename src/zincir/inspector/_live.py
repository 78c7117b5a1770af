"""A live run's stream on the inspector: the few async reads the SSE endpoint makes, over
the read-only view (one snapshot per read, in a worker thread; SQLite is polled)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from ..store import TERMINAL_STATUSES, RunRecord
from ..streams import RESULT, StreamItem
from ._db import View

__all__ = ["POLL_S", "ReadOnlyStreams", "follow"]

POLL_S = 0.2  # how often a follower looks for new items (the read-only view has no wake)


class ReadOnlyStreams:
    """``get_run``, ``read_stream``, ``stream_tail`` and ``wait_for_wake`` of a read-only
    view, async as the store's are; nothing here writes."""

    def __init__(self, view: View, poll: float = POLL_S) -> None:
        self.view = view
        self.poll = poll

    def _read(self, name: str, *args: Any) -> Any:
        with self.view.snapshot() as reader:
            return getattr(reader, name)(*args)

    async def get_run(self, run_id: str) -> RunRecord | None:
        found: RunRecord | None = await asyncio.to_thread(self._read, "get_run", run_id)
        return found

    async def read_stream(self, run_id: str, after: int, limit: int = 500) -> Any:
        return await asyncio.to_thread(self._read, "read_stream", run_id, after, limit)

    async def stream_tail(self, run_id: str) -> Any:
        return await asyncio.to_thread(self._read, "stream_tail", run_id)

    async def wait_for_wake(self, run_id: str | None, timeout: float) -> bool:
        await asyncio.sleep(max(0.0, min(timeout, self.poll)))
        return False


async def follow(streams: ReadOnlyStreams, run_id: str, after: int) -> AsyncIterator[StreamItem]:
    """The items after ``after`` in order, polling for new ones, until the ``result`` item
    (or the run is terminal and nothing is left), as :func:`zincir.streams.read` does."""
    while True:
        rows = await streams.read_stream(run_id, after)
        for row in rows:
            after = row.offset
            payload = json.loads(row.payload_json)
            yield StreamItem(row.offset, row.kind, payload if isinstance(payload, dict) else {})
            if row.kind == RESULT:
                return
        if rows:
            continue
        run = await streams.get_run(run_id)
        if run is None or run["status"] in TERMINAL_STATUSES:
            if not await streams.read_stream(run_id, after, 1):
                return
            continue
        await streams.wait_for_wake(run_id, streams.poll)
