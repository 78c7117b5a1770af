"""LangGraph checkpoints: the ``langgraph_*`` tables behind ``zincir.integrations.langgraph``.

Every write that changes a thread first passes :func:`_fence` in its own transaction: under
a lease the lease's owner and token must still be the thread's (FencedOut otherwise, and the
lease is extended); without one, no other owner may hold a live lease (LeaseHeld). A refused
write stores nothing. A checkpoint is one transaction, and so are a task's writes. On
SQLite's blocking path (``*_here``) an unleased checkpoint, and a task's unleased writes that
replace none, carry the fence's test inside their insert instead, one statement in its own
transaction; when it stored nothing, the fenced transaction runs and raises LeaseHeld (or
stores it, the lease having expired meanwhile).

Where writers run side by side (PostgreSQL), each transaction first locks its threads
(:meth:`Tx.lock`): shared for a put of a checkpoint or of writes, exclusive for what reads a
thread to decide (taking its lease, copying, pruning, deleting). The unleased fence also
locks the lease row (``{for_share}``), so a holder cannot revive an expired lease under it;
a leased fence's ``UPDATE`` locks the row. Ids compare and sort as bytes (``{bytewise}``)
on every backend. Callers check ids and serialize values before they call.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from datetime import timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final

from .._time import to_db
from ._graph_filters import matches, metadata_where, unparsed
from ._graph_rules import (
    checkpoint_params,
    copy_refused,
    lease_for,
    lease_held,
    thread_fenced_out,
    write_params,
)
from ._langgraph_records import (
    GRAPH_ROW_COLUMNS,
    GraphCheckpointQuery,
    GraphCheckpointRow,
    GraphWrite,
    NewGraphCheckpoint,
    ThreadLease,
    graph_checkpoint_row,
    graph_write,
)
from ._sql import Rules, Sql, Tx, micros, sql

if TYPE_CHECKING:
    from .._encryption import Sealer

__all__ = ["LangGraphOps"]

_LOCKS: Final = 2053924722  # the lock space of threads ("zlgr")

# -- thread leases ------------------------------------------------------------------------

_LEASE: Final = (
    "SELECT owner, token, expires_at, owner IS NOT NULL AND expires_at > zincir_now() "
    "FROM langgraph_thread_leases WHERE thread_id = ?"
)
_HELD: Final = sql(_LEASE + "{for_share}")
_HELD_TO_TAKE: Final = sql(_LEASE + "{for_update}")
_HOLDER: Final = sql("SELECT owner, token FROM langgraph_thread_leases WHERE thread_id = ?")
_EXTEND: Final = sql(
    "UPDATE langgraph_thread_leases SET expires_at = {now_plus}, updated_at = zincir_now() "
    "WHERE thread_id = ? AND owner = ? AND token = ? RETURNING 1"
)
_RELEASE: Final = sql(
    "UPDATE langgraph_thread_leases SET owner = NULL, expires_at = NULL, "
    "updated_at = zincir_now() WHERE thread_id = ? AND owner = ? AND token = ? RETURNING 1"
)
_TAKE: Final = sql(
    "INSERT INTO langgraph_thread_leases (thread_id, owner, token, expires_at, updated_at) "
    "VALUES (?, ?, ?, {now_plus}, zincir_now()) ON CONFLICT (thread_id) DO UPDATE SET "
    "owner = excluded.owner, token = excluded.token, expires_at = excluded.expires_at, "
    "updated_at = excluded.updated_at"
)

# -- checkpoints and writes ---------------------------------------------------------------

_CHECKPOINT_COLUMNS: Final = (
    "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, type, "
    "checkpoint, metadata, created_at"
)
_PUT_CHECKPOINT: Final = sql(
    f"INSERT INTO langgraph_checkpoints ({_CHECKPOINT_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, zincir_now()) "
    "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
    "parent_checkpoint_id = excluded.parent_checkpoint_id, run_id = excluded.run_id, "
    "type = excluded.type, checkpoint = excluded.checkpoint, metadata = excluded.metadata",
    seals=(6, 7),
)
_WRITE_COLUMNS: Final = (
    "thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, value, task_path, "
    "created_at"
)
_WRITE_KEY: Final = "(thread_id, checkpoint_ns, checkpoint_id, task_id, idx)"
_PUT_WRITE: Final = (
    f"INSERT INTO langgraph_writes ({_WRITE_COLUMNS}) "
    f"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, zincir_now()) ON CONFLICT {_WRITE_KEY} "
)
_KEEP_WRITE: Final = sql(_PUT_WRITE + "DO NOTHING", seals=(7,))
_REPLACE_WRITE: Final = sql(
    _PUT_WRITE + "DO UPDATE SET channel = excluded.channel, type = excluded.type, "
    "value = excluded.value, task_path = excluded.task_path",
    seals=(7,),
)
# SQLite's blocking path (``*_here``): without a lease the fence's test rides in the
# checkpoint's upsert itself. PostgreSQL keeps the read, which locks the lease row. The
# store's time is a bound parameter (``_stamp_here``), not ``zincir_now()``: a Python SQL
# function would take the GIL back in the middle of the statement, from LangGraph's threads.
_UNLEASED: Final = (
    "WHERE NOT EXISTS (SELECT 1 FROM langgraph_thread_leases WHERE thread_id = ? "
    "AND owner IS NOT NULL AND expires_at > ?) "
)
_PUT_CHECKPOINT_UNLEASED: Final = sql(
    f"INSERT INTO langgraph_checkpoints ({_CHECKPOINT_COLUMNS}) "
    f"SELECT ?, ?, ?, ?, ?, ?, ?, ?, ? {_UNLEASED}"
    "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
    "parent_checkpoint_id = excluded.parent_checkpoint_id, run_id = excluded.run_id, "
    "type = excluded.type, checkpoint = excluded.checkpoint, metadata = excluded.metadata",
    seals=(6, 7),
)
"""An unleased checkpoint in one statement (its own transaction: ``_write_alone_here``);
params: :func:`checkpoint_params`, the time, the thread id, the time. No row changed means
refused, or the statement did not run: the fenced transaction tells."""


@lru_cache(maxsize=16)
def _keep_writes_unleased(count: int) -> Sql:
    """``count`` unleased writes kept at a stored (task, idx), in one statement (its own
    transaction: ``_write_alone_here``) with the fence's test; params: the time, the rows'
    values, the thread id, the time. No row changed: refused, all stored already, or not
    run."""
    rows = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * count)
    columns = ", ".join(f"column{k}" for k in range(1, 10))
    return sql(
        f"INSERT INTO langgraph_writes ({_WRITE_COLUMNS}) SELECT {columns}, ? "
        f"FROM (VALUES {rows}) {_UNLEASED}ON CONFLICT {_WRITE_KEY} DO NOTHING",
        seals=tuple(8 + 9 * k for k in range(count)),
    )


_ALONE_WRITES: Final = 16  # the most unleased writes put in one statement


_WRITE_ORDER: Final = "ORDER BY w.task_path{bytewise}, w.task_id{bytewise}, w.idx"
_WRITES_READ: Final = "w.task_id, w.idx, w.channel, w.type, w.value, w.task_path"
_WRITES: Final = sql(
    f"SELECT {_WRITES_READ} FROM langgraph_writes AS w WHERE w.thread_id = ? "
    f"AND w.checkpoint_ns = ? AND w.checkpoint_id = ? {_WRITE_ORDER}",
    opens=(4,),
)
_WRITES_OF: Final = sql(
    f"SELECT w.thread_id, w.checkpoint_ns, w.checkpoint_id, {_WRITES_READ} "
    "FROM {json_items} AS k JOIN langgraph_writes AS w ON w.thread_id = (k.value ->> 0) "
    "AND w.checkpoint_ns = (k.value ->> 1) AND w.checkpoint_id = (k.value ->> 2) "
    f"{_WRITE_ORDER}",
    opens=(7,),
)
_SELECT: Final = f"SELECT {GRAPH_ROW_COLUMNS} FROM langgraph_checkpoints "
_VALUE, _META = 5, 6  # the positions of ``checkpoint`` and ``metadata`` in GRAPH_ROW_COLUMNS
_GET: Final = sql(
    _SELECT + "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
    opens=(_VALUE, _META),
)
_GET_NEWEST: Final = sql(
    _SELECT + "WHERE thread_id = ? AND checkpoint_ns = ? "
    "ORDER BY checkpoint_id{bytewise} DESC LIMIT 1",
    opens=(_VALUE, _META),
)
_NEWEST_FIRST: Final = (
    "ORDER BY checkpoint_id{bytewise} DESC, thread_id{bytewise} DESC, checkpoint_ns{bytewise} DESC"
)
_AFTER: Final = (
    "(checkpoint_id{bytewise}, thread_id{bytewise}, checkpoint_ns{bytewise}) < (?, ?, ?)"
)

# -- copies and deletes -------------------------------------------------------------------

_TAKEN: Final = sql("SELECT 1 FROM langgraph_checkpoints WHERE thread_id = ? LIMIT 1")
_COPY_CHECKPOINTS: Final = sql(
    f"INSERT INTO langgraph_checkpoints ({_CHECKPOINT_COLUMNS}) SELECT CAST(? AS text), "
    "checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, type, checkpoint, metadata, "
    "zincir_now() FROM langgraph_checkpoints WHERE thread_id = ? RETURNING 1"
)
_COPY_WRITES: Final = sql(
    f"INSERT INTO langgraph_writes ({_WRITE_COLUMNS}) SELECT CAST(? AS text), checkpoint_ns, "
    "checkpoint_id, task_id, idx, channel, type, value, task_path, zincir_now() "
    f"FROM langgraph_writes WHERE thread_id = ? ON CONFLICT {_WRITE_KEY} DO NOTHING"
)
_DELETE_THREAD_WRITES: Final = sql("DELETE FROM langgraph_writes WHERE thread_id = ?")
_DELETE_THREAD: Final = sql("DELETE FROM langgraph_checkpoints WHERE thread_id = ? RETURNING 1")
_RUN_THREADS: Final = sql(
    "SELECT DISTINCT thread_id FROM langgraph_checkpoints WHERE run_id {in_list}"
)
_OF_RUNS: Final = "WHERE run_id {in_list} AND thread_id {in_list}"
_DELETE_RUN_WRITES: Final = sql(
    "DELETE FROM langgraph_writes WHERE (thread_id, checkpoint_ns, checkpoint_id) IN "
    f"(SELECT thread_id, checkpoint_ns, checkpoint_id FROM langgraph_checkpoints {_OF_RUNS})"
)
_DELETE_RUNS: Final = sql(f"DELETE FROM langgraph_checkpoints {_OF_RUNS} RETURNING 1")
_NEWEST_PER_NS: Final = sql(
    "SELECT checkpoint_ns, MAX(checkpoint_id{bytewise}) FROM langgraph_checkpoints "
    "WHERE thread_id = ? GROUP BY checkpoint_ns"
)
_METADATA: Final = sql(
    "SELECT metadata FROM langgraph_checkpoints "
    "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
    opens=(0,),
)
_CHAIN: Final = sql(
    "WITH RECURSIVE chain(id, depth) AS (SELECT CAST(? AS text), 0 UNION ALL "
    "SELECT cp.parent_checkpoint_id, chain.depth + 1 FROM chain "
    "JOIN langgraph_checkpoints AS cp ON cp.thread_id = ? AND cp.checkpoint_ns = ? "
    "AND cp.checkpoint_id = chain.id "
    "WHERE chain.depth < ? AND cp.parent_checkpoint_id IS NOT NULL) SELECT id FROM chain"
)
_PRUNED: Final = "WHERE thread_id = ? AND checkpoint_ns = ? AND NOT (checkpoint_id {in_list})"
_PRUNE_WRITES: Final = sql(f"DELETE FROM langgraph_writes {_PRUNED}")
_PRUNE: Final = sql(f"DELETE FROM langgraph_checkpoints {_PRUNED} RETURNING 1")


# -- fencing ------------------------------------------------------------------------------


def _fence(tx: Tx, thread_id: str, lease: ThreadLease | None) -> None:
    """Raise unless this write may change ``thread_id`` (see the module docstring)."""
    if lease is None:
        held = tx.one(_HELD, (thread_id,))
        if held is not None and held[3]:
            owner, token, expires_at, _ = held
            raise lease_held(thread_id, owner, token, to_db(tx.time(expires_at)), taking=False)
        return
    if tx.one(_EXTEND, (micros(lease.ttl), thread_id, lease.owner, lease.token)) is None:
        raise thread_fenced_out(thread_id, lease, tx.one(_HOLDER, (thread_id,)))


def _acquire(tx: Tx, thread_id: str, owner: str, ttl: timedelta, force: bool) -> ThreadLease:
    """Take the thread's lease with the next token (LeaseHeld while another owner's lease is
    live, unless ``force``)."""
    tx.lock(_LOCKS, [thread_id], exclusive=True)
    row = tx.one(_HELD_TO_TAKE, (thread_id,))
    if row is not None:
        held_by, token, expires_at, live = row
        if live and held_by != owner and not force:
            raise lease_held(thread_id, held_by, token, to_db(tx.time(expires_at)), taking=True)
    lease = ThreadLease(thread_id, owner, (int(row[1]) if row is not None else 0) + 1, ttl)
    tx.execute(_TAKE, (thread_id, owner, lease.token, micros(ttl)))
    return lease


def _fenced(tx: Tx, threads: Iterable[str], leases: Sequence[ThreadLease]) -> None:
    """Lock ``threads`` to decide on them, and fence each by its lease among ``leases``."""
    ordered = sorted(set(threads))
    tx.lock(_LOCKS, ordered, exclusive=True)
    for thread_id in ordered:
        _fence(tx, thread_id, lease_for(thread_id, leases))


# -- writing ------------------------------------------------------------------------------


def _put_checkpoint(tx: Tx, params: tuple[Any, ...], lease: ThreadLease | None) -> None:
    """Store a checkpoint given as :func:`checkpoint_params` (its thread id first)."""
    tx.lock(_LOCKS, [params[0]], exclusive=False)
    _fence(tx, params[0], lease)
    tx.execute(_PUT_CHECKPOINT, params)


def _put_writes(
    tx: Tx,
    thread_id: str,
    kept: Sequence[tuple[Any, ...]],
    replacing: Sequence[tuple[Any, ...]],
    lease: ThreadLease | None,
) -> None:
    """Store a task's writes: kept ones first, then the special channels' replacements (each
    (task, idx) is either, so every key keeps its own order)."""
    tx.lock(_LOCKS, [thread_id], exclusive=False)
    _fence(tx, thread_id, lease)
    if kept:
        tx.executemany(_KEEP_WRITE, kept)
    if replacing:
        tx.executemany(_REPLACE_WRITE, replacing)


def _split(rows: list[tuple[bool, tuple[Any, ...]]]) -> tuple[list[Any], list[Any]]:
    """:func:`write_params`' rows as (kept, replacing) parameter lists."""
    return [p for r, p in rows if not r], [p for r, p in rows if r]


