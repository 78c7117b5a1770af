"""A run's durable stream: the ``stream_items`` table behind ``zincir.streams``, and the
``run_traces`` table that keeps a run in one OpenTelemetry trace across processes.

An append is fenced by the run's lease and gives its items the run's next offsets (1, 2, 3
... gapless as written), in order; an item whose key the run's stream already holds is
skipped without using an offset, so a replay that appends a keyed item again appends
nothing. Appends to one run go one at a time (on PostgreSQL an advisory lock per run, taken
after the fence; SQLite runs one writer), so two appenders under one lease never take the
same offset. Compaction may later drop the deltas of model requests whose ``message`` item
exists: readers accept the gaps. A PostgreSQL trigger (migration 0011) wakes the run's
readers at COMMIT; SQLite's readers poll.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any, Final

from .._errors import InvalidInput
from .._json import dumps
from .._time import from_db
from .._validate import check_count, check_id, check_sequence, name_problem
from ._approval_checks import check_json_object
from ._fence import check_fence
from ._records import Lease, TimeDecoder, driver_time
from ._sql import Rules, Sql, Tx, sql

if TYPE_CHECKING:
    from ._readonly_queries import ReadTx

__all__ = [
    "DELTA_KINDS",
    "STREAM_COLUMNS",
    "NewStreamItem",
    "StreamItemRow",
    "StreamOps",
    "StreamReads",
    "append_items",
    "append_stream",
    "drop_stream_deltas",
    "end_stream",
    "stream_row",
]

DELTA_KINDS: Final = ("part_start", "part_delta", "part_end", "void")
"""The kinds of a model request's live deltas, which compaction drops once the request's
``message`` item (key ``message:{request}``) is stored."""

STREAM_COLUMNS: Final = "run_id, seq, kind, item_key, payload, created_at"
"""The ``stream_items`` columns :func:`stream_row` reads, in order."""

RESULT: Final = "result"
"""The kind (and key) of a run's last stream item."""
MAX_KEY_BYTES: Final = 1024
_LOCKS: Final = 2054386802  # the advisory lock space of streams ("zstr")
_TRACEPARENT: Final = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


@dataclass(frozen=True, slots=True)
class NewStreamItem:
    """An item to append to a run's stream: its kind, its payload (a JSON object's text)
    and, for an item a replay may append again, a key stored once per run."""

    kind: str
    payload_json: str
    key: str | None = None


@dataclass(frozen=True, slots=True)
class StreamItemRow:
    """One stored item of a run's stream, at its offset."""

    run_id: str
    offset: int
    kind: str
    key: str | None
    payload_json: str
    created_at: datetime


def stream_row(row: Sequence[Any], time: TimeDecoder = driver_time) -> StreamItemRow:
    """A stream item selected as :data:`STREAM_COLUMNS`."""
    run_id, seq, kind, key, payload, created_at = row
    return StreamItemRow(run_id, int(seq), kind, key, payload, time(created_at))


_LAST: Final = sql("SELECT seq FROM stream_items WHERE run_id = ? ORDER BY seq DESC LIMIT 1")
_KNOWN: Final = sql("SELECT item_key FROM stream_items WHERE run_id = ? AND item_key {in_list}")
_CHUNK: Final = 100  # rows per INSERT statement
_PAYLOAD: Final = 4  # the position of ``payload`` among STREAM_COLUMNS


@lru_cache(maxsize=_CHUNK)
def _insert(count: int) -> Sql:
    """One INSERT of ``count`` items: one statement (and on PostgreSQL one wake-up trigger
    call) per batch, not per item."""
    values = ", ".join(["(?, ?, ?, ?, ?, zincir_now())"] * count)
    payloads = tuple(range(_PAYLOAD, 5 * count, 5))
    return sql(f"INSERT INTO stream_items ({STREAM_COLUMNS}) VALUES {values}", seals=payloads)


_READ: Final = sql(
    f"SELECT {STREAM_COLUMNS} FROM stream_items WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
    opens=(_PAYLOAD,),
    run_param=0,
)
_TAIL: Final = sql(
    f"SELECT {STREAM_COLUMNS} FROM stream_items WHERE run_id = ? ORDER BY seq DESC LIMIT 1",
    opens=(_PAYLOAD,),
    run_param=0,
)
_SAVE_TRACE: Final = sql(
    "INSERT INTO run_traces (run_id, traceparent, created_at) VALUES (?, ?, zincir_now()) "
    "ON CONFLICT (run_id) DO NOTHING"
)
_LOAD_TRACE: Final = sql("SELECT traceparent FROM run_traces WHERE run_id = ?")
_DELTAS: Final = "('" + "', '".join(DELTA_KINDS) + "')"
_DELTA_BOUNDS: Final = sql(
    "SELECT min(seq), (SELECT max(seq) FROM stream_items WHERE run_id = ? AND kind = 'message') "
    f"FROM stream_items WHERE run_id = ? AND kind IN {_DELTAS}"
)
_DROP: Final = sql(
    "DELETE FROM stream_items AS d WHERE d.run_id = ? AND d.seq > ? AND d.seq <= ? "
    f"AND d.kind IN {_DELTAS} AND EXISTS (SELECT 1 FROM stream_items AS m "
    "WHERE m.run_id = d.run_id AND m.item_key = 'message:' || {json_field:d.payload} "
    "AND m.kind = 'message' AND m.seq > d.seq) RETURNING 1"
)
_WINDOW_DELTAS: Final = sql(
    "SELECT seq, payload FROM stream_items WHERE run_id = ? AND seq > ? AND seq <= ? "
    f"AND kind IN {_DELTAS}",
    opens=(1,),
    run_param=0,
)
_LAST_MESSAGES: Final = sql(
    "SELECT item_key, max(seq) FROM stream_items WHERE run_id = ? AND kind = 'message' "
    "AND seq > ? GROUP BY item_key"
)
_DROP_ONE: Final = sql("DELETE FROM stream_items WHERE run_id = ? AND seq = ?")


