"""Durable messages between runs (PostgreSQL): keyed sends, once-only receives.

A send is keyed (by its sender run and key, or by recipient and key from outside any run),
so a replayed send finds its stored message; concurrent sends of one key store one message
(``ON CONFLICT`` on the key's unique index). A receive takes the oldest unreceived message
of its topic and stamps it with the receive key, so a replayed receive returns the same
message. Every taker of a run's messages is one of the run's fenced writers and holds the
run's row lock while it takes, so two receives never take one message, and a message a
receive did not see is left for its next attempt. A receive timeout is a stored timer named
after the receive key.
"""

from __future__ import annotations

from datetime import timedelta

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
from ._base import Conn, PostgresBase, one
from ._log import append
from ._tx import PostgresTx

__all__ = ["MessageOps", "take_messages"]

_EXTERNAL_KEY = "(to_run_id, send_key) WHERE from_run_id IS NULL AND send_key IS NOT NULL"
_RUN_KEY = "(from_run_id, send_key) WHERE send_key IS NOT NULL"
_SENT_EXTERNAL = (
    "SELECT id, to_run_id, topic FROM messages "
    "WHERE to_run_id = %s AND send_key = %s AND from_run_id IS NULL"
)
_SENT_FROM = "SELECT id, to_run_id, topic FROM messages WHERE from_run_id = %s AND send_key = %s"


def _insert(
    conn: Conn,
    to_run_id: str,
    topic: str,
    body: str,
    sender: str | None,
    key: str | None,
    conflict: str,
) -> int | None:
    """Store a message; its id, or None if its key (on the index ``conflict``) is taken."""
    exists = conn.execute("SELECT 1 FROM agent_runs WHERE id = %s", (to_run_id,)).fetchone()
    if exists is None:
        raise recipient_not_found(topic, to_run_id)
    row = conn.execute(
        "INSERT INTO messages (to_run_id, topic, payload, from_run_id, send_key, created_at) "
        f"VALUES (%s, %s, %s, %s, %s, zincir_now()) ON CONFLICT {conflict} DO NOTHING "
        "RETURNING id",
        (to_run_id, topic, body, sender, key),
    ).fetchone()
    return None if row is None else int(row[0])


def take_messages(conn: Conn, to_run_id: str, topic: str, taker: str, **about: str) -> None:
    """Mark the unreceived messages of ``topic`` to a run as received by ``taker``; with
    ``about``, only those whose payload has these top-level fields (``call_id="c1"``).

    The caller holds the run's row lock (it appended under the run's lease), which orders
    it with the run's receives."""
    where = " AND payload::json ->> %s::text = %s" * len(about)
    fields = [value for pair in about.items() for value in pair]
    conn.execute(
        "UPDATE messages SET received_by = %s, received_at = zincir_now() WHERE to_run_id = %s "
        f"AND topic = %s AND received_at IS NULL{where}",
        (taker, to_run_id, topic, *fields),
    )


def _replayed(conn: Conn, run_id: str, recv_key: str) -> WaitAttempt[ReceivedMessage | None] | None:
    row = conn.execute(
        f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE to_run_id = %s AND received_by = %s",
        (run_id, recv_key),
    ).fetchone()
    if row is not None:
        return WaitAttempt(True, received_message(row))
    deadline = read_timer(PostgresTx(conn), run_id, receive_deadline(recv_key))
    if deadline is not None and deadline.completed:
        return WaitAttempt(True, None, deadline.wake_at)
    return None