def _delete_thread(tx: Tx, thread_id: str) -> int:
    tx.execute(_DELETE_THREAD_WRITES, (thread_id,))
    return len(tx.all(_DELETE_THREAD, (thread_id,)))


def _copy(tx: Tx, source: str, target: str, lease: ThreadLease | None) -> int:
    """Copy ``source`` onto the empty ``target``; both locked, so the checkpoints and the
    writes copied are of one moment of the source."""
    tx.lock(_LOCKS, [source, target], exclusive=True)
    _fence(tx, target, lease)
    copy_refused(source, target, target_taken=tx.one(_TAKEN, (target,)) is not None)
    copied = len(tx.all(_COPY_CHECKPOINTS, (target, source)))
    tx.execute(_COPY_WRITES, (target, source))
    return copied


def _delete_runs(tx: Tx, run_ids: Sequence[str], leases: Sequence[ThreadLease]) -> int:
    """Delete the checkpoints of ``run_ids`` in the threads found and fenced: a checkpoint of
    these runs another thread committed meanwhile is left, as if it came after."""
    runs = tx.values(run_ids)
    threads = sorted({str(thread_id) for (thread_id,) in tx.all(_RUN_THREADS, (runs,))})
    if not threads:
        return 0
    _fenced(tx, threads, leases)
    scope = (runs, tx.values(threads))
    tx.execute(_DELETE_RUN_WRITES, scope)
    return len(tx.all(_DELETE_RUNS, scope))