def checked_items(run_id: str, items: Sequence[NewStreamItem]) -> list[NewStreamItem]:
    """``items`` to append to ``run_id``'s stream, else InvalidInput naming the problem:
    a kind is a name, a payload one JSON object, a key None or a name."""
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise InvalidInput(
            f"stream items must be a sequence of NewStreamItem, not {type(items).__name__}",
            run_id=run_id,
        )
    checked = []
    for index, item in enumerate(items):
        if not isinstance(item, NewStreamItem):
            raise InvalidInput(
                f"stream item {index} must be a NewStreamItem, not {type(item).__name__}",
                run_id=run_id,
            )
        check_id(item.kind, f"the kind of stream item {index}", run_id=run_id)
        check_json_object(item.payload_json, f"the payload of stream item {index}", run_id)
        if item.key is not None:
            problem = name_problem(
                f"the key of stream item {index}", item.key, max_bytes=MAX_KEY_BYTES
            )
            if problem is not None:
                raise InvalidInput(problem, run_id=run_id)
        checked.append(item)
    return checked


def append_stream(tx: Tx, lease: Lease, items: Sequence[NewStreamItem]) -> list[int]:
    """Append ``items`` (checked) to the lease's run's stream, fenced; the offsets given,
    in order, leaving out the items whose key the stream (or an earlier item) holds."""
    check_fence(tx, lease)
    return append_items(tx, lease.run_id, items)


def end_stream(tx: Tx, run_id: str, payload: dict[str, object]) -> int | None:
    """Append the ``result`` item (key ``result``) to the stream of ``run_id``, whose row
    the caller holds (cancelling it), when that stream has items: a run that never streamed
    gets none. Its offset, or None (no stream, or its ``result`` is there already)."""
    tx.lock(_LOCKS, [run_id], exclusive=True)
    if tx.one(_LAST, (run_id,)) is None:
        return None
    body = dumps(payload, what="a result stream item", run_id=run_id)
    offsets = append_items(tx, run_id, [NewStreamItem(RESULT, body, RESULT)])
    return offsets[0] if offsets else None


