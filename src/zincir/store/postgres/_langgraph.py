"""LangGraph checkpoints on PostgreSQL: the ``langgraph_*`` tables behind
``zincir.integrations.langgraph``, with the SQLite backend's behaviour.

Every write that changes a thread first passes :func:`_fence` in its own transaction: under
a lease the lease's owner and token must still be the thread's (FencedOut otherwise, and the
lease is extended); without one, no other owner may hold a live lease (LeaseHeld). A refused
write stores nothing.

Writers race here, so each transaction takes a per-thread advisory lock before its fence:
shared for a put of a checkpoint or of writes, exclusive for what reads a thread to decide
(taking its lease, copying onto it, pruning, deleting). The unleased fence also locks the
lease row FOR SHARE, so a holder cannot revive an expired lease under it; a leased fence's
``UPDATE`` locks the row. Locks are always taken advisory first, threads in sorted order.

Ids compare and sort as bytes (``COLLATE "C"``), as in SQLite, whatever the database's
collation. Metadata filters run in SQL on ``jsonb``, except for metadata holding an escape
PostgreSQL's JSON parser refuses (``\\u0000``, a lone surrogate), which is matched in Python.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any, Final

from ..._errors import FencedOut, InvalidInput
from ..._validate import printable, utf8
from .._graph_filters import container_text, filter_kind
from .._graph_rules import (
    checkpoint_params,
    copy_refused,
    lease_for,
    lease_held,
    thread_fenced_out,
    write_params,
)
from .._langgraph_records import (
    GRAPH_ROW_COLUMNS,
    GRAPH_WRITE_COLUMNS,
    GraphCheckpointQuery,
    GraphCheckpointRow,
    GraphWrite,
    NewGraphCheckpoint,
    ThreadLease,
    graph_checkpoint_row,
    graph_write,
)
from ._base import Conn, PostgresBase
from ._log import text_time

__all__ = ["LangGraphOps"]

_CHECKPOINT_COLUMNS: Final = (
    "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, type, "
    "checkpoint, metadata, created_at"
)
_PUT_CHECKPOINT: Final = (
    f"INSERT INTO langgraph_checkpoints ({_CHECKPOINT_COLUMNS}) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, zincir_now()) "
    "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
    "parent_checkpoint_id = excluded.parent_checkpoint_id, run_id = excluded.run_id, "
    "type = excluded.type, checkpoint = excluded.checkpoint, metadata = excluded.metadata"
)
_WRITE_COLUMNS: Final = (
    "thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, value, task_path, "
    "created_at"
)
_WRITE_KEY: Final = "(thread_id, checkpoint_ns, checkpoint_id, task_id, idx)"
_INSERT_WRITE: Final = (
    f"INSERT INTO langgraph_writes ({_WRITE_COLUMNS}) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, zincir_now()) "
    f"ON CONFLICT {_WRITE_KEY} DO NOTHING"
)
_REPLACE_WRITE: Final = (
    f"INSERT INTO langgraph_writes ({_WRITE_COLUMNS}) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, zincir_now()) "
    f"ON CONFLICT {_WRITE_KEY} DO UPDATE SET channel = excluded.channel, "
    "type = excluded.type, value = excluded.value, task_path = excluded.task_path"
)
_SELECT_WRITES: Final = (
    f"SELECT w.thread_id, w.checkpoint_ns, w.checkpoint_id, {GRAPH_WRITE_COLUMNS} "
    "FROM unnest(%s::text[], %s::text[], %s::text[]) AS k(thread_id, checkpoint_ns, "
    "checkpoint_id) JOIN langgraph_writes AS w USING (thread_id, checkpoint_ns, checkpoint_id) "
    'ORDER BY w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx'
)
_NEWEST_FIRST: Final = (
    'ORDER BY checkpoint_id COLLATE "C" DESC, thread_id COLLATE "C" DESC, '
    'checkpoint_ns COLLATE "C" DESC'
)
_LOCK_SPACE: Final = 2053924722  # the first key of every thread's advisory lock ("zlgr")
_UNPARSED: Final = r"\\u(0000|[dD][89a-fA-F])"
"""Metadata escapes PostgreSQL's JSON parser refuses (over-matching is harmless: such
metadata is matched in Python, exactly)."""
_UNPARSED_RE: Final = re.compile(_UNPARSED)


# -- locking and fencing ----------------------------------------------------------------


def _lock(conn: Conn, thread_ids: Iterable[str], *, exclusive: bool) -> None:
    """Take this transaction's advisory lock on each thread (held until it ends)."""
    take = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
    for thread_id in sorted(set(thread_ids)):
        conn.execute(
            f"SELECT {take}({_LOCK_SPACE}, hashtext(current_schema() || '.' || %s))",
            (thread_id,),
        )


