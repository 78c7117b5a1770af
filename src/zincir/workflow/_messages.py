"""Durable messages between runs (signals, human approvals) on the ``messages`` table.

Sends are keyed: a run's n-th send to (recipient, topic) has a deterministic key, so a send
replayed after a crash finds its stored message instead of adding another. A receive takes the
oldest unreceived message of its topic and stamps it with the receive key, so each message is
delivered to one receive of its run, and a replayed receive returns the same message. A
receive timeout is a stored deadline, like a sleep.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import apsw

from .._errors import InvalidInput, RunNotFound
from .._json import dumps, loads_strict
from .._time import as_timedelta, from_db, to_db
from ..runs._lease import check_run_id
from ..store import SQLiteStore
from ._core import Attempt, Core, check_name, clear_wait, set_wait
from ._timers import ensure_timer, fire_timer, timer_state

__all__ = ["Message", "receive", "send_from_run", "send_message"]

_COLUMNS = "id, to_run_id, topic, payload, from_run_id, send_key, created_at"


@dataclass(frozen=True, slots=True)
class Message:
    """A delivered message: its payload and where it came from."""

    id: int
    to_run_id: str
    topic: str
    payload: Any
    from_run_id: str | None
    key: str | None
    created_at: datetime


def _message(row: tuple[Any, ...]) -> Message:
    mid, to, topic, payload, sender, key, created = row
    return Message(mid, to, topic, loads_strict(payload), sender, key, from_db(created))


def _insert(conn: apsw.Connection, now: datetime, to_run_id: str, topic: str, body: str,
            sender: str | None, key: str | None) -> int:
    exists = conn.execute("SELECT 1 FROM agent_runs WHERE id = ?", (to_run_id,)).fetchone()
    if exists is None:
        raise RunNotFound(f"cannot send {topic!r}: no run {to_run_id!r} in this store",
                          run_id=to_run_id)
    row = conn.execute(
        "INSERT INTO messages (to_run_id, topic, payload, from_run_id, send_key, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
        (to_run_id, topic, body, sender, key, to_db(now)),
    ).fetchone()
    assert row is not None  # RETURNING of a successful INSERT
    return int(row[0])


def _same_message(found: tuple[Any, ...], to_run_id: str, topic: str, key: str) -> int:
    mid, to, stored_topic = found
    if (to, stored_topic) != (to_run_id, topic):
        raise InvalidInput(
            f"send key {key!r} already sent {stored_topic!r} to run {to!r}; "
            "use a distinct key for each message",
            run_id=to_run_id,
        )
    return int(mid)


async def send_message(store: SQLiteStore, to_run_id: str, topic: str, payload: Any, *,
                       key: str | None = None) -> int:
    """Send from outside any run (e.g. a human approval); returns the message id.

    With ``key``, repeating the send (a retried request) returns the first message's id.
    """
    check_run_id(to_run_id)
    check_name(topic, "a topic", to_run_id)
    if key is not None:
        check_name(key, "a send key", to_run_id)
    body = dumps(payload, what=f"the payload of message {topic!r}", run_id=to_run_id)

    def write(conn: apsw.Connection) -> int:
        if key is not None:
            found = conn.execute(
                "SELECT id, to_run_id, topic FROM messages WHERE to_run_id = ? AND send_key = ? "
                "AND from_run_id IS NULL",
                (to_run_id, key),
            ).fetchone()
            if found is not None:
                return _same_message(found, to_run_id, topic, key)
        return _insert(conn, store.clock(), to_run_id, topic, body, None, key)

    return await store.write(write)


async def send_from_run(core: Core, to_run_id: str, topic: str, payload: Any,
                        key: str | None) -> int:
    """A fenced send from the workflow's run, deduplicated by its deterministic key."""
    run_id = core.run_id
    check_run_id(to_run_id)
    check_name(topic, "a topic", run_id)
    if key is None:
        send_key = dumps(["send", to_run_id, topic, core.next_count("send", to_run_id, topic)])
    else:
        send_key = check_name(key, "a send key", run_id)
    body = dumps(payload, what=f"the payload of message {topic!r}", run_id=run_id)

    def write(conn: apsw.Connection, now: datetime) -> int:
        found = conn.execute(
            "SELECT id, to_run_id, topic FROM messages WHERE from_run_id = ? AND send_key = ?",
            (run_id, send_key),
        ).fetchone()
        if found is not None:
            return _same_message(found, to_run_id, topic, send_key)
        core.fence(conn, now)
        mid = _insert(conn, now, to_run_id, topic, body, run_id, send_key)
        event = {"to": to_run_id, "topic": topic, "key": send_key, "message_id": mid}
        core.fence(conn, now, [("message_sent", dumps(event), None)])
        return mid

    return await core.write(write)