def append_items(tx: Tx, run_id: str, items: Sequence[NewStreamItem]) -> list[int]:
    """Append ``items`` (checked) to ``run_id``'s stream under the fence (or row lock) the
    caller took; the offsets given, as :func:`append_stream` says."""
    tx.lock(_LOCKS, [run_id], exclusive=True)  # appends to one run go one at a time
    keys = [item.key for item in items if item.key is not None]
    seen: set[str] = set()
    if keys:
        seen = {str(key) for (key,) in tx.all(_KNOWN, (run_id, tx.values(keys)))}
    last = tx.one(_LAST, (run_id,))
    offset = 0 if last is None else int(last[0])
    params: list[object] = []
    offsets = []
    for item in items:
        if item.key is not None:
            if item.key in seen:
                continue
            seen.add(item.key)
        offset += 1
        params += (run_id, offset, item.kind, item.key, item.payload_json)
        offsets.append(offset)
    width = 5 * _CHUNK
    for start in range(0, len(params), width):
        chunk = params[start : start + width]
        tx.execute(_insert(len(chunk) // 5), chunk)
    return offsets


def _save_trace(tx: Tx, run_id: str, traceparent: str) -> str:
    tx.execute(_SAVE_TRACE, (run_id, traceparent))
    stored = tx.one(_LOAD_TRACE, (run_id,))
    assert stored is not None, "saved above, or by whoever saved it first"
    return str(stored[0])


def _drop_window(tx: Tx, run_id: str, low: int, high: int) -> int:
    """Drop the run's deltas with low < seq <= high of requests whose message follows."""
    if tx.sealer is None:
        return len(tx.all(_DROP, (run_id, low, high, "request")))
    # Sealed payloads: each delta's request is read here, once opened.
    found = tx.all(_LAST_MESSAGES, (run_id, low))
    last_message = {str(key): int(seq) for key, seq in found if key is not None}
    dropped = [
        (run_id, seq)
        for seq, payload in tx.all(_WINDOW_DELTAS, (run_id, low, high))
        if last_message.get(_message_key(payload) or "", 0) > seq
    ]
    tx.executemany(_DROP_ONE, dropped)
    return len(dropped)


def _message_key(payload: str) -> str | None:
    """The key of the ``message`` item of the request a delta's ``payload`` names, as
    ``_DROP``'s SQL reads it (a text or integer ``request`` field)."""
    try:
        request = json.loads(payload).get("request")
    except (ValueError, AttributeError):
        return None
    if isinstance(request, str) or (isinstance(request, int) and not isinstance(request, bool)):
        return f"message:{request}"
    return None


async def drop_stream_deltas(rules: Rules, run_id: str, max_events: int) -> int:
    """Drop the delta items (:data:`DELTA_KINDS`) of the run's model requests whose
    ``message`` item is stored after them, in transactions of about ``max_events`` offsets
    each; how many were dropped. Every other item stays."""
    found = await rules._read_tx(lambda tx: tx.one(_DELTA_BOUNDS, (run_id, run_id)))
    if found is None or found[0] is None or found[1] is None:
        return 0
    low, last, dropped = int(found[0]) - 1, int(found[1]), 0
    while low < last:
        high = min(low + max_events, last)
        dropped += await rules._write_tx(partial(_drop_window, run_id=run_id, low=low, high=high))
        low = high
    return dropped


class StreamOps(Rules):
    """Append to and read a run's durable stream; keep a run's trace context."""

    async def append_stream(
        self, lease: Lease, items: Sequence[NewStreamItem], *, durable: bool = True
    ) -> list[int]:
        """Append ``items`` to the lease's run's stream (fenced: FencedOut, RunTerminal,
        RunNotFound with nothing stored), giving them the next offsets in order; an item
        whose key the stream holds is skipped. The offsets given; ``durable=False`` (deltas)
        may commit without waiting for the disk."""
        batch = checked_items(lease.run_id, items)
        if not batch:
            return []
        return await self._write_tx(lambda tx: append_stream(tx, lease, batch), durable=durable)

    async def read_stream(self, run_id: str, after: int, limit: int = 500) -> list[StreamItemRow]:
        """The run's items with an offset above ``after``, in order, at most ``limit``."""
        check_id(run_id)
        check_sequence(after, "after", run_id=run_id)
        check_count(limit, "limit", run_id=run_id)

        def read(tx: Tx) -> list[StreamItemRow]:
            return [stream_row(row, tx.time) for row in tx.all(_READ, (run_id, after, limit))]

        return await self._read_tx(read)

    async def stream_tail(self, run_id: str) -> StreamItemRow | None:
        """The run's last stream item, or None."""
        check_id(run_id)

        def read(tx: Tx) -> StreamItemRow | None:
            row = tx.one(_TAIL, (run_id,))
            return None if row is None else stream_row(row, tx.time)

        return await self._read_tx(read)

    async def save_trace_context(self, run_id: str, traceparent: str) -> str:
        """Keep ``traceparent`` (W3C) as the run's trace unless it has one; the stored one."""
        check_id(run_id)
        if not isinstance(traceparent, str) or not _TRACEPARENT.fullmatch(traceparent):
            raise InvalidInput(
                f"traceparent must be a W3C traceparent such as '00-<32 hex>-<16 hex>-01', "
                f"not {traceparent!r}",
                run_id=run_id,
            )
        return await self._write_tx(lambda tx: _save_trace(tx, run_id, traceparent))

    async def load_trace_context(self, run_id: str) -> str | None:
        """The run's stored traceparent, or None."""
        check_id(run_id)

        def read(tx: Tx) -> str | None:
            row = tx.one(_LOAD_TRACE, (run_id,))
            return None if row is None else str(row[0])

        return await self._read_tx(read)


class StreamReads:
    """A run's stream as the read-only view shows it, written once for every backend; a
    database without the table (an older schema) reads as having no items."""

    _tx: ReadTx
    _tables: frozenset[str]

    def read_stream(self, run_id: str, after: int = 0, limit: int = 500) -> list[StreamItemRow]:
        """The run's items with an offset above ``after``, in order, at most ``limit``."""
        if "stream_items" not in self._tables:
            return []
        check_sequence(after, "after", run_id=run_id)
        check_count(limit, "limit", run_id=run_id)
        rows = self._tx.all(_READ, (run_id, after, limit))
        return [stream_row(row, _stored_time) for row in rows]

    def stream_tail(self, run_id: str) -> StreamItemRow | None:
        """The run's last stream item, or None."""
        if "stream_items" not in self._tables:
            return None
        row = self._tx.one(_TAIL, (run_id,))
        return None if row is None else stream_row(row, _stored_time)


def _stored_time(value: Any) -> datetime:
    """A time as either read-only connection returns it: SQLite's text, PostgreSQL's
    timestamptz."""
    return value if isinstance(value, datetime) else from_db(str(value))
