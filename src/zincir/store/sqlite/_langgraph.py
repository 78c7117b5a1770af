"""LangGraph checkpoints: the ``langgraph_*`` tables behind ``zincir.integrations.langgraph``.

Every write that changes a thread first passes :func:`_fence` in its own transaction: under
a lease the lease's owner and token must still be the thread's (FencedOut otherwise, and the
lease is extended); without one, no other owner may hold a live lease (LeaseHeld). A refused
write stores nothing. A checkpoint is one transaction, and so are a task's writes. Callers
check ids and serialize values before they call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final

import apsw

from ..._errors import FencedOut
from ..._time import from_db, to_db
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
from ._base import SQLiteBase, one

__all__ = ["LangGraphOps"]

_CHECKPOINT_COLUMNS: Final = (
    "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, type, "
    "checkpoint, metadata, created_at"
)
_PUT_CHECKPOINT: Final = (
    f"INSERT INTO langgraph_checkpoints ({_CHECKPOINT_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
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
    f"INSERT INTO langgraph_writes ({_WRITE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    f"ON CONFLICT {_WRITE_KEY} DO NOTHING"
)
_REPLACE_WRITE: Final = (
    f"INSERT INTO langgraph_writes ({_WRITE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    f"ON CONFLICT {_WRITE_KEY} DO UPDATE SET channel = excluded.channel, "
    "type = excluded.type, value = excluded.value, task_path = excluded.task_path"
)
_SELECT_WRITES: Final = (
    f"SELECT {GRAPH_WRITE_COLUMNS} FROM langgraph_writes "
    "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? "
    "ORDER BY task_path, task_id, idx"
)
_NEWEST_FIRST: Final = "ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC"
_IN_JSON: Final = "IN (SELECT value FROM json_each(?))"


# -- fencing ----------------------------------------------------------------------------


def _fence(conn: apsw.Connection, thread_id: str, lease: ThreadLease | None, now: datetime) -> None:
    """Raise unless this write may change ``thread_id`` (see the module docstring)."""
    stamp = to_db(now)
    if lease is None:
        held = conn.execute(
            "SELECT owner, token, expires_at FROM langgraph_thread_leases "
            "WHERE thread_id = ? AND owner IS NOT NULL AND expires_at > ?",
            (thread_id, stamp),
        ).fetchone()
        if held is not None:
            owner, token, expires_at = held
            raise lease_held(thread_id, owner, token, expires_at, taking=False)
        return
    extended = conn.execute(
        "UPDATE langgraph_thread_leases SET expires_at = ?, updated_at = ? "
        "WHERE thread_id = ? AND owner = ? AND token = ? RETURNING 1",
        (lease.expiry(now), stamp, thread_id, lease.owner, lease.token),
    ).fetchone()
    if extended is None:
        raise _fenced_out(conn, thread_id, lease)


def _fenced_out(conn: apsw.Connection, thread_id: str, lease: ThreadLease) -> FencedOut:
    """Why ``lease`` no longer holds its thread: a newer token, or released."""
    row = conn.execute(
        "SELECT owner, token FROM langgraph_thread_leases WHERE thread_id = ?", (thread_id,)
    ).fetchone()
    return thread_fenced_out(thread_id, lease, row)


def _acquire(
    conn: apsw.Connection, thread_id: str, owner: str, ttl: timedelta, now: datetime, force: bool
) -> ThreadLease:
    stamp = to_db(now)
    row = conn.execute(
        "SELECT owner, token, expires_at FROM langgraph_thread_leases WHERE thread_id = ?",
        (thread_id,),
    ).fetchone()
    if row is not None:
        held_by, token, expires_at = row
        if held_by is not None and held_by != owner and expires_at > stamp and not force:
            raise lease_held(thread_id, held_by, token, expires_at, taking=True)
    lease = ThreadLease(thread_id, owner, (row[1] if row is not None else 0) + 1, ttl)
    conn.execute(
        "INSERT INTO langgraph_thread_leases (thread_id, owner, token, expires_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (thread_id) DO UPDATE SET owner = excluded.owner, "
        "token = excluded.token, expires_at = excluded.expires_at, "
        "updated_at = excluded.updated_at",
        (thread_id, owner, lease.token, lease.expiry(now), stamp),
    )
    return lease


# -- reading ----------------------------------------------------------------------------


def _writes(
    conn: apsw.Connection, thread_id: str, ns: str, checkpoint_id: str
) -> tuple[GraphWrite, ...]:
    return tuple(
        graph_write(row) for row in conn.execute(_SELECT_WRITES, (thread_id, ns, checkpoint_id))
    )


def _row(conn: apsw.Connection, found: tuple[Any, ...]) -> GraphCheckpointRow:
    """A checkpoint selected as GRAPH_ROW_COLUMNS, with its writes."""
    writes = _writes(conn, found[0], found[1], found[2])
    return graph_checkpoint_row(found, writes, from_db)


def _metadata_predicate(key: str, value: Any) -> tuple[str, list[Any]]:
    """SQL matching one metadata filter pair by JSON type and value (1 matches 1.0, not
    true or "1"); a None value matches null or a missing key, as in LangGraph's savers."""
    kind = filter_kind(key, value)
    exists = "EXISTS (SELECT 1 FROM json_each(metadata) WHERE key = ? AND "
    if kind == "null":
        return "NOT " + exists + "type <> 'null')", [key]
    if kind == "boolean":
        return exists + "type = ?)", [key, "true" if value else "false"]
    if kind == "number":
        return exists + "type IN ('integer', 'real') AND value = ?)", [key, value]
    if kind == "text":
        return exists + "type = 'text' AND value = ?)", [key, value]
    text = container_text(value)
    return exists + "type IN ('object', 'array') AND json(value) = json(?))", [key, text]