def _received(conn: apsw.Connection, run_id: str, recv_key: str) -> Message | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM messages WHERE to_run_id = ? AND received_by = ?",
        (run_id, recv_key),
    ).fetchone()
    return None if row is None else _message(row)


async def receive(core: Core, topic: str, timeout: timedelta | float | None,
                  key: str | None) -> Message | None:
    """Take the next message on ``topic`` for this run; None once the stored deadline passes."""
    run_id = core.run_id
    check_name(topic, "a topic", run_id)
    limit = None if timeout is None else as_timedelta(timeout, name="timeout")
    if limit is not None and limit < timedelta(0):
        raise InvalidInput(f"recv {topic!r}: timeout must not be negative", run_id=run_id)
    if key is None:
        recv_key = f"{topic}#{core.next_count('recv', topic)}"  # n after the last '#'
    else:
        recv_key = check_name(key, "a receive key", run_id)
    deadline_name = "zincir.recv:" + recv_key

    def replay(conn: apsw.Connection) -> tuple[bool, Message | None]:
        message = _received(conn, run_id, recv_key)
        if message is not None:
            return True, message
        timer = timer_state(conn, run_id, deadline_name)
        return (timer is not None and timer[1]), None

    done, message = await core.read(replay)
    if done:
        return message

    def attempt(conn: apsw.Connection, now: datetime) -> Attempt[Message | None]:
        done, message = replay(conn)
        if done:
            return True, message, None
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM messages WHERE to_run_id = ? AND topic = ? "
            "AND received_at IS NULL ORDER BY id LIMIT 1",
            (run_id, topic),
        ).fetchone()
        if row is not None:
            taken = _message(row)
            event = {"topic": topic, "key": recv_key, "message_id": taken.id,
                     "from": taken.from_run_id}
            core.fence(conn, now, [("message_received", dumps(event), None)])
            conn.execute(
                "UPDATE messages SET received_by = ?, received_at = ? WHERE id = ?",
                (recv_key, to_db(now), taken.id),
            )
            conn.execute(
                "UPDATE timers SET completed_at = ? WHERE run_id = ? AND name = ? "
                "AND completed_at IS NULL",
                (to_db(now), run_id, deadline_name),
            )
            clear_wait(conn, run_id, "message", topic)
            return True, taken, None
        deadline = None
        if limit is not None:
            deadline = ensure_timer(core, conn, now, deadline_name, limit)[0]
            if now >= deadline:
                fire_timer(core, conn, now, deadline_name, "recv_timed_out",
                           {"topic": topic, "key": recv_key})
                clear_wait(conn, run_id, "message", topic)
                return True, None, deadline
        core.fence(conn, now)
        set_wait(conn, run_id, "message", topic, deadline)
        return False, None, deadline

    def ready(conn: apsw.Connection) -> bool:
        return conn.execute(
            "SELECT 1 FROM messages WHERE to_run_id = ? AND topic = ? AND received_at IS NULL "
            "LIMIT 1",
            (run_id, topic),
        ).fetchone() is not None

    return await core.block("message", topic, attempt, ready)
