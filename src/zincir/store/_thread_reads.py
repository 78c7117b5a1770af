"""LangGraph threads as the read-only view shows them (the ``langgraph_*`` tables), written
once for every backend.

Of a value only a ``json`` one is read (its first bytes, for a preview): msgpack, bytes and
anything else never leave the database, let alone get deserialized; a value's size is read
from its header (``octet_length``). Ids order byte by byte (``{bytewise}``). A database
without the tables (an older schema) reads as having no threads.

In an encrypted store a ``json`` value is read whole and opened, then cut for its preview;
a value's size is its sealed size less what sealing added (its envelope's first bytes say
how much), and the metadata is opened (``‹sealed›`` for a reader without the key).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, cast

from ._readonly_rows import Row, decode_json, row_limit
from ._sql import sql
from ._thread_rows import (
    MAX_NAMESPACES,
    PREVIEW_BYTES,
    ThreadCheckpointRow,
    ThreadHeadRow,
    ThreadRow,
    ThreadWriteRow,
    plain_size,
    preview,
    thread_row,
)

if TYPE_CHECKING:
    from ._readonly_queries import ReadTx

__all__ = ["ThreadReads"]

_MAX_HEAD: Final = 2**31 - 1  # a preview's bytes, as PostgreSQL's substr takes them


def _head(column: str, *, sealed: bool = False) -> str:
    """SQL for the first ``?`` bytes of a ``json`` value (``sealed``: the whole value, to
    open; and its envelope's first bytes); NULL for every other type, so a msgpack, bytes or
    pickle value never leaves the database."""
    if sealed:
        return f"substr({column}, 1, 4) AS envelope, CASE WHEN type = 'json' THEN {column} END"
    return f"CASE WHEN type = 'json' THEN substr({column}, 1, ?) END"


_THREADS: Final = sql(
    "SELECT thread_id, max(checkpoint_id{bytewise}) AS latest FROM langgraph_checkpoints "
    "GROUP BY thread_id ORDER BY latest DESC, thread_id{bytewise} LIMIT ?"
)
_COUNTS: Final = sql(
    "SELECT count(*), count(DISTINCT checkpoint_ns), max(checkpoint_id{bytewise}) "
    "FROM langgraph_checkpoints WHERE thread_id = ?"
)
_NAMESPACES: Final = sql(
    "SELECT checkpoint_ns FROM langgraph_checkpoints WHERE thread_id = ? "
    "GROUP BY checkpoint_ns ORDER BY checkpoint_ns{bytewise} LIMIT ?"
)
_LATEST: Final = sql(  # by its whole key: one row read past its value
    "SELECT checkpoint_ns, created_at FROM langgraph_checkpoints WHERE thread_id = ? "
    "AND checkpoint_id = ? AND checkpoint_ns = (SELECT min(checkpoint_ns{bytewise}) "
    "FROM langgraph_checkpoints WHERE thread_id = ? AND checkpoint_id = ?)"
)
_LEASE: Final = sql(
    "SELECT owner, token, expires_at FROM langgraph_thread_leases WHERE thread_id = ?"
)
_WRITE_COUNT: Final = sql(
    "SELECT count(*) FROM langgraph_writes WHERE thread_id = ? AND checkpoint_ns = ? "
    "AND checkpoint_id = ?"
)
_NEWEST_FIRST: Final = "ORDER BY c.checkpoint_id{bytewise} DESC, c.checkpoint_ns{bytewise}"
_HEADS_FIRST: Final = (
    "ORDER BY c.checkpoint_ns <> '', c.checkpoint_id{bytewise} DESC, c.checkpoint_ns{bytewise}"
)
_WRITES: Final = {
    sealed: sql(
        "SELECT task_id, idx, channel, type, octet_length(value) AS size, task_path, "
        f"created_at, {_head('value', sealed=sealed)} AS head FROM langgraph_writes "
        "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? "
        "ORDER BY task_path{bytewise}, task_id{bytewise}, idx LIMIT ?",
        opens=(8,) if sealed else (),
    )
    for sealed in (False, True)
}


def _checkpoints(extra: str, page: str, *, writes: bool) -> str:
    """The columns of a ThreadCheckpointRow (``checkpoint`` itself is never read but for a
    ``json`` one's preview in ``extra``) of the checkpoints of one thread a ``page`` of keys
    (``ns``, ``id``) names."""
    counted = (
        "(SELECT count(*) FROM langgraph_writes AS w WHERE w.thread_id = c.thread_id "
        "AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id)"
        if writes
        else "0"
    )
    return (
        "SELECT c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.run_id, c.type, "
        f"octet_length(c.checkpoint) AS size, c.metadata, c.created_at, {counted} AS writes"
        f"{extra} FROM ({page}) AS page JOIN langgraph_checkpoints AS c ON c.thread_id = ? "
        "AND c.checkpoint_ns = page.ns AND c.checkpoint_id = page.id "
    )


_PAGE: Final = (  # keys from the key index first: only the page's rows are read past the value
    "SELECT checkpoint_ns AS ns, checkpoint_id AS id FROM langgraph_checkpoints "
    "WHERE thread_id = ? ORDER BY checkpoint_id{bytewise} DESC, checkpoint_ns{bytewise} "
    "LIMIT ?"
)
_HEADS_PAGE: Final = (
    "SELECT checkpoint_ns AS ns, max(checkpoint_id{bytewise}) AS id "
    "FROM langgraph_checkpoints WHERE thread_id = ? GROUP BY checkpoint_ns "
    "ORDER BY checkpoint_ns <> '', id DESC, checkpoint_ns{bytewise} LIMIT ?"
)
_METADATA: Final = 6  # the position of ``c.metadata`` among a checkpoint row's columns
_CHECKPOINTS: Final = {
    (writes, sealed): sql(
        _checkpoints(
            ", substr(c.checkpoint, 1, 4) AS envelope" if sealed else "", _PAGE, writes=writes
        )
        + _NEWEST_FIRST,
        opens=(_METADATA,) if sealed else (),
    )
    for writes in (False, True)
    for sealed in (False, True)
}
_HEADS: Final = {
    (writes, sealed): sql(
        _checkpoints(
            f", {_head('c.checkpoint', sealed=sealed)} AS head", _HEADS_PAGE, writes=writes
        )
        + _HEADS_FIRST,
        opens=(_METADATA, 10) if sealed else (),  # 10: the head, after the envelope
    )
    for writes in (False, True)
    for sealed in (False, True)
}


def _sized(found: list[Row]) -> list[Row]:
    """Rows of an encrypted store with each value's size as it was before sealing."""
    for row in found:
        row["size"] = plain_size(int(row["size"]), row.pop("envelope"))
    return found


class ThreadReads:
    """The thread queries of a read snapshot (a base of each backend's snapshot), on its
    read transaction ``_tx``."""

    _tx: ReadTx
    _tables: frozenset[str]

    def threads(self, limit: int = 100) -> list[ThreadRow]:
        """The threads with checkpoints, most recently checkpointed first (by the newest
        checkpoint id: LangGraph's ids are uuid6, which sort by time)."""
        if "langgraph_checkpoints" not in self._tables:
            return []
        newest = self._tx.all(_THREADS, (row_limit(limit),))
        found = (self.thread(str(thread_id)) for thread_id, _ in newest)
        return [row for row in found if row is not None]

    def thread(self, thread_id: str) -> ThreadRow | None:
        """One thread's summary (see :meth:`threads`), or None when it has no checkpoint."""
        if "langgraph_checkpoints" not in self._tables:
            return None
        counted = self._tx.one(_COUNTS, (thread_id,))
        if counted is None or not counted[0]:
            return None
        count, namespace_count, latest_id = counted
        found = self._tx.all(_NAMESPACES, (thread_id, MAX_NAMESPACES))
        (latest,) = self._tx.rows(_LATEST, (thread_id, latest_id, thread_id, latest_id))
        lease = (
            self._tx.rows(_LEASE, (thread_id,)) if "langgraph_thread_leases" in self._tables else []
        )
        return thread_row(
            thread_id,
            (count, namespace_count),
            [str(ns) for (ns,) in found],
            (latest["checkpoint_ns"], latest_id, latest["created_at"]),
            self._write_count(thread_id, str(latest["checkpoint_ns"]), str(latest_id)),
            (lease[0]["owner"], lease[0]["token"], lease[0]["expires_at"]) if lease else None,
        )

    def _write_count(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> int:
        if "langgraph_writes" not in self._tables:
            return 0
        counted = self._tx.one(_WRITE_COUNT, (thread_id, checkpoint_ns, checkpoint_id))
        return 0 if counted is None else int(counted[0])

    def _decoded(self, found: list[Row]) -> list[Row]:
        for row in found:
            row["metadata"] = decode_json(row["metadata"])
        return found

    def thread_checkpoints(self, thread_id: str, limit: int = 500) -> list[ThreadCheckpointRow]:
        """The thread's checkpoints in every namespace, newest first, without their values."""
        if "langgraph_checkpoints" not in self._tables:
            return []
        sealed = self._tx.sealer is not None
        statement = _CHECKPOINTS["langgraph_writes" in self._tables, sealed]
        found = self._tx.rows(statement, (thread_id, row_limit(limit), thread_id))
        return cast(list[ThreadCheckpointRow], self._decoded(_sized(found) if sealed else found))

    def thread_heads(
        self, thread_id: str, limit: int = 50, *, preview_bytes: int = PREVIEW_BYTES
    ) -> list[ThreadHeadRow]:
        """The newest checkpoint of each of the thread's namespaces, with a preview of its
        value when it is ``json``: the root graph's first, then the most recently
        checkpointed, at most ``limit``."""
        if "langgraph_checkpoints" not in self._tables:
            return []
        cap = row_limit(preview_bytes)
        sealed = self._tx.sealer is not None
        statement = _HEADS["langgraph_writes" in self._tables, sealed]
        params = (thread_id, row_limit(limit), thread_id)
        found = self._tx.rows(statement, params if sealed else (min(cap, _MAX_HEAD), *params))
        for row in self._decoded(_sized(found) if sealed else found):
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
        sealed = self._tx.sealer is not None
        params = (thread_id, checkpoint_ns, checkpoint_id, row_limit(limit))
        found = self._tx.rows(_WRITES[sealed], params if sealed else (min(cap, _MAX_HEAD), *params))
        for row in _sized(found) if sealed else found:
            preview(row, cap)
        return cast(list[ThreadWriteRow], found)
