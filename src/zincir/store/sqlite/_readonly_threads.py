"""LangGraph threads as the read-only view shows them (the ``langgraph_*`` tables).

Of a value only a ``json`` one is read (its first bytes, for a preview): msgpack, bytes and
anything else never leave SQLite, let alone get deserialized. A database without the tables
reads as having no threads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .._readonly_rows import Row, decode_json, row_limit
from .._thread_rows import (
    MAX_NAMESPACES,
    PREVIEW_BYTES,
    ThreadCheckpointRow,
    ThreadHeadRow,
    ThreadRow,
    ThreadWriteRow,
    preview,
    thread_row,
)

if TYPE_CHECKING:
    import apsw

__all__ = ["ThreadReads"]

T = TypeVar("T")


def _size(column: str) -> str:
    """SQL for a value's size in bytes: a BLOB's length is read from its header, never its
    pages; TEXT (which the saver does not write) is measured as UTF-8."""
    return (
        f"CASE typeof({column}) WHEN 'blob' THEN length({column}) "
        f"ELSE length(CAST({column} AS BLOB)) END"
    )


def _head(column: str) -> str:
    """SQL for the first ``?`` bytes of a ``json`` value; NULL for every other type, so a
    msgpack, bytes or pickle value never leaves the database."""
    return f"CASE WHEN type = 'json' THEN substr({column}, 1, ?) END"


class ThreadReads:
    """The thread queries of a read snapshot (a base of ``SnapshotReader``)."""

    _tables: frozenset[str]

    if TYPE_CHECKING:

        def _query(self, fn: Callable[[apsw.Connection], T]) -> T: ...
        def _dicts(self, sql: str, params: Sequence[Any], *, decode: bool = True) -> list[Row]: ...
        def _optional(self, table: str, sql: str, params: Sequence[Any]) -> list[Row]: ...

    def threads(self, limit: int = 100) -> list[ThreadRow]:
        """The threads with checkpoints, most recently checkpointed first (by the newest
        checkpoint id: LangGraph's ids are uuid6, which sort by time)."""
        if "langgraph_checkpoints" not in self._tables:
            return []
        newest = self._dicts(
            "SELECT thread_id, max(checkpoint_id) AS latest FROM langgraph_checkpoints "
            "GROUP BY thread_id ORDER BY latest DESC, thread_id LIMIT ?",
            (row_limit(limit),),
            decode=False,
        )
        found = (self.thread(str(row["thread_id"])) for row in newest)
        return [row for row in found if row is not None]

    def thread(self, thread_id: str) -> ThreadRow | None:
        """One thread's summary (see :meth:`threads`), or None when it has no checkpoint."""
        if "langgraph_checkpoints" not in self._tables:
            return None
        count, namespace_count, latest_id = self._first(
            "SELECT count(*), count(DISTINCT checkpoint_ns), max(checkpoint_id) "
            "FROM langgraph_checkpoints WHERE thread_id = ?",
            (thread_id,),
        )
        if not count:
            return None
        namespaces = self._query(
            lambda conn: [
                str(ns)
                for (ns,) in conn.execute(
                    "SELECT DISTINCT checkpoint_ns FROM langgraph_checkpoints "
                    "WHERE thread_id = ? ORDER BY checkpoint_ns LIMIT ?",
                    (thread_id, MAX_NAMESPACES),
                )
            ]
        )
        latest_ns, latest_at = self._first(  # by its whole key: one row read past its value
            "SELECT checkpoint_ns, created_at FROM langgraph_checkpoints WHERE thread_id = ? "
            "AND checkpoint_id = ? AND checkpoint_ns = (SELECT min(checkpoint_ns) "
            "FROM langgraph_checkpoints WHERE thread_id = ? AND checkpoint_id = ?)",
            (thread_id, latest_id, thread_id, latest_id),
        )
        lease = self._optional(
            "langgraph_thread_leases",
            "SELECT owner, token, expires_at FROM langgraph_thread_leases WHERE thread_id = ?",
            (thread_id,),
        )
        return thread_row(
            thread_id,
            (count, namespace_count),
            namespaces,
            (latest_ns, latest_id, latest_at),
            self._write_count(thread_id, str(latest_ns), str(latest_id)),
            (lease[0]["owner"], lease[0]["token"], lease[0]["expires_at"]) if lease else None,
        )

    def _first(self, sql: str, params: Sequence[Any]) -> tuple[Any, ...]:
        """The first row of a query that always returns one (an aggregate)."""
        rows: list[tuple[Any, ...]] = self._query(
            lambda conn: conn.execute(sql, tuple(params)).fetchall()
        )
        return rows[0]

    def _write_count(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> int:
        if "langgraph_writes" not in self._tables:
            return 0
        (count,) = self._first(
            "SELECT count(*) FROM langgraph_writes WHERE thread_id = ? "
            "AND checkpoint_ns = ? AND checkpoint_id = ?",
            (thread_id, checkpoint_ns, checkpoint_id),
        )
        return int(count)

    def _checkpoint_select(self, extra: str = "") -> str:
        """The columns of a ThreadCheckpointRow (``checkpoint`` itself is never read)."""
        writes = (
            "(SELECT count(*) FROM langgraph_writes AS w WHERE w.thread_id = c.thread_id "
            "AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id)"
            if "langgraph_writes" in self._tables
            else "0"
        )
        return (
            "SELECT c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.run_id, c.type, "
            f"{_size('c.checkpoint')} AS size, c.metadata, c.created_at, {writes} AS writes{extra}"
        )

    def thread_checkpoints(self, thread_id: str, limit: int = 500) -> list[ThreadCheckpointRow]:
        """The thread's checkpoints in every namespace, newest first, without their values.

        The page of keys comes from the key index first: metadata and created_at are stored
        after the value, so only the rows on the page are read past it.
        """
        if "langgraph_checkpoints" not in self._tables:
            return []
        found = self._dicts(
            f"{self._checkpoint_select()} FROM (SELECT checkpoint_ns AS ns, checkpoint_id AS id "
            "FROM langgraph_checkpoints WHERE thread_id = ? "
            "ORDER BY checkpoint_id DESC, checkpoint_ns LIMIT ?) AS page "
            "JOIN langgraph_checkpoints AS c ON c.thread_id = ? AND c.checkpoint_ns = page.ns "
            "AND c.checkpoint_id = page.id ORDER BY c.checkpoint_id DESC, c.checkpoint_ns",
            (thread_id, row_limit(limit), thread_id),
            decode=False,
        )
        for row in found:
            row["metadata"] = decode_json(row["metadata"])
        return cast(list[ThreadCheckpointRow], found)

    def thread_heads(
        self, thread_id: str, limit: int = 50, *, preview_bytes: int = PREVIEW_BYTES
    ) -> list[ThreadHeadRow]:
        """The newest checkpoint of each of the thread's namespaces, with a preview of its
        value when it is ``json``: the root graph's first, then the most recently
        checkpointed, at most ``limit``."""
        if "langgraph_checkpoints" not in self._tables:
            return []
        cap = row_limit(preview_bytes)
        found = self._dicts(
            f"{self._checkpoint_select(', ' + _head('c.checkpoint') + ' AS head')} "
            "FROM (SELECT checkpoint_ns AS ns, max(checkpoint_id) AS id "
            "FROM langgraph_checkpoints WHERE thread_id = ? GROUP BY checkpoint_ns "
            "ORDER BY ns != '', id DESC, ns LIMIT ?) AS latest JOIN langgraph_checkpoints AS c "
            "ON c.thread_id = ? AND c.checkpoint_ns = latest.ns AND c.checkpoint_id = latest.id "
            "ORDER BY c.checkpoint_ns != '', c.checkpoint_id DESC, c.checkpoint_ns",
            (cap, thread_id, row_limit(limit), thread_id),
            decode=False,
        )
        for row in found:
            row["metadata"] = decode_json(row["metadata"])
            preview(row, cap)
        return cast(list[ThreadHeadRow], found)

    def thread_writes(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        limit: int = 500,
        *,
        preview_bytes: int = PREVIEW_BYTES,
    ) -> list[ThreadWriteRow]:
        """The pending writes of one checkpoint's tasks in LangGraph's replay order (task
        path, task id, idx), each ``json`` value previewed from its first bytes."""
        if "langgraph_writes" not in self._tables:
            return []
        cap = row_limit(preview_bytes)
        found = self._dicts(
            f"SELECT task_id, idx, channel, type, {_size('value')} AS size, task_path, "
            f"created_at, {_head('value')} AS head FROM langgraph_writes "
            "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? "
            "ORDER BY task_path, task_id, idx LIMIT ?",
            (cap, thread_id, checkpoint_ns, checkpoint_id, row_limit(limit)),
            decode=False,
        )
        for row in found:
            preview(row, cap)
        return cast(list[ThreadWriteRow], found)
