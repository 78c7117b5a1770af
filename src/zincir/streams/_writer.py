"""``StreamWriter``: the run owner's appends to its durable stream, deltas in batches.

Live deltas are buffered and committed a batch at a time (``batch`` deltas, or ``interval``
seconds after the oldest buffered one), without waiting for the disk: a lost tail of deltas
is voided and asked again like a crashed attempt's. Consecutive text of one part within a
batch is one ``part_delta`` item: a client sees the same text, in fewer items and bytes.
Boundary items (``message``, ``tool_result``, ``paused``, ``event``, ``result``, ``void``)
take the buffered deltas with them in one durable commit. Every write is fenced by the
owner's lease.

The agent loop sets the writer of the run it drives as the current one (:func:`current`),
so a ``model.stream`` handler executed in the same process tees its parts into it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Final

from .._errors import ZincirError
from .._json import dumps
from ..contract.payloads import PartDelta, PartEnd, PartStart, StreamPart
from ..store import Lease, NewStreamItem, Store, StreamItemRow
from ._items import MESSAGE, PART_DELTA, PART_END, PART_START, RESULT, VOID

__all__ = ["BATCH_ITEMS", "BATCH_SECONDS", "StreamWriter", "current", "live_writer"]

log = logging.getLogger("zincir.streams")

BATCH_ITEMS: Final = 64
"""Deltas committed together at most (a full batch commits at once)."""
BATCH_SECONDS: Final = 0.05
"""How long the oldest buffered delta waits for its batch's commit."""

_LIVE_KINDS: Final = frozenset({PART_START, PART_DELTA, PART_END})

_CURRENT: contextvars.ContextVar[StreamWriter | None] = contextvars.ContextVar(
    "zincir_stream_writer", default=None
)


class StreamWriter:
    """Appends a run's stream items under ``lease``; ``check`` is called before each write
    (an owner's lease check: LeaseLost once its heartbeat failed)."""

    def __init__(
        self,
        store: Store,
        lease: Lease,
        *,
        check: Callable[[], None] | None = None,
        batch: int = BATCH_ITEMS,
        interval: float = BATCH_SECONDS,
    ) -> None:
        self.store = store
        self.lease = lease
        self.run_id = lease.run_id
        self._check = check
        self._batch = batch
        self._interval = interval
        # Live items not yet committed: kind, payload, request. A delta extends the one
        # before it when both are of the same part.
        self._buffer: list[tuple[str, dict[str, Any], int]] = []
        self._buffered = 0  # deltas (as the model sent them) in the buffer
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[bool] | None = None
        # The request whose deltas are not yet closed by a ``void`` or ``message``, with the
        # offset of its last delta; None until the stream's tail was read.
        self._open: dict[int, int] | None = None
        self._tail_row: StreamItemRow | None = None
        self._tail_read = False
        self.commits = 0
        """Commits made (each a batch of items): what the batching saves is measured by it."""

    # -- the loop's side: boundary items ------------------------------------------------

    async def put(self, kind: str, payload: dict[str, Any], key: str) -> int | None:
        """Append a boundary item with the deltas buffered before it, in one durable commit;
        its offset, or None when an item with ``key`` is already in the stream (a replay)."""
        request = payload.get("request") if kind == MESSAGE else None
        async with self._lock:
            numbered = payload.get("request")
            if isinstance(numbered, int) and self._replayed(numbered, await self._tail()):
                return None  # a replayed turn's item: the stream holds it already
            item = NewStreamItem(kind, self._json(payload, kind), key)
            return await self._commit(item, closes=request if isinstance(request, int) else None)

    async def void_open(self, request: int) -> int | None:
        """Before model request ``request`` runs again: void the deltas an earlier attempt
        of it left (from this process, or a dead owner's at the stream's tail)."""
        async with self._lock:
            await self._commit(None)
            opened = await self._opened()
            last = opened.get(request)
            if last is None:
                return None
            return await self._void(request, last)

    async def result(self, payload: dict[str, Any]) -> int | None:
        """The run's last item (``result``), after voiding the deltas of a request that never
        got its message (a failed run's last attempt)."""
        async with self._lock:
            await self._commit(None)
            opened = await self._opened()
            for request, last in sorted(opened.items()):
                await self._void(request, last)
            return await self._commit(NewStreamItem(RESULT, self._json(payload, RESULT), RESULT))

    async def flush(self) -> None:
        """Commit the buffered deltas now."""
        async with self._lock:
            await self._commit(None)

    def close(self) -> None:
        """Stop the batch timer and drop what is buffered (the owner stops here)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._buffer.clear()
        self._buffered = 0

    # -- the handler's side: live deltas ------------------------------------------------

    async def add(self, request: int, kind: str, payload: dict[str, Any]) -> None:
        """Buffer a live delta of ``request``; a full batch commits now, else within
        ``interval``."""
        last = self._buffer[-1] if self._buffer else None
        if (
            kind == PART_DELTA
            and last is not None
            and last[0] == PART_DELTA
            and last[2] == request
            and last[1]["index"] == payload["index"]
        ):
            last[1]["delta"] += payload["delta"]
        else:
            self._buffer.append((kind, dict(payload), request))
        self._buffered += 1
        if self._buffered >= self._batch:
            await self.flush()
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._interval, self._flush_later)

    async def tee(
        self, request: int, parts: AsyncIterable[StreamPart]
    ) -> AsyncIterator[StreamPart]:
        """``parts`` of model request ``request``, each appended as a live delta as it goes by.

        The stream never fails the request: a write that fails is logged and this attempt
        appends no more (its ``message`` still replaces what a client built)."""
        live = await self._quietly(self.void_open(request))
        async for part in parts:
            if live:
                item = _live_item(request, part)
                if item is not None:
                    live = await self._quietly(self.add(request, *item))
            yield part

    async def _quietly(self, write: Awaitable[object]) -> bool:
        try:
            await write
        except ZincirError as error:
            log.warning("[run %s] live stream deltas not written: %s", self.run_id, error)
            self._open = None  # what was committed is unknown: read the tail again
            return False
        return True

    def _flush_later(self) -> None:
        self._timer = None
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.ensure_future(self._quietly(self.flush()))

    # -- committing ---------------------------------------------------------------------

    async def _void(self, request: int, last: int) -> int | None:
        body = self._json({"request": request}, VOID)
        return await self._commit(
            NewStreamItem(VOID, body, f"void:{request}:{last}"), closes=request
        )

    async def _commit(
        self, boundary: NewStreamItem | None, closes: int | None = None
    ) -> int | None:
        """Append the buffer (and ``boundary``, which closes request ``closes``'s deltas);
        under the lock. The boundary's offset (None: none, or its key was there)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending = [
            (NewStreamItem(kind, self._json(payload, kind)), request)
            for kind, payload, request in self._buffer
        ]
        self._buffer, self._buffered = [], 0
        items = [item for item, _ in pending]
        if boundary is not None:
            items.append(boundary)
        if not items:
            return None
        if self._check is not None:
            self._check()
        offsets = await self.store.append_stream(self.lease, items, durable=boundary is not None)
        self.commits += 1
        if self._open is not None:
            for (item, request), offset in zip(pending, offsets, strict=False):
                if item.kind in _LIVE_KINDS:
                    self._open[request] = offset
        if self._open is not None and closes is not None:
            self._open.pop(closes, None)
        if boundary is None or len(offsets) <= len(pending):
            return None
        return offsets[-1]

    async def _opened(self) -> dict[int, int]:
        """The requests with open deltas: read from the stream's tail once per writer."""
        if self._open is None:
            self._open = {}
            tail = await self.store.stream_tail(self.run_id)  # afresh after a failed write
            if not self._tail_read:
                self._tail_row, self._tail_read = tail, True
            if tail is not None and tail.kind in _LIVE_KINDS:
                request = _request_of(tail.payload_json)
                if request is not None:
                    self._open[request] = tail.offset
        return self._open

    async def _tail(self) -> StreamItemRow | None:
        """The stream's last item when this writer began: read once, then remembered."""
        if not self._tail_read:
            self._tail_row = await self.store.stream_tail(self.run_id)
            self._tail_read = True
        return self._tail_row

    @staticmethod
    def _replayed(request: int, tail: StreamItemRow | None) -> bool:
        """Whether every item of model request ``request`` was in the stream before this
        writer began: one owner appends a run's items in the loop's order, so an item of a
        request before the one of the stream's last item is there (a replay of a long run
        writes nothing for its turns; the tail's own request still goes by its keys)."""
        last = None if tail is None else _request_of(tail.payload_json)
        return last is not None and request < last

    def _json(self, payload: dict[str, Any], kind: str) -> str:
        return dumps(payload, what=f"a {kind} stream item", run_id=self.run_id)


