"""LangGraph threads as the read-only view shows them (the ``langgraph_*`` tables), PostgreSQL.

Of a value only a ``json`` one is read (its first bytes, for a preview): msgpack, bytes and
anything else never leave the server, let alone get deserialized. The rows are those of
every backend (``zincir.store._thread_rows``), times as UTC text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, cast

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
from ._log import text_time

__all__ = ["ThreadReads"]

_C: Final = ' COLLATE "C"'  # text orders byte by byte, as SQLite's do
_WRITES: Final = (
    "(SELECT count(*) FROM langgraph_writes AS w WHERE w.thread_id = c.thread_id "
    "AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id)"
)
_CHECKPOINT_SELECT: Final = (
    "SELECT c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.run_id, c.type, "
    f"octet_length(c.checkpoint) AS size, c.metadata, c.created_at, {_WRITES} AS writes"
)
"""The columns of a ThreadCheckpointRow (``checkpoint`` itself is never read; its length
comes from the value's header)."""


def _head(column: str) -> str:
    """SQL for the first ``%s`` bytes of a ``json`` value; NULL for every other type, so a
    msgpack, bytes or pickle value never leaves the database."""
    return f"CASE WHEN type = 'json' THEN substr({column}, 1, %s) END"


class ThreadReads:
    """The thread queries of a read snapshot (a base of ``PostgresSnapshot``)."""

    if TYPE_CHECKING:

        def _tuples(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...
        def _dicts(self, sql: str, params: Sequence[Any], *, decode: bool = True) -> list[Row]: ...

    def threads(self, limit: int = 100) -> list[ThreadRow]:
        """The threads with checkpoints, most recently checkpointed first (by the newest
        checkpoint id: LangGraph's ids are uuid6, which sort by time)."""
        newest = self._tuples(
            f"SELECT thread_id, max(checkpoint_id{_C}) AS latest FROM langgraph_checkpoints "
            f"GROUP BY thread_id ORDER BY latest DESC, thread_id{_C} LIMIT %s",
            (row_limit(limit),),
        )
        found = (self.thread(str(thread_id)) for thread_id, _ in newest)
        return [row for row in found if row is not None]

    def thread(self, thread_id: str) -> ThreadRow | None:
        """One thread's summary (see :meth:`threads`), or None when it has no checkpoint."""
        ((count, namespace_count, latest_id),) = self._tuples(
            f"SELECT count(*), count(DISTINCT checkpoint_ns), max(checkpoint_id{_C}) "
            "FROM langgraph_checkpoints WHERE thread_id = %s",
            (thread_id,),
        )
        if not count:
            return None
        namespaces = [
            str(ns)
            for (ns,) in self._tuples(
                "SELECT checkpoint_ns FROM langgraph_checkpoints WHERE thread_id = %s "
                f"GROUP BY checkpoint_ns ORDER BY checkpoint_ns{_C} LIMIT %s",
                (thread_id, MAX_NAMESPACES),
            )
        ]
        ((latest_ns, latest_at),) = self._tuples(
            "SELECT checkpoint_ns, created_at FROM langgraph_checkpoints WHERE thread_id = %s "
            f"AND checkpoint_id = %s ORDER BY checkpoint_ns{_C} LIMIT 1",
            (thread_id, latest_id),
        )
        lease = self._tuples(
            "SELECT owner, token, expires_at FROM langgraph_thread_leases WHERE thread_id = %s",
            (thread_id,),
        )
        return thread_row(
            thread_id,
            (count, namespace_count),
            namespaces,
            (latest_ns, latest_id, text_time(latest_at)),
            self._write_count(thread_id, str(latest_ns), str(latest_id)),
            (lease[0][0], lease[0][1], text_time(lease[0][2])) if lease else None,
        )

    def _write_count(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> int:
        ((count,),) = self._tuples(
            "SELECT count(*) FROM langgraph_writes WHERE thread_id = %s "
            "AND checkpoint_ns = %s AND checkpoint_id = %s",
            (thread_id, checkpoint_ns, checkpoint_id),
        )
        return int(count)

    def thread_checkpoints(self, thread_id: str, limit: int = 500) -> list[ThreadCheckpointRow]:
        """The thread's checkpoints in every namespace, newest first, without their values."""
        found = self._dicts(
            f"{_CHECKPOINT_SELECT} FROM langgraph_checkpoints AS c WHERE c.thread_id = %s "
            f"ORDER BY c.checkpoint_id{_C} DESC, c.checkpoint_ns{_C} LIMIT %s",
            (thread_id, row_limit(limit)),
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
        cap = row_limit(preview_bytes)
        found = self._dicts(
            f"{_CHECKPOINT_SELECT}, {_head('c.checkpoint')} AS head "
            f"FROM (SELECT checkpoint_ns AS ns, max(checkpoint_id{_C}) AS id "
            "FROM langgraph_checkpoints WHERE thread_id = %s GROUP BY checkpoint_ns "
            f"ORDER BY checkpoint_ns != '', id DESC, checkpoint_ns{_C} LIMIT %s) AS latest "
            "JOIN langgraph_checkpoints AS c ON c.thread_id = %s "
            "AND c.checkpoint_ns = latest.ns AND c.checkpoint_id = latest.id "
            f"ORDER BY c.checkpoint_ns != '', c.checkpoint_id{_C} DESC, c.checkpoint_ns{_C}",
            (min(cap, 2**31 - 1), thread_id, row_limit(limit), thread_id),
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
        cap = row_limit(preview_bytes)
        found = self._dicts(
            "SELECT task_id, idx, channel, type, octet_length(value) AS size, task_path, "
            f"created_at, {_head('value')} AS head FROM langgraph_writes "
            "WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s "
            f"ORDER BY task_path{_C}, task_id{_C}, idx LIMIT %s",
            (min(cap, 2**31 - 1), thread_id, checkpoint_ns, checkpoint_id, row_limit(limit)),
            decode=False,
        )
        for row in found:
            preview(row, cap)
        return cast(list[ThreadWriteRow], found)