def _delta_depth(metadata: str | None) -> int:
    """How many super-steps back the newest snapshot of any delta channel is: the largest
    ``counters_since_delta_snapshot`` count in the metadata (0 without one); read in Python,
    so metadata PostgreSQL's JSON parser refuses is read too."""
    try:
        found = json.loads(metadata) if metadata is not None else None
    except ValueError:
        return 0
    counters = found.get("counters_since_delta_snapshot") if isinstance(found, dict) else None
    items = counters.values() if isinstance(counters, dict) else counters
    if not isinstance(items, Iterable) or isinstance(items, str):
        return 0
    return max(
        (
            int(item[1])
            for item in items
            if isinstance(item, list)
            and len(item) > 1
            and isinstance(item[1], int | float)
            and math.isfinite(item[1])
        ),
        default=0,
    )


def _kept_chain(tx: Tx, thread_id: str, ns: str, latest: str) -> list[str]:
    """The newest checkpoint and the ancestors its delta channels still replay from.

    A LangGraph ``DeltaChannel`` is rebuilt from the writes along the parent chain back to
    its last snapshot; the newest checkpoint's ``counters_since_delta_snapshot`` says how
    many super-steps back that is, so the chain is kept that deep (deeper is safe).
    """
    row = tx.one(_METADATA, (thread_id, ns, latest))
    depth = _delta_depth(None if row is None else str(row[0]))
    if depth <= 0:
        return [latest]
    return [str(found) for (found,) in tx.all(_CHAIN, (latest, thread_id, ns, depth))]


