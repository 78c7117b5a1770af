"""A live run's stream on the inspector: the few async reads the SSE endpoint makes, over
the read-only view (one snapshot per read, in a worker thread; SQLite is polled); the
endpoint follows them with ``zincir.streams``' own loop."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any, Final

from .._encryption import SEALED
from ..store import RunRecord
from ._db import View

__all__ = ["POLL_S", "ReadOnlyStreams"]

POLL_S = 0.2  # how often a follower looks for new items (the read-only view has no wake)
SEALED_ITEM: Final = json.dumps({"sealed": SEALED}, ensure_ascii=False)
"""A stream item's payload as an encrypted store read without keys serves it."""


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
        rows = await asyncio.to_thread(self._read, "read_stream", run_id, after, limit)
        sealed = SEALED_ITEM  # no key given: an object saying so, as the stream's items are
        return [
            row if row.payload_json != SEALED else dataclasses.replace(row, payload_json=sealed)
            for row in rows
        ]

    async def stream_tail(self, run_id: str) -> Any:
        return await asyncio.to_thread(self._read, "stream_tail", run_id)

    async def wait_for_wake(self, run_id: str | None, timeout: float) -> bool:
        await asyncio.sleep(max(0.0, min(timeout, self.poll)))
        return False