def _fence(conn: Conn, thread_id: str, lease: ThreadLease | None) -> None:
    """Raise unless this write may change ``thread_id`` (see the module docstring)."""
    if lease is None:
        held = conn.execute(
            "SELECT owner, token, expires_at, owner IS NOT NULL AND expires_at > zincir_now() "
            "FROM langgraph_thread_leases WHERE thread_id = %s FOR SHARE",
            (thread_id,),
        ).fetchone()
        if held is not None and held[3]:
            owner, token, expires_at, _ = held
            raise lease_held(thread_id, owner, token, text_time(expires_at), taking=False)
        return
    extended = conn.execute(
        "UPDATE langgraph_thread_leases SET expires_at = zincir_now() + %s::interval, "
        "updated_at = zincir_now() WHERE thread_id = %s AND owner = %s AND token = %s "
        "RETURNING 1",
        (lease.ttl, thread_id, lease.owner, lease.token),
    ).fetchone()
    if extended is None:
        raise _fenced_out(conn, thread_id, lease)


def _fenced_out(conn: Conn, thread_id: str, lease: ThreadLease) -> FencedOut:
    """Why ``lease`` no longer holds its thread: a newer token, or released."""
    row = conn.execute(
        "SELECT owner, token FROM langgraph_thread_leases WHERE thread_id = %s", (thread_id,)
    ).fetchone()
    return thread_fenced_out(thread_id, lease, row)


def _acquire(conn: Conn, thread_id: str, owner: str, ttl: timedelta, force: bool) -> ThreadLease:
    _lock(conn, [thread_id], exclusive=True)
    row = conn.execute(
        "SELECT owner, token, expires_at, owner IS NOT NULL AND expires_at > zincir_now() "
        "FROM langgraph_thread_leases WHERE thread_id = %s FOR UPDATE",
        (thread_id,),
    ).fetchone()
    if row is not None:
        held_by, token, expires_at, live = row
        if live and held_by != owner and not force:
            raise lease_held(thread_id, held_by, token, text_time(expires_at), taking=True)
    lease = ThreadLease(thread_id, owner, (int(row[1]) if row is not None else 0) + 1, ttl)
    conn.execute(
        "INSERT INTO langgraph_thread_leases (thread_id, owner, token, expires_at, updated_at) "
        "VALUES (%s, %s, %s, zincir_now() + %s::interval, zincir_now()) "
        "ON CONFLICT (thread_id) DO UPDATE SET owner = excluded.owner, "
        "token = excluded.token, expires_at = excluded.expires_at, "
        "updated_at = excluded.updated_at",
        (thread_id, owner, lease.token, ttl),
    )
    return lease


# -- reading ----------------------------------------------------------------------------