def _keep_latest(tx: Tx, thread_id: str) -> int:
    removed = 0
    for ns, newest in tx.all(_NEWEST_PER_NS, (thread_id,)):
        kept = tx.values(_kept_chain(tx, thread_id, str(ns), str(newest)))
        tx.execute(_PRUNE_WRITES, (thread_id, ns, kept))
        removed += len(tx.all(_PRUNE, (thread_id, ns, kept)))
    return removed


def _prune(tx: Tx, threads: list[str], keep_latest: bool, leases: Sequence[ThreadLease]) -> int:
    _fenced(tx, threads, leases)
    return sum(
        _keep_latest(tx, thread_id) if keep_latest else _delete_thread(tx, thread_id)
        for thread_id in threads
    )


# -- reading ------------------------------------------------------------------------------


def _rows(tx: Tx, found: Sequence[tuple[Any, ...]]) -> list[GraphCheckpointRow]:
    """Checkpoints (selected as ``GRAPH_ROW_COLUMNS``) with their writes, read in one
    statement."""
    if len(found) == 1:
        writes = tuple(graph_write(row) for row in tx.all(_WRITES, found[0][:3]))
        return [graph_checkpoint_row(found[0], writes, tx.time)]
    keys = [(str(row[0]), str(row[1]), str(row[2])) for row in found]
    by_key: dict[tuple[str, str, str], list[GraphWrite]] = {}
    if keys:
        for row in tx.all(_WRITES_OF, (json.dumps(keys, ensure_ascii=False),)):
            by_key.setdefault((row[0], row[1], row[2]), []).append(graph_write(row[3:]))
    return [
        graph_checkpoint_row(row, tuple(by_key.get(key, ())), tx.time)
        for key, row in zip(keys, found, strict=True)
    ]