def _list(conn: apsw.Connection, query: GraphCheckpointQuery) -> list[GraphCheckpointRow]:
    wheres: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("thread_id = ?", query.thread_id),
        ("checkpoint_ns = ?", query.checkpoint_ns),
        ("checkpoint_id = ?", query.checkpoint_id),
        ("checkpoint_id < ?", query.before_id),
    ):
        if value is not None:
            wheres.append(column)
            params.append(value)
    for key, value in query.metadata:
        clause, values = _metadata_predicate(key, value)
        wheres.append(clause)
        params.extend(values)
    if query.after is not None:
        wheres.append("(checkpoint_id, thread_id, checkpoint_ns) < (?, ?, ?)")
        params.extend(query.after)
    where = f"WHERE {' AND '.join(wheres)} " if wheres else ""
    params.append(-1 if query.limit is None else query.limit)
    sql = f"SELECT {GRAPH_ROW_COLUMNS} FROM langgraph_checkpoints {where}{_NEWEST_FIRST} LIMIT ?"
    return [_row(conn, tuple(found)) for found in conn.execute(sql, params).fetchall()]


# -- pruning ----------------------------------------------------------------------------


def _kept_chain(conn: apsw.Connection, thread_id: str, ns: str, latest: str) -> list[str]:
    """The newest checkpoint and the ancestors its delta channels still replay from.

    A LangGraph ``DeltaChannel`` is rebuilt from the writes along the parent chain back to
    its last snapshot; the newest checkpoint's ``counters_since_delta_snapshot`` says how
    many super-steps back that is, so the chain is kept that deep (deeper is safe).
    """
    (depth,) = one(
        conn,
        "SELECT COALESCE(MAX(CAST(json_extract(c.value, '$[1]') AS INTEGER)), 0) "
        "FROM langgraph_checkpoints, "
        "json_each(langgraph_checkpoints.metadata, '$.counters_since_delta_snapshot') AS c "
        "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
        (thread_id, ns, latest),
    )
    if not depth:
        return [latest]
    return [
        str(found)
        for (found,) in conn.execute(
            "WITH RECURSIVE chain(id, depth) AS (SELECT ?, 0 UNION ALL "
            "SELECT cp.parent_checkpoint_id, chain.depth + 1 FROM chain "
            "JOIN langgraph_checkpoints AS cp ON cp.thread_id = ? AND cp.checkpoint_ns = ? "
            "AND cp.checkpoint_id = chain.id "
            "WHERE chain.depth < ? AND cp.parent_checkpoint_id IS NOT NULL) "
            "SELECT id FROM chain",
            (latest, thread_id, ns, int(depth)),
        )
    ]