def _rows(conn: Conn, found: Sequence[tuple[Any, ...]]) -> list[GraphCheckpointRow]:
    """Checkpoint rows (selected as ``GRAPH_ROW_COLUMNS``) with their writes, read in one
    statement."""
    if not found:
        return []
    keys = [(str(row[0]), str(row[1]), str(row[2])) for row in found]
    writes: dict[tuple[str, str, str], list[GraphWrite]] = {}
    columns = ([key[0] for key in keys], [key[1] for key in keys], [key[2] for key in keys])
    selected = conn.execute(_SELECT_WRITES, columns)
    for row in selected:
        writes.setdefault((row[0], row[1], row[2]), []).append(graph_write(row[3:]))
    return [
        graph_checkpoint_row(row, tuple(writes.get(key, ())))
        for key, row in zip(keys, found, strict=True)
    ]


def _metadata_predicate(key: str, value: Any) -> tuple[str, list[Any]]:
    """SQL matching one metadata filter pair (on metadata PostgreSQL parses) by JSON type
    and value (1 matches 1.0, not true or "1"); a None value matches null or a missing key,
    as in LangGraph's savers. Containers compare as JSON text, as in SQLite."""
    kind = filter_kind(key, value)
    field = "(metadata::jsonb -> %s)"
    if kind == "null":
        clause, text = f"COALESCE(jsonb_typeof({field}), 'null') = 'null'", None
    elif kind == "container":
        clause, text = "(metadata::json -> %s)::text = %s", container_text(value)
    else:
        if isinstance(value, float) and not math.isfinite(value):
            return "false", []
        clause, text = f"{field} = %s::jsonb", json.dumps(value, ensure_ascii=False)
    if utf8(key) is None or text is not None and utf8(text) is None:
        raise InvalidInput(
            f"metadata filter {printable(key)!r}: a value cannot be stored in PostgreSQL: "
            "it holds a lone surrogate"
        )
    if text is None:
        return clause, [key]
    if "\\u0000" in text and clause.endswith("::jsonb"):
        return "false", []  # jsonb refuses it; only metadata matched in Python holds one
    return clause, [key, text]


def _matches(metadata: str, pairs: Sequence[tuple[str, Any]]) -> bool:
    """The predicates of :func:`_metadata_predicate`, for metadata PostgreSQL cannot parse."""
    try:
        stored = json.loads(metadata)
    except ValueError:
        return False
    for key, value in pairs:
        present = isinstance(stored, dict) and key in stored
        found = stored[key] if present else None
        kind = filter_kind(key, value)
        if kind == "null":
            ok = found is None
        elif kind == "boolean":
            ok = found is value
        elif kind == "number":
            ok = isinstance(found, int | float) and not isinstance(found, bool) and found == value
        elif kind == "text":
            ok = isinstance(found, str) and found == value
        else:
            ok = isinstance(found, dict | list) and json.dumps(
                found, ensure_ascii=False, separators=(",", ":")
            ) == container_text(value)
        if not ok:
            return False
    return True


def _list(conn: Conn, query: GraphCheckpointQuery) -> list[GraphCheckpointRow]:
    wheres: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("thread_id = %s", query.thread_id),
        ("checkpoint_ns = %s", query.checkpoint_ns),
        ("checkpoint_id = %s", query.checkpoint_id),
        ('checkpoint_id COLLATE "C" < %s', query.before_id),
    ):
        if value is not None:
            wheres.append(column)
            params.append(value)
    if query.metadata:
        clauses: list[str] = []
        values: list[Any] = []
        for key, value in query.metadata:
            clause, more = _metadata_predicate(key, value)
            clauses.append(clause)
            values.extend(more)
        wheres.append(f"(CASE WHEN metadata ~ %s THEN true ELSE {' AND '.join(clauses)} END)")
        params.extend([_UNPARSED, *values])
    limit = None if query.limit is None or query.limit < 0 else query.limit
    after = query.after
    found: list[tuple[Any, ...]] = []
    while True:
        page_wheres, page_params = list(wheres), list(params)
        if after is not None:
            page_wheres.append(
                '(checkpoint_id COLLATE "C", thread_id COLLATE "C", checkpoint_ns COLLATE "C") '
                "< (%s, %s, %s)"
            )
            page_params.extend(after)
        wanted = None if limit is None else limit - len(found)
        where = f"WHERE {' AND '.join(page_wheres)} " if page_wheres else ""
        rows = conn.execute(
            f"SELECT {GRAPH_ROW_COLUMNS} FROM langgraph_checkpoints {where}{_NEWEST_FIRST} "
            "LIMIT %s",
            (*page_params, wanted),
        ).fetchall()
        kept = [
            row
            for row in rows
            if not query.metadata
            or not _UNPARSED_RE.search(row[6])
            or _matches(row[6], query.metadata)
        ]
        found.extend(kept)
        if wanted is None or len(kept) == len(rows) or len(rows) < wanted:
            break
        after = (rows[-1][2], rows[-1][0], rows[-1][1])
    return _rows(conn, found)


