"""Durable sleep: an absolute wake time is stored before any waiting.

Timers are not claims: a restarted ``sleep(name)`` finds the stored wake time and waits only
what remains, without ``recover()``. A due timer is marked completed and returns at once.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import apsw

from .._errors import InvalidInput
from .._json import dumps
from .._time import as_timedelta, from_db, to_db
from ._core import Attempt, Core, check_name, clear_wait, set_wait

__all__ = ["durable_sleep", "ensure_timer", "fire_timer", "timer_state"]


def timer_state(conn: apsw.Connection, run_id: str, name: str) -> tuple[datetime, bool] | None:
    """(wake time, completed) of a stored timer, or None."""
    row = conn.execute(
        "SELECT wake_at, completed_at FROM timers WHERE run_id = ? AND name = ?", (run_id, name)
    ).fetchone()
    return None if row is None else (from_db(row[0]), row[1] is not None)


def ensure_timer(core: Core, conn: apsw.Connection, now: datetime, name: str,
                 duration: timedelta) -> tuple[datetime, bool]:
    """The stored timer ``name``, created at ``now + duration`` (with ``timer_set``) if absent."""
    state = timer_state(conn, core.run_id, name)
    if state is not None:
        return state
    wake = now + duration
    core.fence(conn, now, [("timer_set", dumps({"name": name, "wake_at": to_db(wake)}), None)])
    conn.execute(
        "INSERT INTO timers (run_id, name, wake_at, created_at) VALUES (?, ?, ?, ?)",
        (core.run_id, name, to_db(wake), to_db(now)),
    )
    return wake, False


def fire_timer(core: Core, conn: apsw.Connection, now: datetime, name: str, event: str,
               details: dict[str, Any] | None = None) -> None:
    """Mark timer ``name`` completed and log ``event`` (with ``details``) for it."""
    core.fence(conn, now, [(event, dumps({"name": name, **(details or {})}), None)])
    conn.execute(
        "UPDATE timers SET completed_at = ? WHERE run_id = ? AND name = ? "
        "AND completed_at IS NULL",
        (to_db(now), core.run_id, name),
    )


async def durable_sleep(core: Core, name: str, duration: timedelta | float) -> None:
    """Sleep until the stored wake time of timer ``name`` (created now + ``duration``)."""
    run_id = core.run_id
    check_name(name, "a timer name", run_id)
    length = as_timedelta(duration, name="duration")
    if length < timedelta(0):
        raise InvalidInput(f"sleep {name!r}: duration must not be negative", run_id=run_id)
    stored = await core.read(lambda conn: timer_state(conn, run_id, name))
    if stored is not None and stored[1]:
        return

    def attempt(conn: apsw.Connection, now: datetime) -> Attempt[None]:
        wake, completed = ensure_timer(core, conn, now, name, length)
        if completed:
            return True, None, wake
        if now >= wake:
            fire_timer(core, conn, now, name, "timer_completed")
            clear_wait(conn, run_id, "timer", name)
            return True, None, wake
        core.fence(conn, now)
        set_wait(conn, run_id, "timer", name, wake)
        return False, None, wake

    await core.block("timer", name, attempt, None)