def _get(tx: Tx, thread_id: str, ns: str, checkpoint_id: str | None) -> GraphCheckpointRow | None:
    if checkpoint_id is None:
        found = tx.one(_GET_NEWEST, (thread_id, ns))
    else:
        found = tx.one(_GET, (thread_id, ns, checkpoint_id))
    return None if found is None else _rows(tx, [found])[0]


@lru_cache(maxsize=128)
def _statement(text: str, opens: tuple[int, ...]) -> Sql:
    """A listing's statement, built once per shape."""
    return sql(text, opens=opens)


_SEALED_PAGE: Final = 512
"""The most rows a listing of an encrypted store reads per page while it filters by
metadata (its pages double from what the limit still wants)."""


def _list(
    tx: Tx, query: GraphCheckpointQuery, where: tuple[str, list[Any]] | None
) -> list[GraphCheckpointRow]:
    """The checkpoints ``query`` selects (``where``: its metadata test), page by page while
    rows the SQL let through unjudged fail the test in Python. In an encrypted store every
    row's metadata is judged in Python, and only kept rows' values are opened."""
    sealer = tx.sealer
    judged_here = sealer is not None and where is not None
    opens = (_META,) if judged_here else (_VALUE, _META)
    tests: list[str] = []
    params: list[Any] = []
    for test, value in (
        ("thread_id = ?", query.thread_id),
        ("checkpoint_ns = ?", query.checkpoint_ns),
        ("checkpoint_id = ?", query.checkpoint_id),
        ("checkpoint_id{bytewise} < ?", query.before_id),
    ):
        if value is not None:
            tests.append(test)
            params.append(value)
    if where is not None and not judged_here:
        tests.append(where[0])
        params.extend(where[1])
    limit = None if query.limit is None or query.limit < 0 else query.limit
    after = query.after
    found: list[tuple[Any, ...]] = []
    page = 0
    while True:
        page_tests, page_params = list(tests), list(params)
        if after is not None:
            page_tests.append(_AFTER)
            page_params.extend(after)
        wanted = None if limit is None else limit - len(found)
        if judged_here and wanted is not None:
            wanted = page = max(wanted, min(2 * page, _SEALED_PAGE))
        text = _SELECT
        if page_tests:
            text += f"WHERE {' AND '.join(page_tests)} "
        text += _NEWEST_FIRST
        if wanted is not None:
            text += " LIMIT ?"
            page_params.append(wanted)
        rows = tx.all(_statement(text, opens), page_params)
        if judged_here:
            assert sealer is not None
            kept = [_opened(sealer, row) for row in rows if matches(row[_META], query.metadata)]
            if limit is not None and len(found) + len(kept) >= limit:
                return _rows(tx, found + kept[: limit - len(found)])
        else:
            kept = [
                row
                for row in rows
                if where is None or not unparsed(row[_META]) or matches(row[_META], query.metadata)
            ]
        found.extend(kept)
        if wanted is None or len(kept) == len(rows) or len(rows) < wanted:
            return _rows(tx, found)
        after = (rows[-1][2], rows[-1][0], rows[-1][1])