def _request_of(payload_json: str) -> int | None:
    """The ``request`` of an item's JSON payload."""
    try:
        request = json.loads(payload_json).get("request")
    except (ValueError, AttributeError):
        return None
    return request if isinstance(request, int) else None


def _live_item(request: int, part: StreamPart) -> tuple[str, dict[str, Any]] | None:
    """A stream part as a live item (kind, payload); usage is not one."""
    if isinstance(part, PartStart):
        payload: dict[str, Any] = {"request": request, "index": part.index}
        payload["part_kind"] = part.part_kind
        if part.tool_call_id is not None:
            payload["tool_call_id"] = part.tool_call_id
        if part.tool_name is not None:
            payload["tool_name"] = part.tool_name
        return PART_START, payload
    if isinstance(part, PartDelta):
        return PART_DELTA, {"request": request, "index": part.index, "delta": part.delta}
    if isinstance(part, PartEnd):
        return PART_END, {"request": request, "index": part.index}
    return None


def current() -> StreamWriter | None:
    """The stream writer of the run the current task's agent loop drives, if any."""
    return _CURRENT.get()


def live_writer(run_id: str) -> StreamWriter | None:
    """The current writer when it writes ``run_id``'s stream (a handler executed in the
    process of that run's loop), else None."""
    writer = _CURRENT.get()
    return writer if writer is not None and writer.run_id == run_id else None


@contextlib.contextmanager
def writing(writer: StreamWriter | None) -> Iterator[None]:
    """Make ``writer`` the current one for the block (None: no stream); on an error the
    writer stops, dropping its buffer."""
    token = _CURRENT.set(writer)
    try:
        yield
    except BaseException:
        if writer is not None:
            writer.close()
        raise
    finally:
        _CURRENT.reset(token)
