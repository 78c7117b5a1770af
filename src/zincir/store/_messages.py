"""Durable messages between runs on the ``messages`` table: keyed sends, once-only receives.

A send is keyed (by its sender run and key, or by recipient and key from outside any run),
so a replayed send finds its stored message; concurrent sends of one key store one message
(``ON CONFLICT`` on the key's unique index, and the loser reads the winner's). A receive
takes the oldest unreceived message of its topic and stamps it with the receive key, so a
replayed receive returns the same message. Every taker of a run's messages is one of the
run's fenced writers: on PostgreSQL it holds the run's row lock while it takes (and looks
again for its own receive once it has it), so two receives never take one message, and a
message a receive did not see is left for its next attempt. A receive timeout is a stored
timer named after the receive key.
"""

from __future__ import annotations

import json
from datetime import timedelta
from functools import cache
from typing import Final

from ._records import Lease
from ._sql import Rules, Sql, Tx, sql
from ._timers import clear_wait, ensure_timer, fire_timer, read_timer, set_wait
from ._workflow_records import (
    MESSAGE_COLUMNS,
    MESSAGE_PAYLOAD,
    ReceivedMessage,
    WaitAttempt,
    received_message,
)
from ._workflow_rules import (
    message_received,
    message_sent,
    receive_deadline,
    recipient_not_found,
    same_message,
)

__all__ = [
    "MessageOps",
    "receive_attempt",
    "send",
    "send_from_run",
    "send_message",
    "take_messages",
]

_RUN: Final = sql("SELECT 1 FROM agent_runs WHERE id = ?")
_INSERT: Final = sql(
    "INSERT INTO messages (to_run_id, topic, payload, from_run_id, send_key, created_at) "
    "VALUES (?, ?, ?, ?, ?, zincir_now()) ON CONFLICT DO NOTHING RETURNING id",
    seals=(2,),
)
_SENT_EXTERNAL: Final = sql(
    "SELECT id, to_run_id, topic FROM messages "
    "WHERE to_run_id = ? AND send_key = ? AND from_run_id IS NULL"
)
_SENT_FROM: Final = sql(
    "SELECT id, to_run_id, topic FROM messages WHERE from_run_id = ? AND send_key = ?"
)
_RECEIVED: Final = sql(
    f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE to_run_id = ? AND received_by = ?",
    opens=(MESSAGE_PAYLOAD,),
    run_param=0,
)
_OLDEST: Final = sql(
    f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE to_run_id = ? AND topic = ? "
    "AND received_at IS NULL ORDER BY id LIMIT 1{for_update}",
    opens=(MESSAGE_PAYLOAD,),
    run_param=0,
)
_TAKE: Final = sql("UPDATE messages SET received_by = ?, received_at = zincir_now() WHERE id = ?")
_DEADLINE_MET: Final = sql(
    "UPDATE timers SET completed_at = zincir_now() WHERE run_id = ? AND name = ? "
    "AND completed_at IS NULL"
)
_UNRECEIVED: Final = sql(
    "SELECT id, payload FROM messages WHERE to_run_id = ? AND topic = ? "
    "AND received_at IS NULL ORDER BY id",
    opens=(1,),
    run_param=0,
)
_READY: Final = sql(
    "SELECT 1 FROM messages WHERE to_run_id = ? AND topic = ? AND received_at IS NULL LIMIT 1"
)


@cache
def _take_all(fields: int) -> Sql:
    """The statement taking a topic's unreceived messages whose payload matches ``fields``
    top-level fields (each given as its name, then its value)."""
    where = " AND {json_field:payload} = ?" * fields
    return sql(
        "UPDATE messages SET received_by = ?, received_at = zincir_now() WHERE to_run_id = ? "
        f"AND topic = ? AND received_at IS NULL{where}"
    )


def _insert(
    tx: Tx, to_run_id: str, topic: str, body: str, sender: str | None, key: str | None
) -> int | None:
    """Store a message; its id, or None if its key is taken (by a send that committed
    first, on PostgreSQL: ``ON CONFLICT`` waited for it). RunNotFound for no recipient."""
    if tx.one(_RUN, (to_run_id,)) is None:
        raise recipient_not_found(topic, to_run_id)
    row = tx.one(_INSERT, (to_run_id, topic, body, sender, key))
    return None if row is None else int(row[0])


def send(tx: Tx, to_run_id: str, topic: str, body: str) -> int:
    """Send a message from outside any run, without a key; its id."""
    mid = _insert(tx, to_run_id, topic, body, None, None)
    assert mid is not None, "a message without a key never conflicts"
    return mid


def send_message(tx: Tx, to_run_id: str, topic: str, body: str, key: str | None) -> int:
    """Send from outside any run; with ``key`` a repeated send returns the first id
    (InvalidInput if ``key`` sent another topic or to another run)."""
    if key is None:
        return send(tx, to_run_id, topic, body)
    found = tx.one(_SENT_EXTERNAL, (to_run_id, key))
    if found is None:
        mid = _insert(tx, to_run_id, topic, body, None, key)
        if mid is not None:
            return mid
        found = tx.one(_SENT_EXTERNAL, (to_run_id, key))
        assert found is not None, "a send that conflicted is stored"
    return same_message(found, to_run_id, topic, key)