def _keep_latest(conn: apsw.Connection, thread_id: str) -> int:
    removed = 0
    latest = conn.execute(
        "SELECT checkpoint_ns, MAX(checkpoint_id) FROM langgraph_checkpoints "
        "WHERE thread_id = ? GROUP BY checkpoint_ns",
        (thread_id,),
    ).fetchall()
    for ns, newest in latest:
        kept = json.dumps(_kept_chain(conn, thread_id, str(ns), str(newest)))
        scope = f"thread_id = ? AND checkpoint_ns = ? AND checkpoint_id NOT {_IN_JSON}"
        conn.execute(f"DELETE FROM langgraph_writes WHERE {scope}", (thread_id, ns, kept))
        conn.execute(f"DELETE FROM langgraph_checkpoints WHERE {scope}", (thread_id, ns, kept))
        removed += conn.changes()
    return removed


def _delete_thread(conn: apsw.Connection, thread_id: str) -> int:
    conn.execute("DELETE FROM langgraph_writes WHERE thread_id = ?", (thread_id,))
    conn.execute("DELETE FROM langgraph_checkpoints WHERE thread_id = ?", (thread_id,))
    return conn.changes()


class LangGraphOps(SQLiteBase):
    """Put, read, list, copy, prune and delete LangGraph checkpoints; lease threads."""

    async def put_graph_checkpoint(
        self, checkpoint: NewGraphCheckpoint, *, lease: ThreadLease | None = None
    ) -> None:
        """Store (or replace) a checkpoint, fenced by the thread's lease."""
        now = self.clock()
        item = checkpoint

        def write(conn: apsw.Connection) -> None:
            _fence(conn, item.thread_id, lease, now)
            conn.execute(_PUT_CHECKPOINT, (*checkpoint_params(item), to_db(now)))

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
        now = self.clock()
        stamp = to_db(now)
        rows = [
            (_REPLACE_WRITE if replaces else _INSERT_WRITE, (*params, stamp))
            for replaces, params in write_params(thread_id, checkpoint_ns, checkpoint_id, writes)
        ]

        def write(conn: apsw.Connection) -> None:
            _fence(conn, thread_id, lease, now)
            for sql, params in rows:
                conn.execute(sql, params)

        await self._write(write)

    async def get_graph_checkpoint(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None = None
    ) -> GraphCheckpointRow | None:
        """The checkpoint with that id, or the thread's newest in the namespace; None if
        there is none."""

        def read(conn: apsw.Connection) -> GraphCheckpointRow | None:
            base = f"SELECT {GRAPH_ROW_COLUMNS} FROM langgraph_checkpoints "
            if checkpoint_id is None:
                found = conn.execute(
                    base + "WHERE thread_id = ? AND checkpoint_ns = ? "
                    "ORDER BY checkpoint_id DESC LIMIT 1",
                    (thread_id, checkpoint_ns),
                ).fetchone()
            else:
                found = conn.execute(
                    base + "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
                    (thread_id, checkpoint_ns, checkpoint_id),
                ).fetchone()
            return None if found is None else _row(conn, tuple(found))

        return await self._read(read)

    async def list_graph_checkpoints(self, query: GraphCheckpointQuery) -> list[GraphCheckpointRow]:
        """The checkpoints ``query`` selects, newest first, with their writes."""
        for key, value in query.metadata:
            _metadata_predicate(key, value)  # refuse a bad filter before reading
        return await self._read(lambda conn: _list(conn, query), offload=True)

    async def delete_graph_thread(self, thread_id: str, *, lease: ThreadLease | None = None) -> int:
        """Delete every checkpoint and write of the thread; how many checkpoints there were.
        The thread's lease row stays, so its tokens keep growing."""
        now = self.clock()

        def write(conn: apsw.Connection) -> int:
            _fence(conn, thread_id, lease, now)
            return _delete_thread(conn, thread_id)

        return await self._write(write)

    async def copy_graph_thread(
        self, source_thread_id: str, target_thread_id: str, *, lease: ThreadLease | None = None
    ) -> int:
        """Copy every checkpoint and write of one thread to a thread that has none; how many
        checkpoints were copied. InvalidInput (nothing copied) if the target has some."""
        copy_refused(source_thread_id, target_thread_id, target_taken=False)
        now = self.clock()
        stamp = to_db(now)

        def write(conn: apsw.Connection) -> int:
            _fence(conn, target_thread_id, lease, now)
            taken = conn.execute(
                "SELECT 1 FROM langgraph_checkpoints WHERE thread_id = ? LIMIT 1",
                (target_thread_id,),
            ).fetchone()
            copy_refused(source_thread_id, target_thread_id, target_taken=taken is not None)
            conn.execute(
                f"INSERT INTO langgraph_checkpoints ({_CHECKPOINT_COLUMNS}) "
                "SELECT ?, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, type, "
                "checkpoint, metadata, ? FROM langgraph_checkpoints WHERE thread_id = ?",
                (target_thread_id, stamp, source_thread_id),
            )
            copied = conn.changes()
            conn.execute(
                f"INSERT INTO langgraph_writes ({_WRITE_COLUMNS}) "
                "SELECT ?, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, value, "
                "task_path, ? FROM langgraph_writes WHERE thread_id = ? "
                f"ON CONFLICT {_WRITE_KEY} DO NOTHING",
                (target_thread_id, stamp, source_thread_id),
            )
            return copied

        return await self._write(write)

    async def delete_graph_runs(
        self, run_ids: Sequence[str], *, leases: Sequence[ThreadLease] = ()
    ) -> int:
        """Delete the checkpoints whose metadata names one of ``run_ids``, with their writes;
        every thread touched is fenced. How many checkpoints were deleted."""
        if not run_ids:
            return 0
        now = self.clock()
        wanted = json.dumps(list(run_ids))
        runs = f"run_id {_IN_JSON}"

        def write(conn: apsw.Connection) -> int:
            threads = conn.execute(
                f"SELECT DISTINCT thread_id FROM langgraph_checkpoints WHERE {runs}", (wanted,)
            ).fetchall()
            for (thread_id,) in threads:
                _fence(conn, str(thread_id), lease_for(str(thread_id), leases), now)
            conn.execute(
                "DELETE FROM langgraph_writes WHERE (thread_id, checkpoint_ns, checkpoint_id) IN "
                "(SELECT thread_id, checkpoint_ns, checkpoint_id FROM langgraph_checkpoints "
                f"WHERE {runs})",
                (wanted,),
            )
            conn.execute(f"DELETE FROM langgraph_checkpoints WHERE {runs}", (wanted,))
            return conn.changes()

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
        now = self.clock()
        threads = list(dict.fromkeys(thread_ids))

        def write(conn: apsw.Connection) -> int:
            removed = 0
            for thread_id in threads:
                _fence(conn, thread_id, lease_for(thread_id, leases), now)
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
        return await self._write(
            lambda conn: _acquire(conn, thread_id, owner, ttl, self.clock(), force)
        )

    async def renew_thread_lease(self, lease: ThreadLease) -> bool:
        """Extend ``lease``; False if it was superseded or released."""

        def write(conn: apsw.Connection) -> bool:
            now = self.clock()
            return (
                conn.execute(
                    "UPDATE langgraph_thread_leases SET expires_at = ?, updated_at = ? "
                    "WHERE thread_id = ? AND owner = ? AND token = ? RETURNING 1",
                    (lease.expiry(now), to_db(now), lease.thread_id, lease.owner, lease.token),
                ).fetchone()
                is not None
            )

        return await self._write(write)

    async def release_thread_lease(self, lease: ThreadLease) -> bool:
        """Drop ``lease`` (its token stays counted); False if it no longer held the thread."""

        def write(conn: apsw.Connection) -> bool:
            return (
                conn.execute(
                    "UPDATE langgraph_thread_leases SET owner = NULL, expires_at = NULL, "
                    "updated_at = ? WHERE thread_id = ? AND owner = ? AND token = ? RETURNING 1",
                    (to_db(self.clock()), lease.thread_id, lease.owner, lease.token),
                ).fetchone()
                is not None
            )

        return await self._write(write)
