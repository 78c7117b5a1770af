"""``read``: follow a run's durable stream from an offset to its last item."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, Final, Protocol

from .._errors import InvalidDocument, InvalidInput, RunNotFound
from ..store import TERMINAL_STATUSES, RunRecord, Store, as_store
from ._items import RESULT, StreamItem

__all__ = ["StreamSource", "follow", "read"]

PAGE: Final = 500
FIRST_WAIT: Final = 0.05
"""Seconds a reader first waits for new items (PostgreSQL wakes it sooner by NOTIFY)."""
LONGEST_WAIT: Final = 0.25
"""The longest wait between two reads of an idle stream (SQLite polls)."""


async def read(store: Store, run_id: str, after: int = 0) -> AsyncIterator[StreamItem]:
    """Every item of run ``run_id``'s stream after offset ``after``, in order, waiting for
    new ones until the run's ``result`` item (or until the run is terminal and nothing is
    left, for a run whose writer died before writing it). RunNotFound for an unknown run.

    Offsets may have gaps (compacted deltas); resume a reader with the last offset it got.
    """
    store = as_store(store)
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise InvalidInput("after must be an offset (an int >= 0)", run_id=run_id)
    if await store.get_run(run_id) is None:
        raise RunNotFound(
            f"no run {run_id!r} in this store; a stream is read from the store its run is in",
            run_id=run_id,
        )
    async for item in follow(store, run_id, after):
        yield item


class StreamSource(Protocol):
    """What :func:`follow` reads: a store, or the inspector's read-only view."""

    async def get_run(self, run_id: str) -> RunRecord | None: ...
    async def read_stream(self, run_id: str, after: int, limit: int = ...) -> list[Any]: ...
    async def wait_for_wake(self, run_id: str | None, timeout: float) -> bool: ...


async def follow(source: StreamSource, run_id: str, after: int) -> AsyncIterator[StreamItem]:
    """The loop behind :func:`read`, on any :class:`StreamSource`, its arguments checked by
    the caller: the items after ``after``, waiting for new ones, until the ``result`` item
    (or the run is terminal and nothing is left)."""
    wait = FIRST_WAIT
    while True:
        rows = await source.read_stream(run_id, after, PAGE)
        for row in rows:
            after = row.offset
            yield StreamItem(row.offset, row.kind, _payload(row.payload_json, run_id))
            if row.kind == RESULT:
                return
        if rows:
            wait = FIRST_WAIT
            continue
        run = await source.get_run(run_id)
        if run is None or run["status"] in TERMINAL_STATUSES:
            # Items committed before the run ended are read once more, then the stream ends.
            if not await source.read_stream(run_id, after, 1):
                return
            continue
        await source.wait_for_wake(run_id, wait)
        wait = min(wait * 1.5, LONGEST_WAIT)


def _payload(text: str, run_id: str) -> dict[str, object]:
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        raise InvalidDocument(
            "a stream item's payload is not a JSON object; the stream was written outside zincir",
            run_id=run_id,
        )
    return payload