def send_from_run(
    tx: Tx, lease: Lease, to_run_id: str, topic: str, body: str, send_key: str
) -> int:
    """Send from the lease's run (fenced, with ``message_sent``), once per ``send_key``; a
    replayed send returns the stored message's id without writing."""
    found = tx.one(_SENT_FROM, (lease.run_id, send_key))
    if found is None:
        tx.append(lease)  # the fence, and the run's row lock: its sends go one by one
        mid = _insert(tx, to_run_id, topic, body, lease.run_id, send_key)
        if mid is not None:
            tx.append(lease, [message_sent(to_run_id, topic, send_key, mid)])
            return mid
        # Sent by a transaction that held the run's row lock before this one.
        found = tx.one(_SENT_FROM, (lease.run_id, send_key))
        assert found is not None, "a send that conflicted is stored"
    return same_message(found, to_run_id, topic, send_key)


def take_messages(tx: Tx, to_run_id: str, topic: str, taker: str, **about: str) -> None:
    """Mark the unreceived messages of ``topic`` to a run as received by ``taker``; with
    ``about``, only those whose payload has these top-level fields (``call_id="c1"``).

    The caller appended under the run's lease (on PostgreSQL it holds the run's row lock),
    which orders it with the run's receives."""
    if about and tx.sealer is not None:  # sealed payloads: matched here, once opened
        taken = [
            (taker, mid)
            for mid, payload in tx.all(_UNRECEIVED, (to_run_id, topic))
            if _has_fields(payload, about)
        ]
        tx.executemany(_TAKE, taken)
        return
    fields = [value for pair in about.items() for value in pair]
    tx.execute(_take_all(len(about)), (taker, to_run_id, topic, *fields))


def _has_fields(payload: str, about: dict[str, str]) -> bool:
    """Whether the JSON object ``payload`` has each of ``about``'s top-level text fields, as
    :func:`_take_all`'s SQL judges it."""
    try:
        found = json.loads(payload)
    except ValueError:
        return False
    return isinstance(found, dict) and all(found.get(k) == v for k, v in about.items())


def replayed_receive(
    tx: Tx, run_id: str, recv_key: str
) -> WaitAttempt[ReceivedMessage | None] | None:
    """What the receive ``recv_key`` of ``run_id`` already resolved to (its message, or a
    timeout with its deadline), or None if it is still pending."""
    row = tx.one(_RECEIVED, (run_id, recv_key))
    if row is not None:
        return WaitAttempt(True, received_message(row, tx.time))
    deadline = read_timer(tx, run_id, receive_deadline(recv_key))
    if deadline is not None and deadline.completed:
        return WaitAttempt(True, None, deadline.wake_at)
    return None


def receive_attempt(
    tx: Tx, lease: Lease, topic: str, recv_key: str, timeout: timedelta | None
) -> WaitAttempt[ReceivedMessage | None]:
    """Resolve receive ``recv_key`` on ``topic``: replay it, take the oldest unreceived
    message (``message_received``), or time out once the stored deadline (created now +
    ``timeout`` on the first attempt) has passed (``recv_timed_out``, value None); otherwise
    record the run's wait on ``topic``, until the deadline if any."""
    replayed = replayed_receive(tx, lease.run_id, recv_key)
    if replayed is not None:
        return replayed
    tx.append(lease)  # the fence, and the run's row lock: takers go one by one
    # Another attempt of this receive may have resolved it while this one waited.
    replayed = replayed_receive(tx, lease.run_id, recv_key)
    if replayed is not None:
        return replayed
    deadline_name = receive_deadline(recv_key)
    row = tx.one(_OLDEST, (lease.run_id, topic))
    if row is not None:
        taken = received_message(row, tx.time)
        tx.append(lease, [message_received(topic, recv_key, taken)])
        tx.execute(_TAKE, (recv_key, taken.id))
        tx.execute(_DEADLINE_MET, (lease.run_id, deadline_name))
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


class MessageOps(Rules):
    """Sends, receives and the readiness probe of a pending receive."""

    async def send_message(
        self, to_run_id: str, topic: str, payload_json: str, *, key: str | None = None
    ) -> int:
        """Send from outside any run; with ``key`` a repeated send returns the first id.

        RunNotFound for a missing recipient; InvalidInput if ``key`` already sent another
        topic or to another run.
        """
        return await self._write_tx(
            lambda tx: send_message(tx, to_run_id, topic, payload_json, key)
        )

    async def send_from_run(
        self, lease: Lease, to_run_id: str, topic: str, payload_json: str, *, send_key: str
    ) -> int:
        """Send from the lease's run (fenced, with ``message_sent``), once per ``send_key``.

        A replayed send returns the stored message's id without writing.
        """
        return await self._write_tx(
            lambda tx: send_from_run(tx, lease, to_run_id, topic, payload_json, send_key)
        )

    async def replayed_receive(
        self, run_id: str, recv_key: str
    ) -> WaitAttempt[ReceivedMessage | None] | None:
        """What the receive ``recv_key`` of ``run_id`` already resolved to (its message, or
        a timeout with its deadline), or None if it is still pending."""
        return await self._read_tx(lambda tx: replayed_receive(tx, run_id, recv_key))

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
        return await self._write_tx(lambda tx: receive_attempt(tx, lease, topic, recv_key, timeout))

    async def message_ready(self, run_id: str, topic: str) -> bool:
        """Whether an unreceived message on ``topic`` waits for ``run_id`` (a cheap probe)."""
        return await self._read_tx(lambda tx: tx.one(_READY, (run_id, topic)) is not None)