# -- pruning ----------------------------------------------------------------------------


def _delta_depth(metadata: str | None) -> int:
    """How many super-steps back the newest snapshot of any delta channel is: the largest
    ``counters_since_delta_snapshot`` count in the metadata (0 without one)."""
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


def _kept_chain(conn: Conn, thread_id: str, ns: str, latest: str) -> list[str]:
    """The newest checkpoint and the ancestors its delta channels still replay from.

    A LangGraph ``DeltaChannel`` is rebuilt from the writes along the parent chain back to
    its last snapshot; the newest checkpoint's ``counters_since_delta_snapshot`` says how
    many super-steps back that is, so the chain is kept that deep (deeper is safe).
    """
    row = conn.execute(
        "SELECT metadata FROM langgraph_checkpoints "
        "WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s",
        (thread_id, ns, latest),
    ).fetchone()
    depth = _delta_depth(None if row is None else str(row[0]))
    if depth <= 0:
        return [latest]
    return [
        str(found)
        for (found,) in conn.execute(
            "WITH RECURSIVE chain(id, depth) AS (SELECT %s::text, 0 UNION ALL "
            "SELECT cp.parent_checkpoint_id, chain.depth + 1 FROM chain "
            "JOIN langgraph_checkpoints AS cp ON cp.thread_id = %s AND cp.checkpoint_ns = %s "
            "AND cp.checkpoint_id = chain.id "
            "WHERE chain.depth < %s AND cp.parent_checkpoint_id IS NOT NULL) "
            "SELECT id FROM chain",
            (latest, thread_id, ns, depth),
        )
    ]


def _keep_latest(conn: Conn, thread_id: str) -> int:
    removed = 0
    latest = conn.execute(
        'SELECT checkpoint_ns, MAX(checkpoint_id COLLATE "C") FROM langgraph_checkpoints '
        "WHERE thread_id = %s GROUP BY checkpoint_ns",
        (thread_id,),
    ).fetchall()
    for ns, newest in latest:
        kept = _kept_chain(conn, thread_id, str(ns), str(newest))
        scope = "WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id <> ALL(%s)"
        conn.execute(f"DELETE FROM langgraph_writes {scope}", (thread_id, ns, kept))
        deleted = conn.execute(f"DELETE FROM langgraph_checkpoints {scope}", (thread_id, ns, kept))
        removed += deleted.rowcount
    return removed


def _delete_thread(conn: Conn, thread_id: str) -> int:
    conn.execute("DELETE FROM langgraph_writes WHERE thread_id = %s", (thread_id,))
    return conn.execute(
        "DELETE FROM langgraph_checkpoints WHERE thread_id = %s", (thread_id,)
    ).rowcount