def _receive(
    conn: Conn, lease: Lease, topic: str, recv_key: str, timeout: timedelta | None
) -> WaitAttempt[ReceivedMessage | None]:
    """The receive under the run's row lock (taken by the caller's ``append``)."""
    deadline_name = receive_deadline(recv_key)
    tx = PostgresTx(conn)
    row = conn.execute(
        f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE to_run_id = %s AND topic = %s "
        "AND received_at IS NULL ORDER BY id LIMIT 1 FOR UPDATE",
        (lease.run_id, topic),
    ).fetchone()
    if row is not None:
        taken = received_message(row)
        append(conn, lease, [message_received(topic, recv_key, taken)])
        conn.execute(
            "UPDATE messages SET received_by = %s, received_at = zincir_now() WHERE id = %s",
            (recv_key, taken.id),
        )
        conn.execute(
            "UPDATE timers SET completed_at = zincir_now() WHERE run_id = %s AND name = %s "
            "AND completed_at IS NULL",
            (lease.run_id, deadline_name),
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
    set_wait(tx, lease.run_id, "message", topic, deadline)
    return WaitAttempt(False, None, deadline)


class MessageOps(PostgresBase):
    """Sends, receives and the readiness probe of a pending receive."""

    async def send_message(
        self, to_run_id: str, topic: str, payload_json: str, *, key: str | None = None
    ) -> int:
        """Send from outside any run; with ``key`` a repeated send returns the first id.

        RunNotFound for a missing recipient; InvalidInput if ``key`` already sent another
        topic or to another run.
        """

        def write(conn: Conn) -> int:
            if key is not None:
                found = conn.execute(_SENT_EXTERNAL, (to_run_id, key)).fetchone()
                if found is not None:
                    return same_message(found, to_run_id, topic, key)
            mid = _insert(conn, to_run_id, topic, payload_json, None, key, _EXTERNAL_KEY)
            if mid is not None:
                return mid
            assert key is not None  # only a keyed send can conflict
            # A concurrent send of this key committed first (ON CONFLICT waited for it).
            found = one(conn, _SENT_EXTERNAL, (to_run_id, key))
            return same_message(found, to_run_id, topic, key)

        return await self._write(write)

    async def send_from_run(
        self, lease: Lease, to_run_id: str, topic: str, payload_json: str, *, send_key: str
    ) -> int:
        """Send from the lease's run (fenced, with ``message_sent``), once per ``send_key``.

        A replayed send returns the stored message's id without writing.
        """

        def write(conn: Conn) -> int:
            found = conn.execute(_SENT_FROM, (lease.run_id, send_key)).fetchone()
            if found is not None:
                return same_message(found, to_run_id, topic, send_key)
            append(conn, lease)  # the fence, and the run's row lock: its sends go one by one
            mid = _insert(conn, to_run_id, topic, payload_json, lease.run_id, send_key, _RUN_KEY)
            if mid is None:  # sent by a transaction that held the lock before this one
                found = one(conn, _SENT_FROM, (lease.run_id, send_key))
                return same_message(found, to_run_id, topic, send_key)
            append(conn, lease, [message_sent(to_run_id, topic, send_key, mid)])
            return mid

        return await self._write(write)

    async def replayed_receive(
        self, run_id: str, recv_key: str
    ) -> WaitAttempt[ReceivedMessage | None] | None:
        """What the receive ``recv_key`` of ``run_id`` already resolved to (its message, or
        a timeout with its deadline), or None if it is still pending."""
        return await self._read(lambda conn: _replayed(conn, run_id, recv_key))

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

        def write(conn: Conn) -> WaitAttempt[ReceivedMessage | None]:
            replayed = _replayed(conn, lease.run_id, recv_key)
            if replayed is not None:
                return replayed
            append(conn, lease)  # the fence, and the run's row lock: takers go one by one
            # Another attempt of this receive may have resolved it while this one waited.
            replayed = _replayed(conn, lease.run_id, recv_key)
            if replayed is not None:
                return replayed
            return _receive(conn, lease, topic, recv_key, timeout)

        return await self._write(write)

    async def message_ready(self, run_id: str, topic: str) -> bool:
        """Whether an unreceived message on ``topic`` waits for ``run_id`` (a cheap probe)."""

        def read(conn: Conn) -> bool:
            return (
                conn.execute(
                    "SELECT 1 FROM messages WHERE to_run_id = %s AND topic = %s "
                    "AND received_at IS NULL LIMIT 1",
                    (run_id, topic),
                ).fetchone()
                is not None
            )

        return await self._read(read)
