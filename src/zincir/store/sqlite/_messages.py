"""Durable messages between runs on the ``messages`` table: keyed sends, once-only receives.

A send is keyed (by its sender run and key, or by recipient and key from outside any run),
so a replayed send finds its stored message. A receive takes the oldest unreceived message
of its topic and stamps it with the receive key, so a replayed receive returns the same
message. A receive timeout is a stored timer named after the receive key.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import apsw

from ..._time import from_db, to_db
from .._records import Lease
from .._timers import clear_wait, ensure_timer, fire_timer, read_timer, set_wait
from .._workflow_records import MESSAGE_COLUMNS, ReceivedMessage, WaitAttempt, received_message
from .._workflow_rules import (
    message_received,
    message_sent,
    receive_deadline,
    recipient_not_found,
    same_message,
)
from ._base import SQLiteBase
from ._log import append
from ._tx import SqliteTx

__all__ = ["MessageOps"]


def _message(row: tuple[Any, ...]) -> ReceivedMessage:
    return received_message(row, from_db)


def _insert(
    conn: apsw.Connection,
    now: datetime,
    to_run_id: str,
    topic: str,
    body: str,
    sender: str | None,
    key: str | None,
) -> int:
    exists = conn.execute("SELECT 1 FROM agent_runs WHERE id = ?", (to_run_id,)).fetchone()
    if exists is None:
        raise recipient_not_found(topic, to_run_id)
    row = conn.execute(
        "INSERT INTO messages (to_run_id, topic, payload, from_run_id, send_key, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
        (to_run_id, topic, body, sender, key, to_db(now)),
    ).fetchone()
    assert row is not None  # RETURNING of a successful INSERT
    return int(row[0])


def take_messages(
    conn: apsw.Connection, now: datetime, to_run_id: str, topic: str, taker: str, **about: str
) -> None:
    """Mark the unreceived messages of ``topic`` to a run as received by ``taker``; with
    ``about``, only those whose payload has these top-level fields (``call_id="c1"``)."""
    where = "".join(f" AND json_extract(payload, '$.{field}') = ?" for field in about)
    conn.execute(
        "UPDATE messages SET received_by = ?, received_at = ? WHERE to_run_id = ? "
        f"AND topic = ? AND received_at IS NULL{where}",
        (taker, to_db(now), to_run_id, topic, *about.values()),
    )


def _replayed(
    conn: apsw.Connection, now: datetime, run_id: str, recv_key: str
) -> WaitAttempt[ReceivedMessage | None] | None:
    row = conn.execute(
        f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE to_run_id = ? AND received_by = ?",
        (run_id, recv_key),
    ).fetchone()
    if row is not None:
        return WaitAttempt(True, _message(row))
    deadline = read_timer(SqliteTx(conn, now), run_id, receive_deadline(recv_key))
    if deadline is not None and deadline.completed:
        return WaitAttempt(True, None, deadline.wake_at)
    return None


class MessageOps(SQLiteBase):
    """Sends, receives and the readiness probe of a pending receive."""

    async def send_message(
        self, to_run_id: str, topic: str, payload_json: str, *, key: str | None = None
    ) -> int:
        """Send from outside any run; with ``key`` a repeated send returns the first id.

        RunNotFound for a missing recipient; InvalidInput if ``key`` already sent another
        topic or to another run.
        """

        def write(conn: apsw.Connection) -> int:
            if key is not None:
                found = conn.execute(
                    "SELECT id, to_run_id, topic FROM messages WHERE to_run_id = ? "
                    "AND send_key = ? AND from_run_id IS NULL",
                    (to_run_id, key),
                ).fetchone()
                if found is not None:
                    return same_message(found, to_run_id, topic, key)
            return _insert(conn, self.clock(), to_run_id, topic, payload_json, None, key)

        return await self._write(write)

    async def send_from_run(
        self, lease: Lease, to_run_id: str, topic: str, payload_json: str, *, send_key: str
    ) -> int:
        """Send from the lease's run (fenced, with ``message_sent``), once per ``send_key``.

        A replayed send returns the stored message's id without writing.
        """

        def write(conn: apsw.Connection) -> int:
            found = conn.execute(
                "SELECT id, to_run_id, topic FROM messages WHERE from_run_id = ? AND send_key = ?",
                (lease.run_id, send_key),
            ).fetchone()
            if found is not None:
                return same_message(found, to_run_id, topic, send_key)
            now = self.clock()
            append(conn, lease, now)
            mid = _insert(conn, now, to_run_id, topic, payload_json, lease.run_id, send_key)
            append(conn, lease, now, [message_sent(to_run_id, topic, send_key, mid)])
            return mid

        return await self._write(write)

    async def replayed_receive(
        self, run_id: str, recv_key: str
    ) -> WaitAttempt[ReceivedMessage | None] | None:
        """What the receive ``recv_key`` of ``run_id`` already resolved to (its message, or
        a timeout with its deadline), or None if it is still pending."""
        return await self._read(lambda conn: _replayed(conn, self.clock(), run_id, recv_key))

    async def receive_attempt(
        self,
        lease: Lease,
        topic: str,
        recv_key: str,
        timeout: timedelta | None,
    ) -> WaitAttempt[ReceivedMessage | None]:
        """Resolve receive ``recv_key`` on ``topic``: replay it, take the oldest unreceived
        message (``message_received``), or time out once the stored deadline (created now +
        ``timeout`` on the first attempt) has passed (``recv_timed_out``, value None).

        Otherwise the run's wait on ``topic`` is recorded, until the deadline if any.
        """
        deadline_name = receive_deadline(recv_key)

        def write(conn: apsw.Connection) -> WaitAttempt[ReceivedMessage | None]:
            now = self.clock()
            replayed = _replayed(conn, now, lease.run_id, recv_key)
            if replayed is not None:
                return replayed
            tx = SqliteTx(conn, now)
            row = conn.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE to_run_id = ? AND topic = ? "
                "AND received_at IS NULL ORDER BY id LIMIT 1",
                (lease.run_id, topic),
            ).fetchone()
            if row is not None:
                taken = _message(row)
                append(conn, lease, now, [message_received(topic, recv_key, taken)])
                conn.execute(
                    "UPDATE messages SET received_by = ?, received_at = ? WHERE id = ?",
                    (recv_key, to_db(now), taken.id),
                )
                conn.execute(
                    "UPDATE timers SET completed_at = ? WHERE run_id = ? AND name = ? "
                    "AND completed_at IS NULL",
                    (to_db(now), lease.run_id, deadline_name),
                )
                clear_wait(tx, lease.run_id, "message", topic)
                return WaitAttempt(True, taken)
            deadline = None
            if timeout is not None:
                timer, due = ensure_timer(tx, lease, deadline_name, timeout)
                deadline = timer.wake_at
                if due:
                    details = {"topic": topic, "key": recv_key}
                    fire_timer(tx, lease, deadline_name, "recv_timed_out", details)
                    clear_wait(tx, lease.run_id, "message", topic)
                    return WaitAttempt(True, None, deadline)
            append(conn, lease, now)
            set_wait(tx, lease.run_id, "message", topic, deadline)
            return WaitAttempt(False, None, deadline)

        return await self._write(write)

    async def message_ready(self, run_id: str, topic: str) -> bool:
        """Whether an unreceived message on ``topic`` waits for ``run_id`` (a cheap probe)."""

        def read(conn: apsw.Connection) -> bool:
            return (
                conn.execute(
                    "SELECT 1 FROM messages WHERE to_run_id = ? AND topic = ? "
                    "AND received_at IS NULL LIMIT 1",
                    (run_id, topic),
                ).fetchone()
                is not None
            )

        return await self._read(read)