class LangGraphOps(PostgresBase):
    """Put, read, list, copy, prune and delete LangGraph checkpoints; lease threads."""

    async def put_graph_checkpoint(
        self, checkpoint: NewGraphCheckpoint, *, lease: ThreadLease | None = None
    ) -> None:
        """Store (or replace) a checkpoint, fenced by the thread's lease."""
        item = checkpoint
        params = checkpoint_params(item)

        def write(conn: Conn) -> None:
            _lock(conn, [item.thread_id], exclusive=False)
            _fence(conn, item.thread_id, lease)
            conn.execute(_PUT_CHECKPOINT, params)

        await self._write(write)

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
        rows = write_params(thread_id, checkpoint_ns, checkpoint_id, writes)
        kept = [params for replace, params in rows if not replace]
        replaced = [params for replace, params in rows if replace]

        def write(conn: Conn) -> None:
            _lock(conn, [thread_id], exclusive=False)
            _fence(conn, thread_id, lease)
            with conn.cursor() as cursor:
                if kept:
                    cursor.executemany(_INSERT_WRITE, kept)
                if replaced:
                    cursor.executemany(_REPLACE_WRITE, replaced)

        await self._write(write)

    async def get_graph_checkpoint(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None = None
    ) -> GraphCheckpointRow | None:
        """The checkpoint with that id, or the thread's newest in the namespace; None if
        there is none."""

        def read(conn: Conn) -> GraphCheckpointRow | None:
            base = f"SELECT {GRAPH_ROW_COLUMNS} FROM langgraph_checkpoints "
            if checkpoint_id is None:
                found = conn.execute(
                    base + "WHERE thread_id = %s AND checkpoint_ns = %s "
                    'ORDER BY checkpoint_id COLLATE "C" DESC LIMIT 1',
                    (thread_id, checkpoint_ns),
                ).fetchone()
            else:
                found = conn.execute(
                    base + "WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s",
                    (thread_id, checkpoint_ns, checkpoint_id),
                ).fetchone()
            return None if found is None else _rows(conn, [found])[0]

        return await self._read(read)

    async def list_graph_checkpoints(self, query: GraphCheckpointQuery) -> list[GraphCheckpointRow]:
        """The checkpoints ``query`` selects, newest first, with their writes."""
        for key, value in query.metadata:
            _metadata_predicate(key, value)  # refuse a bad filter before reading
        return await self._read(lambda conn: _list(conn, query))

    async def delete_graph_thread(self, thread_id: str, *, lease: ThreadLease | None = None) -> int:
        """Delete every checkpoint and write of the thread; how many checkpoints there were.
        The thread's lease row stays, so its tokens keep growing."""

        def write(conn: Conn) -> int:
            _lock(conn, [thread_id], exclusive=True)
            _fence(conn, thread_id, lease)
            return _delete_thread(conn, thread_id)

        return await self._write(write)

    async def copy_graph_thread(
        self, source_thread_id: str, target_thread_id: str, *, lease: ThreadLease | None = None
    ) -> int:
        """Copy every checkpoint and write of one thread to a thread that has none; how many
        checkpoints were copied. InvalidInput (nothing copied) if the target has some."""
        copy_refused(source_thread_id, target_thread_id, target_taken=False)

        def write(conn: Conn) -> int:
            _lock(conn, [target_thread_id], exclusive=True)
            _fence(conn, target_thread_id, lease)
            taken = conn.execute(
                "SELECT 1 FROM langgraph_checkpoints WHERE thread_id = %s LIMIT 1",
                (target_thread_id,),
            ).fetchone()
            copy_refused(source_thread_id, target_thread_id, target_taken=taken is not None)
            # One statement, so the checkpoints and the writes come from one snapshot.
            (copied,) = conn.execute(
                f"WITH copied AS (INSERT INTO langgraph_checkpoints ({_CHECKPOINT_COLUMNS}) "
                "SELECT %(target)s, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, "
                "type, checkpoint, metadata, zincir_now() FROM langgraph_checkpoints "
                "WHERE thread_id = %(source)s RETURNING 1), "
                f"written AS (INSERT INTO langgraph_writes ({_WRITE_COLUMNS}) "
                "SELECT %(target)s, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, "
                "value, task_path, zincir_now() FROM langgraph_writes "
                f"WHERE thread_id = %(source)s ON CONFLICT {_WRITE_KEY} DO NOTHING) "
                "SELECT count(*) FROM copied",
                {"target": target_thread_id, "source": source_thread_id},
            ).fetchone() or (0,)
            return int(copied)

        return await self._write(write)

    async def delete_graph_runs(
        self, run_ids: Sequence[str], *, leases: Sequence[ThreadLease] = ()
    ) -> int:
        """Delete the checkpoints whose metadata names one of ``run_ids``, with their writes;
        every thread touched is fenced. How many checkpoints were deleted."""
        if not run_ids:
            return 0
        wanted = list(run_ids)

        def write(conn: Conn) -> int:
            threads = sorted(
                str(thread_id)
                for (thread_id,) in conn.execute(
                    "SELECT DISTINCT thread_id FROM langgraph_checkpoints WHERE run_id = ANY(%s)",
                    (wanted,),
                )
            )
            _lock(conn, threads, exclusive=True)
            for thread_id in threads:
                _fence(conn, thread_id, lease_for(thread_id, leases))
            # Only the fenced threads: a checkpoint of these runs that another thread
            # committed meanwhile is left, as if it came after this delete.
            scope = "WHERE run_id = ANY(%s) AND thread_id = ANY(%s)"
            conn.execute(
                "DELETE FROM langgraph_writes WHERE (thread_id, checkpoint_ns, checkpoint_id) IN "
                f"(SELECT thread_id, checkpoint_ns, checkpoint_id FROM langgraph_checkpoints "
                f"{scope})",
                (wanted, threads),
            )
            return conn.execute(
                f"DELETE FROM langgraph_checkpoints {scope}", (wanted, threads)
            ).rowcount

        return await self._write(write)

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

        def write(conn: Conn) -> int:
            _lock(conn, threads, exclusive=True)
            removed = 0
            for thread_id in threads:
                _fence(conn, thread_id, lease_for(thread_id, leases))
                removed += (
                    _keep_latest(conn, thread_id)
                    if keep_latest
                    else _delete_thread(conn, thread_id)
                )
            return removed

        return await self._write(write)

    # -- thread leases --------------------------------------------------------------------

    async def acquire_thread_lease(
        self, thread_id: str, *, owner: str, ttl: timedelta, force: bool = False
    ) -> ThreadLease:
        """Take the thread's lease with the next token; LeaseHeld while another owner's
        lease is live, unless ``force`` (which fences that owner out)."""
        return await self._write(lambda conn: _acquire(conn, thread_id, owner, ttl, force))

    async def renew_thread_lease(self, lease: ThreadLease) -> bool:
        """Extend ``lease``; False if it was superseded or released."""

        def write(conn: Conn) -> bool:
            return (
                conn.execute(
                    "UPDATE langgraph_thread_leases SET "
                    "expires_at = zincir_now() + %s::interval, updated_at = zincir_now() "
                    "WHERE thread_id = %s AND owner = %s AND token = %s RETURNING 1",
                    (lease.ttl, lease.thread_id, lease.owner, lease.token),
                ).fetchone()
                is not None
            )

        return await self._write(write)

    async def release_thread_lease(self, lease: ThreadLease) -> bool:
        """Drop ``lease`` (its token stays counted); False if it no longer held the thread."""

        def write(conn: Conn) -> bool:
            return (
                conn.execute(
                    "UPDATE langgraph_thread_leases SET owner = NULL, expires_at = NULL, "
                    "updated_at = zincir_now() "
                    "WHERE thread_id = %s AND owner = %s AND token = %s RETURNING 1",
                    (lease.thread_id, lease.owner, lease.token),
                ).fetchone()
                is not None
            )

        return await self._write(write)