def _opened(sealer: Sealer, row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A listed row (metadata opened) with its checkpoint value opened too."""
    values = list(row)
    values[_VALUE] = sealer.open(values[_VALUE], values[7])  # 7: the run id, for an error
    return tuple(values)


class LangGraphOps(Rules):
    """Put, read, list, copy, prune and delete LangGraph checkpoints; lease threads."""

    async def put_graph_checkpoint(
        self, checkpoint: NewGraphCheckpoint, *, lease: ThreadLease | None = None
    ) -> None:
        """Store (or replace) a checkpoint, fenced by the thread's lease."""
        await self.put_graph_checkpoint_params(checkpoint_params(checkpoint), lease=lease)

    async def put_graph_checkpoint_params(
        self, params: tuple[Any, ...], *, lease: ThreadLease | None = None
    ) -> None:
        """:meth:`put_graph_checkpoint` of a checkpoint given as its
        :func:`checkpoint_params` (what a saver builds)."""
        await self._write_tx(lambda tx: _put_checkpoint(tx, params, lease))

    async def put_graph_writes(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        writes: Sequence[GraphWrite],
        *,
        lease: ThreadLease | None = None,
    ) -> None:
        """Store a task's writes in one transaction: a write at a stored (task, idx) is kept,
        except a special channel's (idx < 0), which the new one replaces."""
        kept, replacing = _split(write_params(thread_id, checkpoint_ns, checkpoint_id, writes))
        await self._write_tx(lambda tx: _put_writes(tx, thread_id, kept, replacing, lease))

    def put_graph_checkpoint_params_here(
        self, params: tuple[Any, ...], *, lease: ThreadLease | None = None
    ) -> None:
        """Blocking :meth:`put_graph_checkpoint_params` on the calling thread
        (``blocking_tx``): unleased, one statement in its own transaction, unless
        refused or not run at once (then the fenced transaction, which raises LeaseHeld or
        stores it)."""
        if lease is None:
            now = self._stamp_here()
            if self._write_alone_here(_PUT_CHECKPOINT_UNLEASED, (*params, now, params[0], now)):
                return
        self._write_tx_here(lambda tx: _put_checkpoint(tx, params, lease))

    def put_graph_write_rows_here(
        self,
        thread_id: str,
        kept: Sequence[tuple[Any, ...]],
        replacing: Sequence[tuple[Any, ...]],
        *,
        lease: ThreadLease | None = None,
    ) -> None:
        """Blocking :meth:`put_graph_writes` on the calling thread (``blocking_tx``), of
        writes given as :func:`write_params`' rows: those
        kept at a stored (task, idx), then the special channels' that replace. Unleased and
        all kept: one statement in its own transaction, unless it changed no row (then the
        fenced transaction, which raises LeaseHeld or stores what is missing)."""
        if lease is None and kept and not replacing and len(kept) <= _ALONE_WRITES:
            now = self._stamp_here()
            params = [now]
            for row in kept:
                params += row
            params += (thread_id, now)
            if self._write_alone_here(_keep_writes_unleased(len(kept)), params):
                return
        self._write_tx_here(lambda tx: _put_writes(tx, thread_id, kept, replacing, lease))

    def get_graph_checkpoint_here(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None = None
    ) -> GraphCheckpointRow | None:
        """Blocking :meth:`get_graph_checkpoint` on the calling thread (``blocking_tx``)."""
        return self._read_tx_here(lambda tx: _get(tx, thread_id, checkpoint_ns, checkpoint_id))

    async def get_graph_checkpoint(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None = None
    ) -> GraphCheckpointRow | None:
        """The checkpoint with that id, or the thread's newest in the namespace; None if
        there is none."""
        return await self._read_tx(lambda tx: _get(tx, thread_id, checkpoint_ns, checkpoint_id))

    async def list_graph_checkpoints(self, query: GraphCheckpointQuery) -> list[GraphCheckpointRow]:
        """The checkpoints ``query`` selects, newest first, with their writes."""
        where = metadata_where(query.metadata) if query.metadata else None  # refuses first
        return await self._read_tx(lambda tx: _list(tx, query, where), offload=True)

    async def delete_graph_thread(self, thread_id: str, *, lease: ThreadLease | None = None) -> int:
        """Delete every checkpoint and write of the thread; how many checkpoints there were.
        The thread's lease row stays, so its tokens keep growing."""

        def write(tx: Tx) -> int:
            tx.lock(_LOCKS, [thread_id], exclusive=True)
            _fence(tx, thread_id, lease)
            return _delete_thread(tx, thread_id)

        return await self._write_tx(write)

    async def copy_graph_thread(
        self, source_thread_id: str, target_thread_id: str, *, lease: ThreadLease | None = None
    ) -> int:
        """Copy every checkpoint and write of one thread to a thread that has none; how many
        checkpoints were copied. InvalidInput (nothing copied) if the target has some."""
        copy_refused(source_thread_id, target_thread_id, target_taken=False)
        return await self._write_tx(lambda tx: _copy(tx, source_thread_id, target_thread_id, lease))

    async def delete_graph_runs(
        self, run_ids: Sequence[str], *, leases: Sequence[ThreadLease] = ()
    ) -> int:
        """Delete the checkpoints whose metadata names one of ``run_ids``, with their writes;
        every thread touched is fenced. How many checkpoints were deleted."""
        if not run_ids:
            return 0
        return await self._write_tx(lambda tx: _delete_runs(tx, run_ids, leases))

    async def prune_graph_threads(
        self,
        thread_ids: Sequence[str],
        *,
        keep_latest: bool,
        leases: Sequence[ThreadLease] = (),
    ) -> int:
        """Delete each thread's checkpoints (``keep_latest``: all but the newest per namespace
        and the ancestors its delta channels replay from), with their writes; how many."""
        threads = list(dict.fromkeys(thread_ids))
        return await self._write_tx(lambda tx: _prune(tx, threads, keep_latest, leases))

    async def acquire_thread_lease(
        self, thread_id: str, *, owner: str, ttl: timedelta, force: bool = False
    ) -> ThreadLease:
        """Take the thread's lease with the next token; LeaseHeld while another owner's
        lease is live, unless ``force`` (which fences that owner out)."""
        return await self._write_tx(lambda tx: _acquire(tx, thread_id, owner, ttl, force))

    async def renew_thread_lease(self, lease: ThreadLease) -> bool:
        """Extend ``lease``; False if it was superseded or released."""
        params = (micros(lease.ttl), lease.thread_id, lease.owner, lease.token)
        return await self._write_tx(lambda tx: tx.one(_EXTEND, params) is not None)

    async def release_thread_lease(self, lease: ThreadLease) -> bool:
        """Drop ``lease`` (its token stays counted); False if it no longer held the thread."""
        params = (lease.thread_id, lease.owner, lease.token)
        return await self._write_tx(lambda tx: tx.one(_RELEASE, params) is not None)
